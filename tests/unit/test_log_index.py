"""The sparse offset and time indexes: lookups, file round trips, validation and the memory cache."""

from __future__ import annotations

import gc
import struct
from pathlib import Path

import pytest

from backbone.log.index import IndexCache, OffsetIndex, TimeIndex

pytestmark = pytest.mark.unit

BASE = 1000


def offset_index(tmp_path: Path, entries: list[tuple[int, int]] = ()) -> OffsetIndex:  # type: ignore[assignment]
    index = OffsetIndex(tmp_path / "00000000000000001000.index", BASE)
    index.reset()
    for relative, position in entries:
        index.append(relative, position)
    return index


def test_offset_lookup_finds_the_floor_entry(tmp_path: Path) -> None:
    index = offset_index(tmp_path, [(10, 100), (20, 200), (30, 300)])
    assert index.lookup(BASE) == (BASE, 0)  # before the first entry: the segment start
    assert index.lookup(BASE + 9) == (BASE, 0)
    assert index.lookup(BASE + 10) == (BASE + 10, 100)
    assert index.lookup(BASE + 25) == (BASE + 20, 200)
    assert index.lookup(BASE + 10**6) == (BASE + 30, 300)
    assert index.floor_entry_at(250) == (BASE + 20, 200) and index.floor_entry_at(50) == (BASE, 0)
    assert len(index) == 3 and index.last() == (BASE + 30, 300)


def test_persist_writes_kafkas_big_endian_format_and_load_reads_it(tmp_path: Path) -> None:
    index = offset_index(tmp_path, [(10, 100), (20, 200)])
    index.persist(fsync=True)
    assert index.path.read_bytes() == struct.pack(">iiii", 10, 100, 20, 200)
    index.append(30, 300)
    index.persist(fsync=False)  # only the new entry is written
    again = OffsetIndex(index.path, BASE)
    assert again.load(data_size=1000)
    assert again.entries() == index.entries() and again.count == 3


def test_persist_after_truncation_trims_the_file(tmp_path: Path) -> None:
    index = offset_index(tmp_path, [(10, 100), (20, 200), (30, 300)])
    index.persist(fsync=False)
    index.truncate_to_position(200)
    assert index.entries()[1].tolist() == [100]
    index.persist(fsync=False)
    assert index.path.stat().st_size == 8


def test_many_entries_round_trip(tmp_path: Path) -> None:
    index = offset_index(tmp_path, [(i, i * 10) for i in range(1, 5000)])
    index.persist(fsync=False)
    again = OffsetIndex(index.path, BASE)
    assert again.load(data_size=10**6)
    assert again.lookup(BASE + 4321) == (BASE + 4321, 43210)


@pytest.mark.parametrize(
    ("content", "data_size"),
    [
        (b"\x00\x00\x00\x01\x00\x00", 1000),  # a partial entry
        (struct.pack(">iiii", 20, 100, 10, 200), 1000),  # offsets going down
        (struct.pack(">iiii", 10, 200, 20, 100), 1000),  # positions going down
        (struct.pack(">ii", 10, 5000), 1000),  # a position beyond the data file
        (struct.pack(">ii", -1, 10), 1000),  # a negative relative offset
    ],
)
def test_insane_offset_index_files_are_rejected(tmp_path: Path, content: bytes, data_size: int) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(content)
    index = OffsetIndex(path, BASE)
    assert not index.load(data_size)
    assert not index.loaded


def test_missing_file_does_not_load(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000001000.index", BASE)
    assert not index.load(100) and not index.file_size_ok()


def test_time_index_lookup_and_append_rules(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE)
    index.reset()
    index.maybe_append(100, BASE + 5)
    index.maybe_append(100, BASE + 9)  # not larger: ignored
    index.maybe_append(200, BASE + 20)
    assert index.count == 2
    assert index.lookup(50) == BASE  # nothing at or below: search from the segment start
    assert index.lookup(150) == BASE + 5
    assert index.lookup(200) == BASE + 20
    assert index.last() == (200, BASE + 20)
    index.truncate_to_offset(BASE + 20)
    assert index.last() == (100, BASE + 5)


def test_time_index_round_trip_and_validation(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE)
    index.reset()
    index.maybe_append(1_700_000_000_000, BASE + 1)
    index.maybe_append(1_700_000_000_100, BASE + 7)
    index.persist(fsync=False)
    assert index.path.read_bytes() == struct.pack(">qiqi", 1_700_000_000_000, 1, 1_700_000_000_100, 7)
    again = TimeIndex(index.path, BASE)
    assert again.load(0) and again.last() == (1_700_000_000_100, BASE + 7)
    index.path.write_bytes(struct.pack(">qiqi", 5, 1, 4, 2))  # timestamps going down
    assert not TimeIndex(index.path, BASE).load(0)


def test_cache_evicts_least_recently_used_and_entries_reload(tmp_path: Path) -> None:
    reloads: list[str] = []

    class Owner:  # stands for a segment: the index holds its reload method weakly
        def __init__(self, name: str, index: OffsetIndex) -> None:
            self.name, self.index = name, index

        def reload(self) -> None:
            reloads.append(self.name)
            self.index.load(1000)

    indexes, owners = [], []
    for name in ("a", "b", "c"):
        index = OffsetIndex(tmp_path / f"{name}.index", BASE)
        index.reset()
        for i in range(1, 11):
            index.append(i, i * 10)
        index.persist(fsync=False)
        owners.append(Owner(name, index))
        index.reloader = owners[-1].reload
        indexes.append(index)
    cache = IndexCache(max_bytes=2 * 80)  # two indexes of 10 entries (8 bytes each)
    for i in range(3):
        cache.touch(owners[i], (indexes[i],))
    assert not indexes[0].loaded and indexes[1].loaded and indexes[2].loaded
    assert cache.bytes_held == 160
    assert indexes[0].lookup(BASE + 5) == (BASE + 5, 50)  # reloaded on use
    assert reloads == ["a"] and indexes[0].count == 10
    held = cache.bytes_held
    del owners[2]  # an owner that goes away without forget() leaves nothing behind
    gc.collect()
    assert cache.bytes_held == held - 80


def test_cache_forgets_what_it_is_told_to(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", BASE)
    index.reset()
    index.append(1, 10)
    cache = IndexCache()
    owner = OffsetIndex(tmp_path / "owner", BASE)  # any object that can be weakly referenced
    cache.touch(owner, (index,))
    assert cache.bytes_held == 8
    cache.forget(owner)
    assert cache.bytes_held == 0


def test_cache_keeps_an_index_whose_file_is_incomplete(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", BASE)
    index.reset()
    index.append(1, 10)  # never persisted: evicting it would lose the entry
    other = OffsetIndex(tmp_path / "y.index", BASE)
    other.reset()
    other.append(1, 10)
    cache = IndexCache(max_bytes=0)
    cache.touch(index, (index,))
    cache.touch(other, (other,))
    assert index.loaded and index.entries()[0].tolist() == [1]
    cache.forget(index)
    cache.forget(other)
    assert cache.bytes_held == 0
