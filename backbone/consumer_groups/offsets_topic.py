"""Record formats of the internal topic `__consumer_offsets`: Kafka's own key and value schemas.

Every record's key and value start with an int16 schema version. Keys:
    OffsetCommitKey v0/v1:  group string, topic string, partition int32     (a committed offset)
    GroupMetadataKey v2:    group string                                    (a group's membership)
Values (written at the newest version below, older ones still read):
    OffsetCommitValue v3:   offset int64, leader_epoch int32, metadata string, commit_timestamp int64
    GroupMetadataValue v3:  protocol_type string, generation int32, protocol string?, leader string?,
                            current_state_timestamp int64, members [member_id string,
                            group_instance_id string?, client_id string, client_host string,
                            rebalance_timeout int32, session_timeout int32, subscription bytes,
                            assignment bytes]
Strings are an int16 length and UTF-8 (-1: null), bytes an int32 length, arrays an int32 count. A record
with a null value is a tombstone: the offset, or the group, was deleted (compaction then drops both).

Writing Kafka's formats, not our own, keeps the topic readable by Kafka's tools
(kafka-console-consumer's offsets formatter) and by anyone who knows them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from backbone.consumer_groups.group_types import GroupSnapshot, MemberSnapshot
from backbone.protocol.errors import CorruptMessageError

__all__ = [
    "OFFSETS_TOPIC",
    "CommittedOffset",
    "GroupKey",
    "OffsetKey",
    "decode_group_value",
    "decode_key",
    "decode_offset_value",
    "encode_group_key",
    "encode_group_value",
    "encode_offset_key",
    "encode_offset_value",
    "java_string_hashcode",
    "partition_for",
]

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

NO_LEADER_EPOCH = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


def java_string_hashcode(text: str) -> int:
    """Java's String.hashCode(): 31-based over UTF-16 code units, wrapped to a signed 32-bit int."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partition_count: int) -> int:
    """The offsets partition of a group: Kafka's Utils.abs(groupId.hashCode) % N (abs(MIN_VALUE) is 0)."""
    h = java_string_hashcode(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partition_count


# -- writing ------------------------------------------------------------------------------------------


def _string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return _I16.pack(len(data)) + data


def _bytes(value: bytes | None) -> bytes:
    if value is None:
        return _I32.pack(-1)
    return _I32.pack(len(value)) + bytes(value)


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return b"".join((_I16.pack(OFFSET_KEY_VERSION), _string(group), _string(topic), _I32.pack(partition)))


def encode_group_key(group: str) -> bytes:
    return _I16.pack(GROUP_KEY_VERSION) + _string(group)


def encode_offset_value(committed: CommittedOffset) -> bytes:
    return b"".join(
        (
            _I16.pack(OFFSET_VALUE_VERSION),
            _I64.pack(committed.offset),
            _I32.pack(committed.leader_epoch),
            _string(committed.metadata),
            _I64.pack(committed.commit_timestamp_ms),
        )
    )


def encode_group_value(snapshot: GroupSnapshot) -> bytes:
    parts = [
        _I16.pack(GROUP_VALUE_VERSION),
        _string(snapshot.protocol_type or ""),
        _I32.pack(snapshot.generation_id),
        _string(snapshot.protocol_name),
        _string(snapshot.leader_id),
        _I64.pack(snapshot.state_timestamp_ms),
        _I32.pack(len(snapshot.members)),
    ]
    for member in snapshot.members:
        parts += (
            _string(member.member_id),
            _string(member.group_instance_id),
            _string(member.client_id),
            _string(member.client_host),
            _I32.pack(member.rebalance_timeout_ms),
            _I32.pack(member.session_timeout_ms),
            _bytes(member.subscription),
            _bytes(member.assignment),
        )
    return b"".join(parts)


# -- reading ------------------------------------------------------------------------------------------


class _Reader:
    """Reads the fields above from one key or value; anything cut short raises CorruptMessageError."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise CorruptMessageError(
                f"offsets topic record cut short at byte {self.pos} of {len(self.data)}"
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def nullable_string(self) -> str | None:
        size = self.int16()
        if size < 0:
            return None
        try:
            return self._take(size).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptMessageError(f"offsets topic record holds invalid UTF-8: {exc}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise CorruptMessageError("offsets topic record holds a null where a string is required")
        return value

    def bytes(self) -> bytes:
        size = self.int32()
        return b"" if size < 0 else self._take(size)


def _version(reader: _Reader, newest: int, what: str) -> int:
    version = reader.int16()
    if not 0 <= version <= newest:
        raise CorruptMessageError(f"unknown {what} version {version}")
    return version


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    reader = _Reader(data)
    version = _version(reader, GROUP_KEY_VERSION, "offsets topic key")
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.string())
    return OffsetKey(reader.string(), reader.string(), reader.int32())


def decode_offset_value(data: bytes) -> CommittedOffset:
    reader = _Reader(data)
    version = _version(reader, OFFSET_VALUE_VERSION, "offset commit value")
    offset = reader.int64()
    epoch = reader.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string()
    timestamp = reader.int64()
    # v1's expire timestamp (an OffsetCommit v2-v4 retention time) is not kept: retention is the broker's.
    return CommittedOffset(offset, epoch, metadata, timestamp)


def decode_group_value(data: bytes) -> GroupSnapshot:
    reader = _Reader(data)
    version = _version(reader, GROUP_VALUE_VERSION, "group metadata value")
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_timestamp = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(reader.int32()):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        session_timeout = reader.int32()
        rebalance_timeout = session_timeout
        if version >= 1:  # v1+ put the rebalance timeout first
            rebalance_timeout, session_timeout = session_timeout, reader.int32()
        members.append(
            MemberSnapshot(
                member_id=member_id,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host=client_host,
                rebalance_timeout_ms=rebalance_timeout,
                session_timeout_ms=session_timeout,
                subscription=reader.bytes(),
                assignment=reader.bytes(),
            )
        )
    return GroupSnapshot(
        protocol_type=protocol_type,
        generation_id=generation,
        protocol_name=protocol,
        leader_id=leader,
        state_timestamp_ms=state_timestamp,
        members=members,
    )
