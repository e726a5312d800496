"""Mirroring loses nothing through faults, on the topology `backbone dev up` starts (dc1, dc2 and aggregate
with three brokers each, a mirror from each datacenter into the aggregate).

Each test produces numbered records continuously to dc1 and dc2 (acks=all, bounded in count and time)
while it breaks something: a mirror killed with kill -9 and restarted five times, an aggregate broker
killed and brought back, the whole dc1 cluster frozen for 30 seconds. Afterwards every acknowledged source
record is in the aggregate, found by its provenance header (cluster, partition, offset); duplicates are
counted and printed in one audit line per test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from mirror_support import caught_up, committed_total, end_total, origins, read_all
from replication_harness import NumberedProducer

from backbone.client import Admin, NewTopic
from backbone.dev import mirrors, topology
from backbone.dev.processes import output_tail
from backbone.dev.topology import process_alive
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration

DATACENTERS = ("dc1", "dc2")
MIRROR_KILLS = 5
SOURCE_OUTAGE_S = 30.0
POLL_S = 0.5  # the conditions below open client connections: poll them gently on a shared machine


class PositionedProducer(NumberedProducer):
    """A NumberedProducer that also records where each acknowledged record landed (partition, offset):
    the key the mirror's provenance header carries."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(bootstrap, topic, rate=250.0, limit=40_000)
        self.positions: set[tuple[int, int]] = set()

    def _answer(self, number: int):
        count = super()._answer(number)

        def answer(metadata, error) -> None:
            count(metadata, error)
            if error is None:
                with self.ledger.lock:
                    self.positions.add((metadata.partition, metadata.offset))

        return answer


class DevBackbone:
    """The processes of one `backbone dev up` and the operator's moves on them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.topology = topology.up(directory, progress=lambda _: None, preferred_ports=False)

    def bootstrap(self, cluster: str) -> str:
        return self.topology.data["clusters"][cluster]["bootstrap"]

    def brokers(self, cluster: str) -> list[dict]:
        return self.topology.data["clusters"][cluster]["brokers"]

    def mirror(self, source: str) -> dict:
        return next(m for m in self.topology.mirrors if m["source"] == source)

    def restart_dead(self) -> None:
        """What an operator does: `backbone dev up` again starts what died with its recorded command."""
        self.topology = topology.up(self.directory, progress=lambda _: None)

    def all_running(self) -> bool:
        return all(process_alive(e["pid"], e["marker"]) for e in self.topology.processes())

    def close(self) -> None:
        for broker in (b for c in self.topology.data["clusters"].values() for b in c["brokers"]):
            _signal(broker["pid"], signal.SIGCONT)  # a frozen broker cannot act on SIGTERM
        topology.down(self.directory, progress=lambda _: None, timeout=20)


def _signal(pid: int | None, number: int) -> None:
    if pid:
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.kill(pid, number)


def kill_9(entry: dict) -> None:
    os.kill(entry["pid"], signal.SIGKILL)
    wait_until(lambda: _exited(entry["pid"]), 30, what=f"pid {entry['pid']} gone")


def _exited(pid: int) -> bool:
    """Gone or a zombie. An exiting process loses its command line before it closes its sockets: until
    then its metrics port still answers, and a restarted mirror would look ready before it is."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


