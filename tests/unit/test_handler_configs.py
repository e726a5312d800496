"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against a real metadata cache and broker config,
with the cluster store's operations kept in memory (no broker, no network, no ZooKeeper): a topic's values
are its overrides over the broker's, a bad change reaches no store, and a broker's dynamic configs follow
Kafka's keys, checks and precedence (this broker's over the cluster-wide default over its file)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kio.schema.alter_configs.v2 import request as alter_configs
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental

from backbone.broker.config import BrokerConfig
from backbone.broker.handlers.admin_common import AdminPieces
from backbone.broker.handlers.broker_configs import apply_dynamic
from backbone.broker.handlers.config_catalog import ConfigSource
from backbone.broker.handlers.configs import APPEND, BROKER, DELETE, SET, SUBTRACT, TOPIC, configs_handlers
from backbone.protocol.api import ApiKey
from tests.helpers.broker_pieces import BROKER_ID, broker_pieces
from tests.helpers.handler_context import handler_context
from tests.helpers.memory_store import MemoryStore, zk

pytestmark = pytest.mark.unit


class Configs:
    def __init__(self, store: MemoryStore, handlers: dict, config: BrokerConfig) -> None:
        self.store = store
        self.handlers = handlers
        self.config = config

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

    async def replace(
        self, name: str, resource_type: int = TOPIC, validate_only: bool = False, **values: str
    ):
        request = alter_configs.AlterConfigsRequest(
            resources=(
                alter_configs.AlterConfigsResource(
                    resource_type=resource_type,
                    resource_name=name,
                    configs=tuple(alter_configs.AlterableConfig(name=k, value=v) for k, v in values.items()),
                ),
            ),
            validate_only=validate_only,
        )
        answer = await self.handlers[ApiKey.ALTER_CONFIGS](handler_context(request))
        (result,) = answer.responses
        return result.error_code

    def apply(self) -> None:
        """What the broker does on a config change notification: re-read its dynamic configs, apply them."""
        store = self.store
        apply_dynamic(self.config, store.get_broker_config(None), store.get_broker_config(BROKER_ID))


@pytest.fixture
async def configs(tmp_path) -> AsyncIterator[Configs]:
    pieces = broker_pieces(tmp_path, **{"log.retention.ms": 5000})
    store = MemoryStore()
    store.create_topic("events", 1, 1, configs={"segment.bytes": "1048576"})
    admin = AdminPieces(BROKER_ID, pieces.config, pieces.cache, store, zk)
    yield Configs(store, configs_handlers(admin), pieces.config)
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


async def test_only_dynamic_broker_keys_are_writable_and_another_broker_id_is_refused(configs) -> None:
    mine = await configs.describe(BROKER, str(BROKER_ID), ("log.retention.ms", "broker.id"))
    entries = {e.name: e for e in mine.configs}
    assert (entries["log.retention.ms"].value, entries["log.retention.ms"].read_only) == ("5000", False)
    assert (entries["broker.id"].value, entries["broker.id"].read_only) == (str(BROKER_ID), True)
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


async def test_alter_configs_replaces_the_whole_override_set(configs) -> None:
    assert await configs.replace("events", **{"retention.ms": "1000"}) == ErrorCode.none
    assert configs.store.topic_configs["events"] == {"retention.ms": "1000"}


# -- dynamic broker configs ------------------------------------------------------------------------------

DEFAULT = ""


