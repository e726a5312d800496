"""A disk that fills up under the log: a real, small tmpfs mounted for the test (tests run as root here).

Appends must fail with KAFKA_STORAGE_ERROR naming the file, leave no torn bytes behind, keep the log
readable, and work again once space is freed.
"""

from __future__ import annotations

import gc
import itertools
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backbone.log import Log, LogConfig
from backbone.protocol.errors import KafkaStorageError
from backbone.protocol.record_batch import check_batch
from tests.helpers.batches import batch_of_size, batch_ranges, iter_batches

pytestmark = pytest.mark.integration

TMPFS_BYTES = 1024 * 1024
CONFIG = LogConfig(segment_bytes=96 * 1024, index_interval_bytes=512)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.fail(
            f"cannot mount a tmpfs at {mount_point} (exit {mounted.returncode}: {mounted.stderr.strip()}); "
            "this test needs root and mount permission"
        )
    try:
        yield mount_point
    finally:
        gc.collect()  # logs dropped without close (crash simulations) hold descriptors until collected
        unmounted = subprocess.run(["umount", str(mount_point)], capture_output=True, text=True, timeout=30)
        if unmounted.returncode != 0:  # something still holds a file: detach it anyway, then report
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=30)
            pytest.fail(f"umount {mount_point} failed: {unmounted.stderr.strip()}")


def assert_readable(log: Log, end: int) -> None:
    data = log.read(0, 1 << 30).to_bytes()
    for _, batch in iter_batches(data):
        check_batch(batch)
    ranges = batch_ranges(data)
    assert ranges[0][0] == 0 and ranges[-1][1] == end - 1 == log.log_end_offset - 1
    assert all(after[0] == before[1] + 1 for before, after in itertools.pairwise(ranges))


def fill_until_full(log: Log, batch: bytes, limit: int = 10_000) -> KafkaStorageError:
    for _ in range(limit):
        try:
            log.append(batch)
        except KafkaStorageError as exc:
            return exc
    pytest.fail(f"the disk never filled after {limit} appends")


def test_disk_full_is_a_clear_error_and_the_log_recovers_when_space_is_freed(small_disk: Path) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\xaa" * (256 * 1024))  # freed later to make room
    batch = batch_of_size(3000, record_size=200)
    log = Log(small_disk / "full-0", CONFIG)
    try:
        error = fill_until_full(log, batch)
        assert "No space left on device" in str(error)
        assert str(small_disk / "full-0") in str(error)
        end = log.log_end_offset
        assert end > 0
        # No torn bytes: the segment files hold exactly the appended batches.
        on_disk = sum(path.stat().st_size for path in (small_disk / "full-0").glob("*.log"))
        assert on_disk == log.size_in_bytes
        assert_readable(log, end)
        with pytest.raises(KafkaStorageError):  # still full: still refused, still consistent
            log.append(batch)
        assert log.log_end_offset == end
        filler.unlink()
        info = log.append(batch)
        assert info.first_offset == end
        log.flush()
        assert_readable(log, info.last_offset + 1)
    finally:
        log.close()
    reopened = Log(small_disk / "full-0", CONFIG)
    try:
        assert reopened.had_clean_shutdown
        assert_readable(reopened, info.last_offset + 1)
    finally:
        reopened.close()


def test_a_crash_on_a_full_disk_needs_room_to_recover_and_loses_nothing(small_disk: Path) -> None:
    """Recovery writes index files: on a full disk it fails clearly, changes no data, and works later."""
    filler = small_disk / "filler"
    filler.write_bytes(b"\xaa" * (128 * 1024))
    log = Log(small_disk / "crash-0", CONFIG)
    fill_until_full(log, batch_of_size(3000, record_size=200))
    end = log.log_end_offset
    sizes = {path.name: path.stat().st_size for path in (small_disk / "crash-0").glob("*.log")}
    del log  # no close, as if killed: the next open must recover
    with pytest.raises(KafkaStorageError, match="No space left on device") as raised:
        Log(small_disk / "crash-0", CONFIG)
    assert str(small_disk / "crash-0") in str(raised.value)
    del raised
    assert {path.name: path.stat().st_size for path in (small_disk / "crash-0").glob("*.log")} == sizes
    filler.unlink()
    reopened = Log(small_disk / "crash-0", CONFIG)
    try:
        assert not reopened.had_clean_shutdown
        assert_readable(reopened, end)
    finally:
        reopened.close()
