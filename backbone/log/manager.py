"""The broker's view of its log directories (`log.dirs`): opening every partition log at startup,
creating and deleting logs, and the periodic retention, flush and compaction runs.

Plain and synchronous: the broker calls `run_retention()`, `run_flush()` and `run_cleaner()` from its
scheduler (a worker thread is best for `run_flush` and `run_cleaner`, which do file work that can take a
while; logs are thread-safe).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from backbone.log.cleaner import LogCleaner
from backbone.log.config import LogConfig
from backbone.log.files import storage_errors
from backbone.log.index import DEFAULT_INDEX_CACHE, IndexCache
from backbone.log.log import Log, parse_partition_dir, partition_dir_name
from backbone.protocol import TopicPartition
from backbone.protocol.errors import KafkaStorageError

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"


class LogManager:
    """All partition logs of one broker, spread over its log directories."""

    def __init__(
        self,
        log_dirs: Sequence[Path | str],
        default_config: LogConfig | None = None,
        *,
        topic_configs: Mapping[str, LogConfig] | None = None,
        clock: Callable[[], float] = time.time,
        index_cache: IndexCache = DEFAULT_INDEX_CACHE,
        cleaner: LogCleaner | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("log.dirs must name at least one directory")
        self.log_dirs = [Path(directory) for directory in log_dirs]
        self.default_config = default_config or LogConfig()
        self._topic_configs = dict(topic_configs or {})
        self._clock = clock
        self._cache = index_cache
        self._logs: dict[TopicPartition, Log] = {}
        self._lock = threading.RLock()
        self._dir_locks: list[int] = []
        self.cleaner = cleaner or LogCleaner(clock=clock)
        # Storage errors of the last run_retention / run_flush, by partition.
        self.failures: dict[TopicPartition, KafkaStorageError] = {}

    # -- startup and shutdown --------------------------------------------------------------------------

    def startup(self) -> None:
        """Lock every log directory and open (recovering as needed) every partition log in them."""
        try:
            self.lock_dirs()
            for directory in self.log_dirs:
                self._open_dir(directory)
        except BaseException:
            self.shutdown()
            raise

    def lock_dirs(self) -> None:
        """Lock every log directory (once): before anything reads them, so a second broker pointed at the
        same directories stops on the lock, not on what it read of the first one's files."""
        if self._dir_locks:
            return
        try:
            for directory in self.log_dirs:
                self._lock_dir(directory)
        except BaseException:
            self.shutdown()
            raise

    def _lock_dir(self, directory: Path) -> None:
        """Take an exclusive lock so two brokers never share a log directory."""
        with storage_errors("create log directory", directory):
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise KafkaStorageError(
                f"log directory {directory} is locked by another process ({exc.strerror}); "
                "is another broker using it?"
            ) from exc
        self._dir_locks.append(fd)

    def _open_dir(self, directory: Path) -> None:
        with storage_errors("list log directory", directory):
            entries = sorted(entry for entry in directory.iterdir() if entry.is_dir())
        for path in entries:
            try:
                topic, partition = parse_partition_dir(path.name)
            except ValueError:
                log.warning("event=unknown_directory_skipped path=%s", path)
                continue
            other = self._logs.get((topic, partition))
            if other is not None:
                raise KafkaStorageError(
                    f"partition {path.name} is in two log directories: {other.directory} and {path}; "
                    "remove one copy"
                )
            self._logs[(topic, partition)] = Log(
                path, self.config_for(topic), clock=self._clock, index_cache=self._cache
            )
        log.info("event=log_dir_loaded dir=%s partitions=%d", directory, len(entries))

    def shutdown(self) -> None:
        """Close every log cleanly (each gets its clean-shutdown marker) and release the directory locks.

        Every log is closed even if one fails; the first failure is raised at the end.
        """
        first_error: KafkaStorageError | None = None
        self.cleaner.shutdown()  # a clean in progress stops before the logs close
        with self._lock:
            for (topic, partition), partition_log in sorted(self._logs.items()):
                try:
                    partition_log.close()
                except KafkaStorageError as exc:
                    log.error(
                        "event=log_close_failed topic=%s partition=%d error=%r", topic, partition, str(exc)
                    )
                    first_error = first_error or exc
            self._logs.clear()
            for fd in self._dir_locks:
                os.close(fd)
            self._dir_locks.clear()
        if first_error is not None:
            raise first_error

    # -- logs ------------------------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def set_topic_config(self, topic: str, config: LogConfig | None) -> None:
        """Set (or with None, remove) a topic's override; its open logs take it at once."""
        with self._lock:
            if config is None:
                self._topic_configs.pop(topic, None)
            else:
                self._topic_configs[topic] = config
            for (name, _), partition_log in self._logs.items():
                if name == topic:
                    partition_log.update_config(self.config_for(topic))

    def set_default_config(self, default: LogConfig, topic_configs: Mapping[str, LogConfig]) -> None:
        """New defaults (the broker's dynamic configs changed) with every topic's override recomputed on
        them, swapped together; open logs take their new config at once."""
        with self._lock:
            self.default_config = default
            self._topic_configs = dict(topic_configs)
            for (topic, _), partition_log in self._logs.items():
                partition_log.update_config(self.config_for(topic))

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def get_or_create_log(self, topic: str, partition: int) -> Log:
        """The partition's log, created in the log directory holding the fewest partitions if new."""
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                return existing
            if not self._dir_locks:
                raise KafkaStorageError("the log manager is not started")
            counts = {directory: 0 for directory in self.log_dirs}
            for partition_log in self._logs.values():
                counts[partition_log.directory.parent] = counts.get(partition_log.directory.parent, 0) + 1
            directory = min(self.log_dirs, key=lambda d: counts[d])
            created = Log(
                directory / partition_dir_name(topic, partition),
                self.config_for(topic),
                clock=self._clock,
                index_cache=self._cache,
            )
            self._logs[(topic, partition)] = created
            log.info("event=log_created topic=%s partition=%d dir=%s", topic, partition, created.directory)
            return created

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove the partition's log and its directory; return whether there was one."""
        with self._lock:
            partition_log = self._logs.pop((topic, partition), None)
        if partition_log is None:
            return False
        partition_log.delete()
        return True

    # -- periodic work ---------------------------------------------------------------------------------

    def run_retention(self, now_ms: int | None = None) -> int:
        """Delete expired segments of every log; return how many. A failing log does not stop the others."""
        return self._for_each("retention", lambda partition_log: partition_log.delete_old_segments(now_ms))

    def run_flush(self, now_ms: int | None = None) -> int:
        """Flush logs whose flush.ms has passed and segments rolled since the last flush; return how many."""
        return self._for_each("flush", lambda partition_log: int(partition_log.flush_if_needed(now_ms)))

    def run_cleaner(self, now_ms: int | None = None) -> int:
        """Compact the logs whose cleanup.policy contains "compact" and that need it (backbone.log.cleaner);
        return how many were cleaned. A failing log is logged and skipped."""
        return self.cleaner.clean_logs(self.logs().values(), now_ms)

    def _for_each(self, task: str, action: Callable[[Log], int]) -> int:
        total = 0
        errors: dict[TopicPartition, KafkaStorageError] = {}
        for (topic, partition), partition_log in sorted(self.logs().items()):
            try:
                total += action(partition_log)
            except KafkaStorageError as exc:
                # One failing log must not stop the others; the failure is logged and kept in `failures`
                # for the broker to act on (e.g. take the partition offline).
                log.error("event=%s_failed topic=%s partition=%d error=%r", task, topic, partition, str(exc))
                errors[(topic, partition)] = exc
        self.failures = errors
        return total
