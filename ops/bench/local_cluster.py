"""Local processes for the benchmarks: ZooKeeper and one broker, a clean stop on SIGTERM, what a log holds.

- `one_broker`: ZooKeeper and one Backbone broker (as `backbone dev` starts them), stopped when the block
  ends, however it ends.
- `stop_on_termination`: SIGTERM and SIGHUP unwind the benchmark like an exception, so the `finally` blocks
  stop what it started (ZooKeeper runs in a session of its own: a signal to the benchmark's process group
  does not reach it). `ops/bench/run` stops a benchmark that overruns its time with SIGTERM.
- `broker_with_sasl_ssl`: the same with a PLAINTEXT and a SASL_SSL listener (certificates from ops/dev-ca) and
  one SCRAM-SHA-512 user.
- `stored_batches`: the headers of the batches a broker stored for a partition, read from its log files.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from backbone.coordination import ClusterStore, ScramCredential, ZooKeeperServer, find_free_port
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


@dataclass(frozen=True)
class SecureBroker:
    broker: BrokerProcess  # its `port` is the PLAINTEXT listener's
    sasl_port: int
    ca_file: Path


@contextlib.contextmanager
def broker_with_sasl_ssl(
    directory: Path, user: str, password: str, mechanisms: str = "SCRAM-SHA-512"
) -> Iterator[SecureBroker]:
    """ZooKeeper and broker 1 with a PLAINTEXT and a SASL_SSL listener offering `mechanisms`, `user` holding a
    SCRAM-SHA-512 credential for `password` (PLAIN checks it too), data and certificates under `directory`."""
    certificates = directory / "ca"
    dev_ca = Path(__file__).resolve().parents[1] / "dev-ca"
    subprocess.run([str(dev_ca), str(certificates)], check=True, capture_output=True)
    zookeeper = ZooKeeperServer(directory / "zk", find_free_port(), force_sync=False)
    zookeeper.start(timeout=START_TIMEOUT)
    try:
        connect = zookeeper.connect_string + "/secure"
        with ClusterStore(connect) as store:
            credential = ScramCredential.from_password("SCRAM-SHA-512", password)
            store.set_scram_credential(user, "SCRAM-SHA-512", credential)
        plain_port, sasl_port = find_free_port(), find_free_port()
        properties = {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_port}",
            "ssl.keystore.location": certificates / "broker.pem",
            "sasl.enabled.mechanisms": mechanisms,
        }
        broker = BrokerProcess(1, connect, directory / "broker", port=plain_port, properties=properties)
        try:
            broker.start(timeout=START_TIMEOUT)
            yield SecureBroker(broker, sasl_port, certificates / "ca.pem")
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
