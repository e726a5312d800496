"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against a real metadata cache and broker config,
with the cluster store's operations kept in memory (no broker, no network, no ZooKeeper): a topic's values
are its overrides over the broker's, broker settings are read-only, and a bad change reaches no store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kio.schema.alter_configs.v2 import request as alter_configs
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental

from backbone.broker.handlers.admin_common import AdminPieces
from backbone.broker.handlers.config_catalog import ConfigSource
from backbone.broker.handlers.configs import APPEND, BROKER, DELETE, SET, SUBTRACT, TOPIC, configs_handlers
from backbone.protocol.api import ApiKey
from tests.helpers.broker_pieces import BROKER_ID, broker_pieces
from tests.helpers.handler_context import handler_context
from tests.helpers.memory_store import MemoryStore, zk

pytestmark = pytest.mark.unit


class Configs:
    def __init__(self, store: MemoryStore, handlers: dict) -> None:
        self.store = store
        self.handlers = handlers

    async def describe(self, resource_type: int, name: str, keys: tuple[str, ...] | None = None):
        request = describe_configs.DescribeConfigsRequest(
            resources=(
                describe_configs.DescribeConfigsResource(
                    resource_type=resource_type, resource_name=name, configuration_keys=keys
                ),
            ),
            include_synonyms=True,
            include_documentation=False,
        )
        answer = await self.handlers[ApiKey.DESCRIBE_CONFIGS](handler_context(request))
        (result,) = answer.results
        return result

    async def incremental(self, resource_type: int, name: str, *operations: tuple[int, str, str | None]):
        request = incremental.IncrementalAlterConfigsRequest(
            resources=(
                incremental.AlterConfigsResource(
                    resource_type=resource_type,
                    resource_name=name,
                    configs=tuple(
                        incremental.AlterableConfig(name=key, config_operation=op, value=value)
                        for op, key, value in operations
                    ),
                ),
            ),
            validate_only=False,
        )
        answer = await self.handlers[ApiKey.INCREMENTAL_ALTER_CONFIGS](handler_context(request))
        (result,) = answer.responses
        return result.error_code, result.error_message

    async def replace(self, name: str, **values: str):
        request = alter_configs.AlterConfigsRequest(
            resources=(
                alter_configs.AlterConfigsResource(
                    resource_type=TOPIC,
                    resource_name=name,
                    configs=tuple(alter_configs.AlterableConfig(name=k, value=v) for k, v in values.items()),
                ),
            ),
            validate_only=False,
        )
        answer = await self.handlers[ApiKey.ALTER_CONFIGS](handler_context(request))
        (result,) = answer.responses
        return result.error_code


@pytest.fixture
async def configs(tmp_path) -> AsyncIterator[Configs]:
    pieces = broker_pieces(tmp_path, **{"log.retention.ms": 5000})
    store = MemoryStore()
    store.create_topic("events", 1, 1, configs={"segment.bytes": "1048576"})
    yield Configs(store, configs_handlers(AdminPieces(BROKER_ID, pieces.config, pieces.cache, store, zk)))
    await pieces.close()


async def test_a_topic_shows_its_overrides_over_the_broker_values(configs) -> None:
    result = await configs.describe(TOPIC, "events", ("segment.bytes", "retention.ms", "cleanup.policy"))
    entries = {e.name: e for e in result.configs}
    assert result.error_code == ErrorCode.none
    assert (entries["segment.bytes"].value, entries["segment.bytes"].config_source) == (
        "1048576",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
    )
    # Not overridden: the broker's file sets log.retention.ms, the topic inherits it as its synonym.
    assert (entries["retention.ms"].value, entries["retention.ms"].config_source) == (
        "5000",
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    assert [s.name for s in entries["retention.ms"].synonyms] == ["log.retention.ms"]
    assert entries["cleanup.policy"].config_source == ConfigSource.DEFAULT_CONFIG


async def test_this_broker_is_described_read_only_and_another_broker_id_refused(configs) -> None:
    mine = await configs.describe(BROKER, str(BROKER_ID), ("log.retention.ms",))
    (entry,) = mine.configs
    assert (entry.value, entry.read_only) == ("5000", True)
    other = await configs.describe(BROKER, "7")
    assert (other.error_code, other.configs) == (ErrorCode.invalid_request, ())
    assert "expected 1 or empty string" in other.error_message


async def test_an_unsupported_resource_type_is_refused(configs) -> None:
    result = await configs.describe(3, "whatever")
    assert result.error_code == ErrorCode.invalid_request


async def test_incremental_operations_follow_kafka(configs) -> None:
    code, _ = await configs.incremental(
        TOPIC,
        "events",
        (SET, "retention.ms", "60000"),
        (DELETE, "segment.bytes", None),
        (APPEND, "cleanup.policy", "compact"),
    )
    assert code == ErrorCode.none
    assert configs.store.topic_configs["events"] == {
        "retention.ms": "60000",
        "cleanup.policy": "delete,compact",
    }
    code, _ = await configs.incremental(TOPIC, "events", (SUBTRACT, "cleanup.policy", "delete"))
    assert (code, configs.store.topic_configs["events"]["cleanup.policy"]) == (ErrorCode.none, "compact")


async def test_bad_changes_are_refused_and_reach_no_store(configs) -> None:
    before = dict(configs.store.topic_configs["events"])
    refused = [
        await configs.incremental(TOPIC, "events", (APPEND, "retention.ms", "1")),
        await configs.incremental(TOPIC, "events", (SET, "retention.ms", "soon")),
        await configs.incremental(TOPIC, "events", (SET, "no.such.key", "1")),
        await configs.incremental(TOPIC, "events", (SET, "retention.ms", "1"), (SET, "retention.ms", "2")),
        await configs.incremental(TOPIC, "ghost", (SET, "retention.ms", "1")),
    ]
    assert [code for code, _ in refused] == [
        ErrorCode.invalid_config,
        ErrorCode.invalid_config,
        ErrorCode.invalid_config,
        ErrorCode.invalid_request,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert configs.store.topic_configs["events"] == before
    assert not [call for call, _ in configs.store.calls if call == "set_topic_config"]


async def test_a_broker_setting_cannot_be_altered_at_run_time(configs) -> None:
    code, message = await configs.incremental(BROKER, str(BROKER_ID), (SET, "log.retention.ms", "1"))
    assert code == ErrorCode.invalid_request
    assert message.startswith("Cannot update these configs dynamically: log.retention.ms.")


async def test_alter_configs_replaces_the_whole_override_set(configs) -> None:
    assert await configs.replace("events", **{"retention.ms": "1000"}) == ErrorCode.none
    assert configs.store.topic_configs["events"] == {"retention.ms": "1000"}