async def test_a_broker_key_takes_this_brokers_value_over_the_default_over_the_file(configs) -> None:
    mine = str(BROKER_ID)
    assert await configs.replace(DEFAULT, BROKER, **{"log.retention.ms": "7000"}) == ErrorCode.none
    configs.apply()
    described = await configs.describe(BROKER, mine, ("log.retention.ms", "log.segment.bytes"))
    entries = {e.name: e for e in described.configs}
    assert [(s.value, s.source) for s in entries["log.retention.ms"].synonyms] == [
        ("7000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("5000", ConfigSource.STATIC_BROKER_CONFIG),
    ]
    assert entries["log.segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG

    assert await configs.replace(mine, BROKER, **{"log.retention.ms": "9000"}) == ErrorCode.none
    configs.apply()
    (entry,) = (await configs.describe(BROKER, mine, ("log.retention.ms",))).configs
    assert (entry.value, entry.config_source) == ("9000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [s.source for s in entry.synonyms] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG,
    ]
    # A topic without an override inherits the effective value, naming its source.
    (topic_entry,) = (await configs.describe(TOPIC, "events", ("retention.ms",))).configs
    assert (topic_entry.value, topic_entry.config_source) == ("9000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [s.name for s in topic_entry.synonyms] == ["log.retention.ms"] * 3
    assert configs.config.log.retention_ms == 9000
    # The `<default>` resource shows only what is set there.
    defaults = await configs.describe(BROKER, DEFAULT)
    assert [(e.name, e.value, e.config_source) for e in defaults.configs] == [
        ("log.retention.ms", "7000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]


async def test_the_keys_a_broker_acts_on_take_their_dynamic_values(configs) -> None:
    configs.store.set_broker_config(
        None, {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"}
    )
    configs.store.set_broker_config(BROKER_ID, {"min.insync.replicas": "3", "background.threads": "9"})
    configs.apply()
    assert configs.config["min.insync.replicas"] == 3
    assert configs.config["unclean.leader.election.enable"] is True
    # Stored only: the effective value stays the file's, and its documentation says so.
    assert configs.config["min.insync.replicas"] != configs.config.values["min.insync.replicas"]
    request = describe_configs.DescribeConfigsRequest(
        resources=(
            describe_configs.DescribeConfigsResource(
                resource_type=BROKER, resource_name=str(BROKER_ID), configuration_keys=("background.threads",)
            ),
        ),
        include_synonyms=False,
        include_documentation=True,
    )
    answer = await configs.handlers[ApiKey.DESCRIBE_CONFIGS](handler_context(request))
    (entry,) = answer.results[0].configs
    assert entry.value == "9"
    assert "Backbone stores without acting on it" in entry.documentation


async def test_broker_keys_are_checked_as_kafka_checks_them(configs) -> None:
    mine = str(BROKER_ID)
    refused = [
        await configs.incremental(BROKER, mine, (SET, "broker.id", "5")),
        await configs.incremental(BROKER, mine, (SET, "zookeeper.connect", "elsewhere:2181")),
        await configs.incremental(BROKER, mine, (SET, "no.such.key", "1")),
        await configs.incremental(BROKER, mine, (SET, "ssl.keystore.location", "/tmp/k.pem")),
        await configs.incremental(BROKER, DEFAULT, (SET, "sasl.kerberos.min.time.before.relogin", "1")),
        await configs.incremental(BROKER, mine, (SET, "background.threads", "many")),
        await configs.incremental(BROKER, mine, (SET, "background.threads", "0")),
        await configs.incremental(BROKER, mine, (SET, "unclean.leader.election.enable", "yes")),
        await configs.incremental(BROKER, mine, (SET, "log.retention.ms", "-2")),
        await configs.incremental(BROKER, mine, (APPEND, "background.threads", "1")),
    ]
    assert [code for code, _ in refused] == [ErrorCode.invalid_request] * 5 + [ErrorCode.invalid_config] * 5
    assert refused[0][1] == "Cannot update these configs dynamically: broker.id"
    assert "only per-listener using the listener prefix" in refused[3][1]
    assert "broker id must be specified" in refused[4][1]
    assert "background.threads" in refused[5][1] and "log.retention.ms" in refused[8][1]
    assert not [call for call, _ in configs.store.calls if call == "set_broker_config"]


async def test_incremental_operations_on_a_broker_as_on_a_topic(configs) -> None:
    mine = str(BROKER_ID)
    code, _ = await configs.incremental(
        BROKER, mine, (SET, "background.threads", "9"), (APPEND, "log.cleanup.policy", "compact")
    )
    assert code == ErrorCode.none
    # APPEND starts from the value inherited from below (the built-in "delete").
    assert configs.store.broker_configs[BROKER_ID] == {
        "background.threads": "9",
        "log.cleanup.policy": "delete,compact",
    }
    code, _ = await configs.incremental(
        BROKER, mine, (DELETE, "background.threads", ""), (SUBTRACT, "log.cleanup.policy", "compact")
    )
    assert (code, configs.store.broker_configs[BROKER_ID]) == (
        ErrorCode.none,
        {"log.cleanup.policy": "delete"},
    )
    code, _ = await configs.incremental(BROKER, mine, (SET, "sasl.kerberos.min.time.before.relogin", "58000"))
    assert code == ErrorCode.none


async def test_alter_configs_replaces_a_brokers_set_and_validate_only_stores_nothing(configs) -> None:
    mine = str(BROKER_ID)
    configs.store.set_broker_config(BROKER_ID, {"background.threads": "9"})
    assert (
        await configs.replace(mine, BROKER, validate_only=True, **{"num.io.threads": "4"}) == ErrorCode.none
    )
    assert configs.store.broker_configs[BROKER_ID] == {"background.threads": "9"}
    assert await configs.replace(mine, BROKER, **{"num.io.threads": "4"}) == ErrorCode.none
    assert configs.store.broker_configs[BROKER_ID] == {"num.io.threads": "4"}


async def test_stored_keys_a_broker_cannot_use_are_left_out_and_the_others_applied(configs) -> None:
    configs.store.set_broker_config(
        None, {"broker.id": "3", "log.retention.ms": "soon", "log.roll.ms": "60000"}
    )
    configs.apply()
    assert configs.config.dynamic_defaults == {"log.roll.ms": "60000"}
    assert (configs.config.log.segment_ms, configs.config.log.retention_ms) == (60000, 5000)


async def test_new_log_defaults_reach_open_logs_under_each_topics_own_overrides(tmp_path) -> None:
    pieces = broker_pieces(tmp_path)
    try:
        plain, overridden = pieces.logs.get_or_create_log("plain", 0), pieces.logs.get_or_create_log("own", 0)
        pieces.replicas.apply_topic_config("own", {"retention.ms": "1000"})
        apply_dynamic(pieces.config, {"log.retention.ms": "7000", "log.segment.bytes": "2000000"}, {})
        pieces.replicas.apply_log_defaults(pieces.config.log)
        assert (plain.config.retention_ms, plain.config.segment_bytes) == (7000, 2000000)
        assert (overridden.config.retention_ms, overridden.config.segment_bytes) == (1000, 2000000)
        # A log created afterwards starts with them too.
        assert pieces.logs.get_or_create_log("later", 0).config.retention_ms == 7000
    finally:
        await pieces.close()
