"""The leader epoch cache: Kafka's assign, end-offset and truncation semantics, and its checkpoint file."""

from __future__ import annotations

from pathlib import Path

import pytest

from backbone.log.epoch_cache import (
    CHECKPOINT_NAME,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)

pytestmark = pytest.mark.unit

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache_with(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / CHECKPOINT_NAME)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def test_assign_only_records_new_epochs(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (0, 0))
    assert not cache.assign(0, 10)  # same epoch later: nothing new
    assert cache.assign(2, 10)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(2, 10)]
    assert cache.latest_epoch == 2 and cache.earliest_entry == EpochEntry(0, 0)


def test_assign_removes_entries_that_would_break_monotonicity(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (2, 10), (3, 20))
    cache.assign(4, 15)  # starts before epoch 3 did: epoch 3's entry goes
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(4, 15)]
    cache.assign(3, 30)  # an older epoch than the latest: later entries go
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(3, 30)]


def test_assign_rejects_negative_values(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid leader epoch"):
        cache_with(tmp_path, (-1, 0))


def test_end_offset_for(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 0), (4, 100), (7, 250))
    assert cache.end_offset_for(7, 400) == (7, 400)  # latest epoch: the log end offset
    assert cache.end_offset_for(4, 400) == (4, 250)
    assert cache.end_offset_for(5, 400) == (4, 250)  # unknown epoch between: the floor epoch
    assert cache.end_offset_for(2, 400) == (2, 100)
    assert cache.end_offset_for(1, 400) == UNDEFINED  # below the earliest epoch
    assert cache.end_offset_for(9, 400) == UNDEFINED  # above the latest
    assert cache.end_offset_for(UNDEFINED_EPOCH, 400) == UNDEFINED
    assert LeaderEpochCache(tmp_path / "empty").end_offset_for(0, 5) == UNDEFINED


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 10), (4, 100))
    assert cache.epoch_for_offset(5) is None
    assert cache.epoch_for_offset(10) == 2 and cache.epoch_for_offset(99) == 2
    assert cache.epoch_for_offset(100) == 4


def test_truncate_from_end(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (2, 10), (3, 20))
    cache.truncate_from_end(20)
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 10)]
    cache.truncate_from_end(11)
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 10)]


def test_truncate_from_start_keeps_and_moves_the_last_entry_below(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (2, 10), (3, 20))
    cache.truncate_from_start(15)
    assert cache.entries == [EpochEntry(2, 15), EpochEntry(3, 20)]
    cache.truncate_from_start(20)
    assert cache.entries == [EpochEntry(3, 20)]
    cache.truncate_from_start(5)  # below everything: no change
    assert cache.entries == [EpochEntry(3, 20)]


def test_checkpoint_file_is_kafkas_text_format(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (0, 0), (5, 1234))
    assert cache.path.read_text() == "0\n2\n0 0\n5 1234\n"
    loaded, complete = LeaderEpochCache.load(cache.path)
    assert complete and loaded.entries == cache.entries
    cache.clear()
    assert cache.path.read_text() == "0\n0\n"
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    "content",
    ["", "1\n0\n", "0\n2\n0 0\n", "0\n1\n0 x\n", "0\n1\n0 0 0\n", "0\nx\n", "0\n2\n5 10\n3 20\n"],
)
def test_unreadable_checkpoint_loads_empty_and_says_so(tmp_path: Path, content: str) -> None:
    path = tmp_path / CHECKPOINT_NAME
    path.write_text(content)
    cache, complete = LeaderEpochCache.load(path)
    if content == "0\n2\n5 10\n3 20\n":
        # Well-formed but not monotonic: assign keeps the later entry, as Kafka's loader does.
        assert complete and cache.entries == [EpochEntry(3, 20)]
    else:
        assert not complete and cache.entries == []


def test_missing_checkpoint_is_reported(tmp_path: Path) -> None:
    cache, complete = LeaderEpochCache.load(tmp_path / CHECKPOINT_NAME)
    assert not complete and cache.entries == []


def test_failed_write_leaves_the_cache_dirty_and_is_retried(tmp_path: Path) -> None:
    directory = tmp_path / "gone"
    directory.mkdir()
    cache = LeaderEpochCache(directory / CHECKPOINT_NAME)
    directory.rmdir()
    with pytest.raises(Exception, match="KAFKA_STORAGE_ERROR"):
        cache.assign(1, 0)
    assert cache.entries == [EpochEntry(1, 0)]  # memory has it; the file does not yet
    directory.mkdir()
    cache.persist_if_dirty()
    assert (directory / CHECKPOINT_NAME).read_text() == "0\n1\n1 0\n"
