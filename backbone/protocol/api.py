"""The API table: which API keys and versions the broker speaks, and its ApiVersions answer.

Each handler module registers itself (`ApiTable.register`) with its version range; the
ApiVersions response lists exactly what is registered, because advertising a version is a
promise: clients pick the highest version both sides list and send it without asking again.

`SUPPORTED_VERSIONS` holds the ranges a handler gets when it does not name its own. They are
bounded below by kio (generated from Apache Kafka 4.1's schemas, which dropped most pre-2.1
versions per KIP-896; we decode with kio, so we cannot accept what it cannot parse) and above
by what the broker can honour without topic IDs, KRaft-only features, transactions or the
KIP-848 consumer protocol. Clients meet them in three ways:

- The Java client and kafka-python 2.1+/3.x use the highest version both sides list.
  kafka-python also infers a broker release from the table (ours reads as 3.2) and gates a few
  defaults on it (fetch sessions, a 45 s session timeout).
- librdkafka 2.x enables "features" only if fixed versions are listed (Produce 3 + Fetch 4 for
  message format v2, Produce 7 + Fetch 10 for zstd, v0 of JoinGroup/SyncGroup/Heartbeat/
  LeaveGroup/FindCoordinator for the group consumer, ListOffsets 1, InitProducerId 0, and
  Produce 0 for compression: see below); our minimums keep every one of them.
- kafka-python 2.0.x picks fixed versions from the release it infers (2.4 here, from Produce 8);
  our minimums are Apache Kafka 4.1's, so it meets the same floor as against a 4.1 broker.

Ranges, and why (key in brackets):

- Produce [0] 3-9: 3 is the first with record batch v2; 10 only adds KIP-951 leader hints,
  11-12 need transactions v2 (KIP-890), 13 replaces topic names by IDs. Advertised from 0 (below).
- Fetch [1] 4-12: 4 is the first with batch v2 and isolation level; 12 is the last with topic
  names (13+ use IDs). v7+ have fetch sessions: answering session_id 0 declines a session
  (KIP-227), which every client handles. 12 adds LastFetchedEpoch -> DivergingEpoch (truncation).
- ListOffsets [2] 1-7: 7 adds MAX_TIMESTAMP (-3, KIP-734); 8+ are tiered-storage specs.
- Metadata [3] 0-12: 10+ carry topic IDs; we send the zero UUID, which clients read as "no ID"
  (Kafka's ZooKeeper brokers did the same). 12 allows an ID-only lookup: answer UNKNOWN_TOPIC_ID.
  13 only adds the KIP-1102 rebootstrap error.
- OffsetCommit [8] 2-8: 7 adds group.instance.id; 9 is for KIP-848 groups, 10 uses topic IDs.
- OffsetFetch [9] 1-8: 8 batches groups (KIP-709); 9 is KIP-848, 10 uses topic IDs.
- FindCoordinator [10] 0-4: 4 batches keys (KIP-699); 5 is KIP-890, 6 is share groups.
- JoinGroup [11] 0-9, SyncGroup [14] 0-5, Heartbeat [12] 0-4, LeaveGroup [13] 0-5: the whole
  classic protocol, including static membership (group.instance.id, KIP-345: JoinGroup 5+,
  SyncGroup/Heartbeat/LeaveGroup 3+) and reasons (KIP-800). A coordinator without static
  membership must register lower maxima (JoinGroup 4, SyncGroup/Heartbeat/LeaveGroup 2).
- DescribeGroups [15] 0-5: 6 answers a missing group with GROUP_ID_NOT_FOUND (KIP-1043).
- ListGroups [16] 0-4: 4 adds the state filter (KIP-518); 5's type filter is KIP-848.
- ApiVersions [18] 0-4: 4 only changes SupportedFeatures.MinVersion and we list no features;
  the Java 4.x client opens with v4, so listing it saves that client a round trip.
- CreateTopics [19] 2-7: 5+ return topic configs (KIP-525); 7 adds the topic ID (zero UUID).
- DeleteTopics [20] 1-6: 6 may name topics by ID (answer UNKNOWN_TOPIC_ID).
- InitProducerId [22] 0-4: idempotent producers; 3+ resume with id/epoch (KIP-360);
  5 is KIP-890, 6 is two-phase commit (KIP-939).
- DescribeCluster [60] 0-1: 1 adds the endpoint type (KIP-919: answer MISMATCHED_ENDPOINT_TYPE
  when asked for controllers); 2 lists fenced brokers, a KRaft notion.
- DeleteRecords [21] 0-2, OffsetForLeaderEpoch [23] 2-4, DescribeConfigs [32] 1-4,
  AlterConfigs [33] 0-2, CreatePartitions [37] 0-3, DeleteGroups [42] 0-2,
  IncrementalAlterConfigs [44] 0-1, OffsetDelete [47] 0: every version kio has.
- DescribeAcls [29], CreateAcls [30], DeleteAcls [31] 1-2: 1 added prefixed patterns (KIP-290), 2 is
  the first flexible one; 3 changes nothing on the wire but makes kafka-python infer a 3.3 broker.
- SaslHandshake [17] 0-1, SaslAuthenticate [36] 0-2, DescribeUserScramCredentials [50] 0,
  AlterUserScramCredentials [51] 0: every version kio has (v0 handshakes are followed by raw SASL tokens,
  v1 by SaslAuthenticate requests; SaslAuthenticate v1+ carries the session lifetime, KIP-368).

Produce is advertised from version 0 although versions 0-2 are refused (UNSUPPORTED_VERSION):
librdkafka enables compression only when the broker lists Produce v0, so Apache Kafka 4.0 does
exactly this (KAFKA-18659, `ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION`). No client picks
those versions while a higher common one exists.

The broker must answer an ApiVersions request of a version it does not support (a newer client
probes with its newest) with `unsupported_api_versions_response()`: a v0 body with
UNSUPPORTED_VERSION and our ApiVersions range, so the client retries with a version we speak.
Any other unknown key or unsupported version gets that version's response with UNSUPPORTED_VERSION in
its top-level error field where the schema has one (`entities.error_answer`); where it has none (or the
key is unknown to Kafka's schemas), no answer can say so and the connection closes, as Kafka closes it.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from kio.index import load_payload_module
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32Timedelta

from backbone.protocol.errors import ErrorCode, InvalidRequestError, UnsupportedVersionError

__all__ = [
    "ADVERTISED_MIN_VERSION",
    "SUPPORTED_VERSIONS",
    "ApiKey",
    "ApiTable",
    "VersionRange",
    "kio_versions",
]


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive range of API versions."""

    min: int
    max: int

    def __post_init__(self) -> None:
        if not 0 <= self.min <= self.max:
            raise ValueError(f"invalid version range {self.min}..{self.max}")

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min <= version <= self.max

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.min, self.max + 1))

    def __len__(self) -> int:
        return self.max - self.min + 1

    def __str__(self) -> str:
        return f"{self.min}..{self.max}"