@pytest.fixture(scope="module")
def backbone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevBackbone]:
    """One topology for the module (starting nine brokers costs time); each test leaves it whole."""
    started = DevBackbone(tmp_path_factory.mktemp("mirror-faults") / "dev")
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def topic(backbone: DevBackbone, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh topic (one partition, three replicas, two in sync) in both datacenters, for one test."""
    name = request.node.name.removeprefix("test_")[:60]
    for cluster in DATACENTERS:
        with Admin(bootstrap_servers=backbone.bootstrap(cluster)) as admin:
            admin.create_topics([NewTopic(name, 1, 3, configs={"min.insync.replicas": "2"})])
    yield name
    wait_until(backbone.all_running, 10, what="every process of the topology running after the test")


@contextmanager
def producing(backbone: DevBackbone, topic: str) -> Iterator[dict[str, PositionedProducer]]:
    """Numbered records to `topic` in each datacenter until the block ends (or the producers' limit)."""
    with ExitStack() as stack:
        producers = {
            cluster: stack.enter_context(PositionedProducer(backbone.bootstrap(cluster), topic))
            for cluster in DATACENTERS
        }
        for producer in producers.values():
            assert producer.wait_for_acks(50, timeout=60), "the datacenters accept writes"
        yield producers


def mirrored(backbone: DevBackbone, source: str, topic: str) -> int:
    """How far the mirror from `source` has committed `topic`: everything before is in the aggregate."""
    return committed_total(backbone.bootstrap(source), mirrors.group_id(source, mirrors.AGGREGATE), topic)


def wait_for_progress(backbone: DevBackbone, source: str, topic: str, what: str) -> None:
    before = mirrored(backbone, source, topic)
    try:
        wait_until(
            lambda: mirrored(backbone, source, topic) > before, 90, POLL_S, what=f"{source} progress {what}"
        )
    except pytest.fail.Exception as failed:
        pytest.fail(f"{failed}\nthe mirror's output ends:\n{output_tail(backbone.mirror(source)['output'])}")


def check_everything_arrived(backbone: DevBackbone, topic: str, producers: dict, fault: str) -> None:
    """Stop producing, let both mirrors reach the end of the source topic, then look for every acknowledged
    record in the aggregate by its provenance; print the audit line."""
    for producer in producers.values():
        producer.stop()
    for source in DATACENTERS:
        group = mirrors.group_id(source, mirrors.AGGREGATE)
        wait_until(
            lambda s=source, g=group: caught_up(backbone.bootstrap(s), g, topic),
            120,
            POLL_S,
            what=f"the {source} mirror caught up",
        )
    aggregate = backbone.bootstrap(mirrors.AGGREGATE)
    expected = end_total(aggregate, topic)
    copies = origins(read_all(aggregate, topic, timeout_s=120))
    assert len(copies) == expected, "read the whole aggregate topic"
    assert None not in copies, "every record in the aggregate came through a mirror"
    lost = duplicated = 0
    counts = []
    for source, producer in producers.items():
        found = [(hop.partition, hop.offset) for hop in copies if hop.cluster == source]
        missing = producer.positions - set(found)
        lost += len(missing)
        duplicated += len(found) - len(set(found))
        counts.append(
            f"{source}_acknowledged={len(producer.positions)} {source}_failed={producer.ledger.failed}"
        )
        assert not missing, (
            f"{len(missing)} acknowledged {source} records missing, e.g. {sorted(missing)[:5]}"
        )
        assert producer.positions, f"{source} acknowledged records"
    print(f"audit {fault}: {' '.join(counts)} aggregate={len(copies)} lost={lost} duplicated={duplicated}")


def test_mirror_killed_and_restarted_five_times(backbone: DevBackbone, topic: str) -> None:
    with producing(backbone, topic) as producers:
        for kill in range(MIRROR_KILLS):
            source = DATACENTERS[kill % 2]
            wait_for_progress(backbone, source, topic, "before the kill")
            victim = backbone.mirror(source)
            kill_9(victim)
            backbone.restart_dead()
            restarted = backbone.mirror(source)
            assert restarted["pid"] != victim["pid"] and restarted["start"] == victim["start"]
            cmdline = Path(f"/proc/{restarted['pid']}/cmdline").read_bytes().split(b"\0")[:-1]
            assert [part.decode() for part in cmdline] == victim["start"], "the recorded start command"
        wait_for_progress(backbone, DATACENTERS[0], topic, "after the last restart")
        check_everything_arrived(backbone, topic, producers, "mirror kill -9 x5")


def test_aggregate_broker_killed_and_back(backbone: DevBackbone, topic: str) -> None:
    aggregate = backbone.bootstrap(mirrors.AGGREGATE)
    with producing(backbone, topic) as producers:
        wait_until(lambda: end_total(aggregate, topic) > 0, 60, POLL_S, what="the topic in the aggregate")

        def partition():
            with Admin(bootstrap_servers=aggregate) as admin:
                return admin.describe_topics([topic])[topic].partitions[0]

        leader = partition().leader
        victim = next(b for b in backbone.brokers(mirrors.AGGREGATE) if b["id"] == leader)
        kill_9(victim)
        for source in DATACENTERS:  # the aggregate's other two replicas take the writes
            wait_for_progress(backbone, source, topic, f"with aggregate broker {leader} dead")
        backbone.restart_dead()
        wait_until(lambda: len(partition().isr) == 3, 90, POLL_S, what=f"broker {leader} back in the ISR")
        for source in DATACENTERS:
            wait_for_progress(backbone, source, topic, f"with aggregate broker {leader} back")
        check_everything_arrived(backbone, topic, producers, f"aggregate broker {leader} kill -9")


def test_source_cluster_frozen_for_30_seconds(backbone: DevBackbone, topic: str) -> None:
    frozen = backbone.brokers("dc1")
    with producing(backbone, topic) as producers:
        wait_for_progress(backbone, "dc1", topic, "before the outage")
        for broker in frozen:
            os.kill(broker["pid"], signal.SIGSTOP)
        outage_ends = time.monotonic() + SOURCE_OUTAGE_S
        try:
            wait_for_progress(backbone, "dc2", topic, "while dc1 is down")
            # The outage lasts its full length by design: it is the fault, not a wait for a condition.
            time.sleep(max(0.0, outage_ends - time.monotonic()))
        finally:
            for broker in frozen:
                os.kill(broker["pid"], signal.SIGCONT)
        acked = producers["dc1"].ledger.acked
        assert producers["dc1"].wait_for_acks(acked + 50, timeout=120), "dc1 accepts writes again"
        wait_for_progress(backbone, "dc1", topic, "after the outage")
        check_everything_arrived(backbone, topic, producers, "dc1 frozen 30s")
