"""Every API the broker serves, each handler built from the narrow pieces it reads, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from backbone.broker.handlers.acls import acls_handlers
from backbone.broker.handlers.admin_common import admin_pieces
from backbone.broker.handlers.api_versions import api_versions_handler
from backbone.broker.handlers.client_quotas import client_quotas_handlers
from backbone.broker.handlers.cluster import describe_cluster_handler
from backbone.broker.handlers.configs import configs_handlers
from backbone.broker.handlers.delete_records import delete_records_handler
from backbone.broker.handlers.describe_log_dirs import describe_log_dirs_handler
from backbone.broker.handlers.elect_leaders import elect_leaders_handler
from backbone.broker.handlers.fetch import fetch_handler
from backbone.broker.handlers.find_coordinator import find_coordinator_handler
from backbone.broker.handlers.group_deletion import group_deletion_handlers
from backbone.broker.handlers.group_listing import group_listing_handlers
from backbone.broker.handlers.group_membership import group_membership_handlers
from backbone.broker.handlers.init_producer_id import init_producer_id_handler, zookeeper_allocator
from backbone.broker.handlers.list_offsets import list_offsets_handler
from backbone.broker.handlers.metadata import TopicAutoCreation, metadata_handler
from backbone.broker.handlers.offset_commit import offset_commit_handler
from backbone.broker.handlers.offset_fetch import offset_fetch_handler
from backbone.broker.handlers.offset_for_leader_epoch import offset_for_leader_epoch_handler
from backbone.broker.handlers.produce import produce_handler
from backbone.broker.handlers.reassignments import reassignments_handlers
from backbone.broker.handlers.sasl import sasl_handlers
from backbone.broker.handlers.scram_credentials import scram_credentials_handlers
from backbone.broker.handlers.topics import topics_handlers
from backbone.broker.network import Handler
from backbone.protocol.api import ApiKey

if TYPE_CHECKING:
    from backbone.broker.server import Broker


def register_all(broker: Broker) -> None:
    """Serve every API on `broker`'s API table (which refuses an API registered twice)."""
    for family in _handler_families(broker):
        for api_key, handler in family.items():
            broker.api_table.register(api_key, handler)


def _handler_families(broker: Broker) -> list[Mapping[ApiKey, Handler]]:
    admin = admin_pieces(broker)
    coordinator = broker.group_coordinator
    auto_creation = TopicAutoCreation(
        broker.config, broker.cache, broker.store, broker.zk, broker.group_coordination.ensure_offsets_topic
    )
    metadata = metadata_handler(
        broker.cache,
        broker.config,
        broker.authorizer,
        unreachable=lambda: broker.liveness.unreachable,
        generation=lambda: broker.metadata_generation,
        auto_create=auto_creation.create,
    )
    allocator = zookeeper_allocator(broker.store, broker.zk, broker.broker_id)
    return [
        {ApiKey.API_VERSIONS: api_versions_handler(broker.api_table)},
        {ApiKey.METADATA: metadata},
        {ApiKey.PRODUCE: produce_handler(broker.replicas, broker.authorizer, broker.config, broker.metrics)},
        {
            ApiKey.FETCH: fetch_handler(
                broker.replicas, broker.authorizer, broker.metrics, broker.fetch_sessions
            )
        },
        {ApiKey.LIST_OFFSETS: list_offsets_handler(broker.replicas)},
        {ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch_handler(broker.replicas)},
        {ApiKey.INIT_PRODUCER_ID: init_producer_id_handler(allocator)},
        topics_handlers(admin, broker.metadata_waiter),
        configs_handlers(admin),
        {ApiKey.DESCRIBE_CLUSTER: describe_cluster_handler(broker.cache, broker.authorizer)},
        {ApiKey.DELETE_RECORDS: delete_records_handler(broker.replicas)},
        {ApiKey.ELECT_LEADERS: elect_leaders_handler(broker.controller.elections)},
        reassignments_handlers(broker.controller.reassignments),
        {ApiKey.DESCRIBE_LOG_DIRS: describe_log_dirs_handler(broker.replicas, broker.config.log_dirs)},
        {ApiKey.FIND_COORDINATOR: find_coordinator_handler(broker.group_coordination, broker.cache)},
        {ApiKey.OFFSET_COMMIT: offset_commit_handler(coordinator)},
        {ApiKey.OFFSET_FETCH: offset_fetch_handler(coordinator)},
        group_deletion_handlers(coordinator),
        group_membership_handlers(coordinator),
        group_listing_handlers(coordinator, broker.authorizer),
        sasl_handlers(),
        scram_credentials_handlers(broker.authorizer, broker.store, broker.zk),
        acls_handlers(broker.authorizer, broker.store, broker.zk),
        client_quotas_handlers(broker.authorizer, broker.store, broker.zk),
    ]