_R = VersionRange
SUPPORTED_VERSIONS: Mapping[int, VersionRange] = MappingProxyType(
    {
        ApiKey.PRODUCE: _R(3, 9),
        ApiKey.FETCH: _R(4, 12),
        ApiKey.LIST_OFFSETS: _R(1, 7),
        ApiKey.METADATA: _R(0, 12),
        ApiKey.OFFSET_COMMIT: _R(2, 8),
        ApiKey.OFFSET_FETCH: _R(1, 8),
        ApiKey.FIND_COORDINATOR: _R(0, 4),
        ApiKey.JOIN_GROUP: _R(0, 9),
        ApiKey.HEARTBEAT: _R(0, 4),
        ApiKey.LEAVE_GROUP: _R(0, 5),
        ApiKey.SYNC_GROUP: _R(0, 5),
        ApiKey.DESCRIBE_GROUPS: _R(0, 5),
        ApiKey.LIST_GROUPS: _R(0, 4),
        ApiKey.API_VERSIONS: _R(0, 4),
        ApiKey.CREATE_TOPICS: _R(2, 7),
        ApiKey.DELETE_TOPICS: _R(1, 6),
        ApiKey.DELETE_RECORDS: _R(0, 2),
        ApiKey.INIT_PRODUCER_ID: _R(0, 4),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: _R(2, 4),
        ApiKey.DESCRIBE_CONFIGS: _R(1, 4),
        ApiKey.ALTER_CONFIGS: _R(0, 2),
        ApiKey.CREATE_PARTITIONS: _R(0, 3),
        ApiKey.DELETE_GROUPS: _R(0, 2),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: _R(0, 1),
        ApiKey.OFFSET_DELETE: _R(0, 0),
        ApiKey.DESCRIBE_CLUSTER: _R(0, 1),
        ApiKey.ELECT_LEADERS: _R(0, 2),
        ApiKey.DESCRIBE_LOG_DIRS: _R(1, 4),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: _R(0, 0),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: _R(0, 0),
        ApiKey.DESCRIBE_ACLS: _R(1, 2),
        ApiKey.CREATE_ACLS: _R(1, 2),
        ApiKey.DELETE_ACLS: _R(1, 2),
        ApiKey.SASL_HANDSHAKE: _R(0, 1),
        ApiKey.SASL_AUTHENTICATE: _R(0, 2),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _R(0, 0),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _R(0, 0),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: _R(0, 1),
        ApiKey.ALTER_CLIENT_QUOTAS: _R(0, 1),
    }
)
"""The default range of each API (see the module docstring for why)."""

