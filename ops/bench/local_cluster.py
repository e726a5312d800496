"""Local processes for the benchmarks: ZooKeeper and one broker, a clean stop on SIGTERM, what a log holds.

- `one_broker`: ZooKeeper and one Backbone broker (as `backbone dev` starts them), stopped when the block
  ends, however it ends.
- `stop_on_termination`: SIGTERM and SIGHUP unwind the benchmark like an exception, so the `finally` blocks
  stop what it started (ZooKeeper runs in a session of its own: a signal to the benchmark's process group
  does not reach it). `ops/bench/run` stops a benchmark that overruns its time with SIGTERM.
- `stored_batches`: the headers of the batches a broker stored for a partition, read from its log files.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess
from backbone.protocol.record_batch import HEADER_SIZE, BatchHeader, read_header

START_TIMEOUT = 120.0  # a JVM, an Erlang VM or a broker starting on a busy 2-core machine


@contextlib.contextmanager
def one_broker(
    directory: Path, properties: Mapping[str, object] | None = None, chroot: str = "/bench"
) -> Iterator[BrokerProcess]:
    """ZooKeeper and broker 1 with `properties`, data under `directory`; yields the running broker."""
    zookeeper = ZooKeeperServer(directory / "zk", find_free_port(), force_sync=False)
    zookeeper.start(timeout=START_TIMEOUT)
    try:
        broker = BrokerProcess(
            1, zookeeper.connect_string + chroot, directory / "broker", properties=properties
        )
        try:
            broker.start(timeout=START_TIMEOUT)
            yield broker
        finally:
            broker.stop(timeout=30)
    finally:
        zookeeper.stop()


def stop_on_termination() -> None:
    """Turn SIGTERM and SIGHUP into SystemExit, so every `finally` block runs."""
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda received, _frame: sys.exit(128 + received))


def stored_batches(log_dirs: str, topic: str, partition: int = 0) -> Iterator[BatchHeader]:
    """The header of every batch in the partition's segment files, in offset order (batches as the
    producer sent them: the broker appends a request's batch as it came)."""
    for segment in sorted((Path(log_dirs) / f"{topic}-{partition}").glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + HEADER_SIZE <= len(data):
            header = read_header(data, position)
            if header.batch_length <= 0:  # the unwritten (zero) tail of a preallocated segment
                break
            yield header
            position += header.size
