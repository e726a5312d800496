"""The mirrors `backbone dev up` starts: which ones, and a start command the `backbone mirror` parser accepts
as the intended settings."""

from __future__ import annotations

import re

import pytest

from backbone.cli import build_parser
from backbone.cli.mirror import settings
from backbone.dev import mirrors
from backbone.mirror.config import MirrorConfig

pytestmark = pytest.mark.unit


def test_each_datacenter_mirrors_into_the_aggregate_and_nothing_without_one() -> None:
    assert mirrors.routes(("dc1", "dc2", "aggregate")) == [("dc1", "aggregate"), ("dc2", "aggregate")]
    assert mirrors.routes(("aggregate", "east")) == [("east", "aggregate")]
    assert mirrors.routes(("east", "west")) == []


def test_the_start_command_asks_for_identity_naming_of_every_non_internal_topic() -> None:
    command = mirrors.command("dc1", "aggregate", "h:1,h:2", "h:3", 9400, python="python3")
    assert command[:3] == ["python3", "-m", "backbone"]
    args = build_parser().parse_args(command[3:])
    config = MirrorConfig.from_properties(settings(args))
    assert (config.source_bootstrap, config.target_bootstrap) == ("h:1,h:2", "h:3")
    assert (config.source_alias, config.target_alias, config.naming) == ("dc1", "aggregate", "identity")
    assert (config.group_id, config.instance_id) == ("mirror-dc1-aggregate", "mirror-dc1-aggregate-1")
    assert config.metrics_port == 9400
    pattern = config.subscription_pattern()
    assert re.fullmatch(pattern, "pageviews") and not re.fullmatch(pattern, "__consumer_offsets")
    assert mirrors.marker("h:1,h:2", "h:3") in " ".join(command)
