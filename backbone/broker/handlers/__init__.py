"""One handler module per API (or family of APIs); each registers itself with the broker's API table."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backbone.broker.server import Broker

HANDLER_MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "offset_for_leader_epoch",
    "init_producer_id",
    "topics",
    "configs",
    "cluster",
    "delete_records",
    "elect_leaders",
    "reassignments",
    "describe_log_dirs",
    "find_coordinator",
    "offset_commit",
    "offset_fetch",
    "group_deletion",
    "group_membership",
    "group_listing",
    "sasl",
    "scram_credentials",
    "acls",
    "client_quotas",
)


def register_all(broker: Broker) -> None:
    for name in HANDLER_MODULES:
        importlib.import_module(f"backbone.broker.handlers.{name}").register(broker)
