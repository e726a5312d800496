"""The group coordinator's store over real partition logs: commits, reloads after a leadership change,
tombstones, and Kafka's retention rules (driven with explicit clocks).

Replication is the broker's part (tests/integration/test_group_offsets.py); here each offsets partition is
a real `Log` in a temporary directory whose every append counts as in sync.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from backbone.consumer_groups.coordinator import (
    CoordinatorError,
    CoordinatorSettings,
    GroupCoordinator,
    OffsetCommit,
)
from backbone.consumer_groups.group_types import GroupSnapshot
from backbone.consumer_groups.offsets_topic import (
    OFFSETS_TOPIC,
    CommittedOffset,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from backbone.log import Log
from backbone.protocol.errors import ErrorCode
from backbone.protocol.records import DecodedBatch, RecordBatchBuilder, decode_batches

pytestmark = pytest.mark.unit

PARTITIONS = 3
RETENTION_MS = 60_000
TOPICS = {"orders": 2, "clicks": 1}


class LogOffsets:
    """Offsets partitions as real logs on disk (every append is in sync at once)."""

    def __init__(self, directory: Path) -> None:
        self.logs = {i: Log(directory / f"{OFFSETS_TOPIC}-{i}") for i in range(PARTITIONS)}
        self.topics = dict(TOPICS)

    async def append(self, partition: int, records: bytes) -> int:
        log_ = self.logs[partition]
        info = log_.append(memoryview(records))
        log_.high_watermark = log_.log_end_offset
        return info.first_offset

    def read(self, partition: int) -> Iterator[DecodedBatch]:
        log_ = self.logs[partition]
        data = log_.read(log_.log_start_offset, 1 << 30).to_bytes()
        return decode_batches(data)

    def partition_exists(self, topic: str, partition: int) -> bool:
        return 0 <= partition < self.topics.get(topic, 0)

    async def topic_exists(self, topic: str) -> bool:
        return topic in self.topics

    def close(self) -> None:
        for log_ in self.logs.values():
            log_.close()


@pytest.fixture
def offsets_log(tmp_path: Path) -> Iterator[LogOffsets]:
    store = LogOffsets(tmp_path)
    yield store
    store.close()


async def leading_coordinator(offsets_log: LogOffsets) -> GroupCoordinator:
    """A coordinator that leads every offsets partition, once it has loaded them."""
    coordinator = GroupCoordinator(1, offsets_log, CoordinatorSettings(PARTITIONS, retention_ms=RETENTION_MS))
    for index in range(PARTITIONS):
        coordinator.became_leader(index, 0)
    for _ in range(500):
        try:
            for index in range(PARTITIONS):
                coordinator.fetch_offsets(
                    next(g for g in GROUPS if partition_for(g, PARTITIONS) == index), []
                )
            return coordinator
        except CoordinatorError as exc:
            assert exc.code == ErrorCode.coordinator_load_in_progress
            await asyncio.sleep(0.01)
    raise AssertionError("offsets partitions never finished loading")


# Group ids that land on each offsets partition, so every partition gets loaded and used.
GROUPS = [
    next(f"group-{i}" for i in range(1000) if partition_for(f"group-{i}", PARTITIONS) == p)
    for p in range(PARTITIONS)
]


def commits(*items: tuple[str, int, int]) -> list[OffsetCommit]:
    return [OffsetCommit(topic, partition, offset, -1, f"m{offset}") for topic, partition, offset in items]


def offsets_of(coordinator: GroupCoordinator, group: str) -> dict[tuple[str, int], int]:
    return {key: c.offset for key, c in coordinator.fetch_offsets(group, None).items()}


async def test_commits_survive_a_reload(offsets_log: LogOffsets) -> None:
    coordinator = await leading_coordinator(offsets_log)
    for n, group in enumerate(GROUPS):
        results = await coordinator.commit_offsets(
            group, "", None, -1, commits(("orders", 0, n), ("orders", 1, 10 + n))
        )
        assert set(results.values()) == {ErrorCode.none}
    # A later commit of the same partition wins, on load as in memory.
    await coordinator.commit_offsets(GROUPS[0], "", None, -1, commits(("orders", 0, 99)))
    coordinator.shutdown()
    with pytest.raises(CoordinatorError) as raised:
        coordinator.fetch_offsets(GROUPS[0], None)
    assert raised.value.code == ErrorCode.not_coordinator

    reloaded = await leading_coordinator(offsets_log)
    assert offsets_of(reloaded, GROUPS[0]) == {("orders", 0): 99, ("orders", 1): 10}
    assert offsets_of(reloaded, GROUPS[2]) == {("orders", 0): 2, ("orders", 1): 12}
    assert reloaded.fetch_offsets(GROUPS[1], [("orders", 0), ("clicks", 0)]) == {
        ("orders", 0): reloaded.fetch_offsets(GROUPS[1], None)[("orders", 0)],
        ("clicks", 0): None,
    }
    # Groups that only commit exist (Empty), as in Kafka, so ListGroups shows them.
    assert {g.group_id for g in reloaded.groups()} == set(GROUPS)


async def test_per_partition_errors_write_nothing_for_bad_partitions(offsets_log: LogOffsets) -> None:
    coordinator = await leading_coordinator(offsets_log)
    group = GROUPS[0]
    results = await coordinator.commit_offsets(
        group,
        "",
        None,
        -1,
        [
            *commits(("orders", 0, 1), ("orders", 5, 1), ("gone", 0, 1)),
            OffsetCommit("clicks", 0, 1, -1, "x" * 4097),
        ],
    )
    assert results == {
        ("orders", 0): ErrorCode.none,
        ("orders", 5): ErrorCode.unknown_topic_or_partition,
        ("gone", 0): ErrorCode.unknown_topic_or_partition,
        ("clicks", 0): ErrorCode.offset_metadata_too_large,
    }
    assert offsets_of(coordinator, group) == {("orders", 0): 1}
    for bad in ("", "x" * 256):
        with pytest.raises(CoordinatorError) as raised:
            await coordinator.commit_offsets(bad, "", None, -1, commits(("orders", 0, 1)))
        assert raised.value.code == ErrorCode.invalid_group_id


async def test_deleted_groups_stay_deleted_after_a_reload(offsets_log: LogOffsets) -> None:
    coordinator = await leading_coordinator(offsets_log)
    await coordinator.commit_offsets(GROUPS[0], "", None, -1, commits(("orders", 0, 5), ("clicks", 0, 6)))
    await coordinator.commit_offsets(GROUPS[1], "", None, -1, commits(("orders", 1, 7)))
    error, results = await coordinator.delete_offsets(GROUPS[0], [("clicks", 0)])
    assert (error, results) == (ErrorCode.none, {("clicks", 0): ErrorCode.none})
    assert await coordinator.delete_groups([GROUPS[1], "never-was"]) == {
        GROUPS[1]: ErrorCode.none,
        "never-was": ErrorCode.group_id_not_found,
    }
    coordinator.shutdown()
    reloaded = await leading_coordinator(offsets_log)
    assert offsets_of(reloaded, GROUPS[0]) == {("orders", 0): 5}
    assert reloaded.group(GROUPS[1]) is None
    assert offsets_of(reloaded, GROUPS[1]) == {}


async def test_offsets_of_a_simple_consumer_expire_after_their_commit(offsets_log: LogOffsets) -> None:
    coordinator = await leading_coordinator(offsets_log)
    group = GROUPS[0]
    await coordinator.commit_offsets(group, "", None, -1, commits(("orders", 0, 1)))
    committed_at = coordinator.fetch_offsets(group, None)[("orders", 0)].commit_timestamp_ms
    assert await coordinator.expire_offsets(committed_at + RETENTION_MS - 1) == 0
    assert offsets_of(coordinator, group) == {("orders", 0): 1}
    assert await coordinator.expire_offsets(committed_at + RETENTION_MS) == 1
    assert offsets_of(coordinator, group) == {}
    assert coordinator.group(group) is None  # an empty group without offsets is deleted too
    coordinator.shutdown()
    reloaded = await leading_coordinator(offsets_log)
    assert offsets_of(reloaded, group) == {}
    assert reloaded.group(group) is None


async def test_an_empty_consumer_group_expires_from_when_it_emptied(offsets_log: LogOffsets) -> None:
    group = GROUPS[1]
    emptied_at = 1_000_000
    # A consumer group that had members and emptied at `emptied_at`, with an offset committed much later.
    builder = RecordBatchBuilder()
    builder.append(
        encode_group_key(group),
        encode_group_value(GroupSnapshot("consumer", 4, "range", None, emptied_at, [])),
    )
    builder.append(
        encode_offset_key(group, "orders", 0),
        encode_offset_value(CommittedOffset(42, -1, "", emptied_at + 10 * RETENTION_MS)),
    )
    await offsets_log.append(partition_for(group, PARTITIONS), builder.build())
    coordinator = await leading_coordinator(offsets_log)
    assert offsets_of(coordinator, group) == {("orders", 0): 42}
    assert coordinator.group(group).snapshot().generation_id == 4
    assert await coordinator.expire_offsets(emptied_at + RETENTION_MS - 1) == 0
    assert await coordinator.expire_offsets(emptied_at + RETENTION_MS) == 1
    assert offsets_of(coordinator, group) == {}
    assert coordinator.group(group) is None


async def test_offsets_of_deleted_topics_are_removed(offsets_log: LogOffsets) -> None:
    coordinator = await leading_coordinator(offsets_log)
    group = GROUPS[2]
    await coordinator.commit_offsets(group, "", None, -1, commits(("orders", 0, 1), ("clicks", 0, 2)))
    del offsets_log.topics["clicks"]
    # Long before any retention: a deleted topic's offsets go at the next check.
    committed_at = coordinator.fetch_offsets(group, None)[("orders", 0)].commit_timestamp_ms
    assert await coordinator.expire_offsets(committed_at) == 1
    assert offsets_of(coordinator, group) == {("orders", 0): 1}
    del offsets_log.topics["orders"]
    await coordinator.topic_deleted("orders")
    assert offsets_of(coordinator, group) == {}