ADVERTISED_MIN_VERSION: Mapping[ApiKey, int] = MappingProxyType({ApiKey.PRODUCE: 0})
"""Minimum versions listed lower than accepted, for librdkafka (KAFKA-18659)."""


@cache
def kio_versions(api_key: int) -> VersionRange:
    """The versions kio has both request and response schemas for."""
    name = api_key_map.get(api_key)
    if name is None:
        raise ValueError(f"kio knows no API with key {api_key}")
    versions = [
        version
        for version, entities in schema_name_map[name].items()
        if EntityType.request in entities and EntityType.response in entities
    ]
    return VersionRange(min(versions), max(versions))


H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class _Entry(Generic[H]):
    handler: H
    versions: VersionRange


class ApiTable(Generic[H]):
    """API key -> (handler, accepted versions); the source of the ApiVersions answer."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry[H]] = {}

    def register(self, api_key: ApiKey, handler: H, versions: VersionRange | None = None) -> None:
        """Serve `api_key` with `handler` for `versions` (default: `SUPPORTED_VERSIONS`)."""
        api_key = ApiKey(api_key)
        if api_key in self._entries:
            raise ValueError(f"{api_key.name} is already registered")
        if versions is None:
            versions = SUPPORTED_VERSIONS[api_key]
        decodable = kio_versions(api_key)
        if versions.min < decodable.min or versions.max > decodable.max:
            raise ValueError(f"{api_key.name} versions {versions} exceed what kio can decode ({decodable})")
        self._entries[api_key] = _Entry(handler, versions)

    def replace(self, api_key: ApiKey, handler: H) -> None:
        """Serve a registered API with another handler (one that wraps the first), same versions."""
        entry = self._entries[ApiKey(api_key)]
        self._entries[api_key] = _Entry(handler, entry.versions)

    def versions(self, api_key: int) -> VersionRange | None:
        entry = self._entries.get(api_key)
        return None if entry is None else entry.versions

    def supports(self, api_key: int, api_version: int) -> bool:
        entry = self._entries.get(api_key)
        return entry is not None and api_version in entry.versions

    def handler(self, api_key: int, api_version: int) -> H:
        """The handler for a request; raises if the key or version is not served."""
        entry = self._entries.get(api_key)
        if entry is None:
            raise InvalidRequestError(f"unknown API key {api_key}")
        versions = entry.versions
        if not versions.min <= api_version <= versions.max:  # `in` would call Python code on every request
            raise UnsupportedVersionError(
                f"{ApiKey(api_key).name} version {api_version} is not supported ({entry.versions})"
            )
        return entry.handler

    def advertised(self) -> list[tuple[int, int, int]]:
        """(api_key, min_version, max_version) for every registered API, by key."""
        rows = []
        for api_key in sorted(self._entries):
            versions = self._entries[api_key].versions
            low = min(versions.min, ADVERTISED_MIN_VERSION.get(ApiKey(api_key), versions.min))
            rows.append((api_key, low, versions.max))
        return rows

    def api_versions_response(self, version: int, throttle_time_ms: int = 0) -> Any:
        """The kio ApiVersionsResponse entity of `version` listing every registered API."""
        return _api_versions_response(version, ErrorCode.none, self.advertised(), throttle_time_ms)

    def unsupported_api_versions_response(self) -> Any:
        """The v0 answer to an ApiVersions request of a version we do not speak."""
        versions = self.versions(ApiKey.API_VERSIONS) or SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
        row = [(int(ApiKey.API_VERSIONS), versions.min, versions.max)]
        return _api_versions_response(0, ErrorCode.unsupported_version, row, 0)


def _api_versions_response(
    version: int, error_code: ErrorCode, rows: list[tuple[int, int, int]], throttle_time_ms: int
) -> Any:
    module = load_payload_module(ApiKey.API_VERSIONS, version, EntityType.response)
    api_keys = tuple(
        module.ApiVersion(api_key=i16(key), min_version=i16(low), max_version=i16(high))
        for key, low, high in rows
    )
    fields: dict[str, Any] = {"error_code": error_code, "api_keys": api_keys}
    if version >= 1:
        fields["throttle_time"] = i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_time_ms))
    return module.ApiVersionsResponse(**fields)
