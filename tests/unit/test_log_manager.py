"""LogManager: log directories, opening at startup, creating and deleting logs, periodic work."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backbone.log import LogConfig, LogManager
from backbone.log.recovery import CLEAN_SHUTDOWN_FILE
from backbone.protocol.errors import KafkaStorageError
from tests.helpers.batches import FakeClock, batch_of_size

pytestmark = pytest.mark.unit


def kilobyte_batch() -> bytes:
    return batch_of_size(1000, record_size=313)


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "data1", tmp_path / "data2"]


@pytest.fixture
def manager(dirs: list[Path]) -> Iterator[LogManager]:
    started = LogManager(dirs, LogConfig(segment_bytes=2000), clock=FakeClock())
    started.startup()
    try:
        yield started
    finally:
        started.shutdown()


def test_new_logs_go_to_the_directory_with_fewest_partitions(manager: LogManager, dirs: list[Path]) -> None:
    logs = [manager.get_or_create_log("events", partition) for partition in range(4)]
    assert [log.directory.parent for log in logs] == [dirs[0], dirs[1], dirs[0], dirs[1]]
    assert logs[0].directory.name == "events-0"
    assert manager.get_or_create_log("events", 0) is logs[0]
    assert manager.get_log("events", 9) is None
    assert sorted(manager.logs()) == [("events", p) for p in range(4)]


def test_startup_reopens_every_log_and_shutdown_closes_them_cleanly(dirs: list[Path]) -> None:
    first = LogManager(dirs, LogConfig(segment_bytes=2000))
    first.startup()
    try:
        for partition in range(3):
            log = first.get_or_create_log("orders", partition)
            for _ in range(partition + 1):
                log.append(kilobyte_batch())
    finally:
        first.shutdown()
    markers = sorted(path.parent.name for path in Path(dirs[0]).parent.glob(f"*/*/{CLEAN_SHUTDOWN_FILE}"))
    assert markers == ["orders-0", "orders-1", "orders-2"]
    (dirs[0] / "not-a-partition").mkdir()
    second = LogManager(dirs, LogConfig(segment_bytes=2000))
    second.startup()
    try:
        ends = {partition: log.log_end_offset for (_, partition), log in second.logs().items()}
        assert ends == {0: 3, 1: 6, 2: 9}
        assert all(log.had_clean_shutdown for log in second.logs().values())
    finally:
        second.shutdown()


def test_a_log_directory_cannot_be_shared_by_two_managers(manager: LogManager, dirs: list[Path]) -> None:
    other = LogManager(dirs[1:])
    with pytest.raises(KafkaStorageError, match="locked by another process"):
        other.startup()


def test_a_partition_in_two_directories_is_refused(dirs: list[Path]) -> None:
    for directory in dirs:
        (directory / "twice-0").mkdir(parents=True)
    manager = LogManager(dirs)
    with pytest.raises(KafkaStorageError, match="two log directories"):
        manager.startup()
    again = LogManager(dirs)  # the failed startup released its locks
    (dirs[1] / "twice-0").rmdir()
    again.startup()
    again.shutdown()


def test_delete_log_removes_its_directory(manager: LogManager) -> None:
    log = manager.get_or_create_log("gone", 0)
    log.append(kilobyte_batch())
    region = log.read(0, 1).regions[0]
    assert manager.delete_log("gone", 0)
    assert not log.directory.exists() and manager.get_log("gone", 0) is None
    assert len(region.read()) == 1000  # a fetch in flight still completes
    assert not manager.delete_log("gone", 0)


def test_run_retention_and_run_flush_cover_every_log(manager: LogManager) -> None:
    manager.set_topic_config("old", LogConfig(segment_bytes=2000, retention_bytes=0))
    logs = [manager.get_or_create_log(topic, 0) for topic in ("old", "kept")]
    for log in logs:
        for _ in range(5):
            log.append(kilobyte_batch())
    assert manager.run_flush() == 2  # rolled segments are flushed
    assert [log.recovery_point for log in logs] == [12, 12]
    assert manager.run_retention() == 2  # only "old" has a retention limit
    assert [log.log_start_offset for log in logs] == [12, 0]
    assert manager.failures == {}


def test_topic_config_changes_reach_open_logs(manager: LogManager) -> None:
    log = manager.get_or_create_log("tuned", 0)
    manager.set_topic_config("tuned", LogConfig(segment_bytes=1500))
    assert log.config.segment_bytes == 1500
    manager.set_topic_config("tuned", None)
    assert log.config == manager.default_config


def test_a_failing_log_does_not_stop_periodic_work_for_the_others(manager: LogManager) -> None:
    broken = manager.get_or_create_log("broken", 0)
    healthy = manager.get_or_create_log("healthy", 0)
    for log in (broken, healthy):
        log.append(kilobyte_batch())
        log.append(kilobyte_batch())
        log.append(kilobyte_batch())
    for path in broken.directory.iterdir():  # the disk under it is gone (root ignores file modes)
        path.unlink()
    broken.directory.rmdir()
    assert manager.run_flush() == 1
    assert set(manager.failures) == {("broken", 0)}
    assert healthy.recovery_point == 6
    with pytest.raises(KafkaStorageError, match="broken-0"):
        manager.shutdown()  # every log is closed, then the first failure is raised
    assert (healthy.directory / CLEAN_SHUTDOWN_FILE).exists() and manager.logs() == {}


def test_log_dirs_must_be_given() -> None:
    with pytest.raises(ValueError, match=r"log\.dirs"):
        LogManager([])
