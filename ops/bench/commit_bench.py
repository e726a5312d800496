"""Offset commit throughput: committed partition offsets per second against local brokers.

    python ops/bench/commit_bench.py [--brokers 1|3] [--clients 8] [--partitions 50] [--seconds 10]

Starts ZooKeeper and `--brokers` brokers (with 3, `__consumer_offsets` is replicated 3 ways and every
commit waits for all in-sync replicas, as acks=all). `--clients` consumers (one connection and one group
each, as separate applications would be) each commit `--partitions` partition offsets per OffsetCommit
request, back to back, for `--seconds`. Prints partition offsets committed per second (every one answered
without error, checked) and requests per second, then reads one group's offsets back to check the last
commit stuck. The target is at least 5,000 partition offsets per second.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backbone.client import Admin, NewTopic
from backbone.client.consumer.group_requests import find_coordinator, offset_commit, offset_fetch
from backbone.client.structs import OffsetAndMetadata, TopicPartition
from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess
from backbone.protocol.errors import ErrorCode, KafkaError
from backbone.wire.connection import BrokerConnection

TOPIC = "committed"


async def coordinator_connection(bootstrap: str, group: str) -> BrokerConnection:
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + 60
    while True:
        probe = BrokerConnection(host, int(port), -1, client_id="commit-bench")
        try:
            found = await find_coordinator(probe, group)
            return BrokerConnection(found.host, found.port, found.node_id, client_id="commit-bench")
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)  # the offsets topic is being created; its leaders come within seconds
        finally:
            await probe.close()


async def committer(
    bootstrap: str, group: str, partitions: list[TopicPartition], stop_at: float
) -> tuple[int, int, dict[TopicPartition, int]]:
    """(partition offsets committed, requests, last offset of each partition) for one client."""
    connection = await coordinator_connection(bootstrap, group)
    committed = requests = 0
    last: dict[TopicPartition, int] = {}
    try:
        # Warm up until the coordinator has loaded the group's partition (COORDINATOR_LOAD_IN_PROGRESS).
        while set(
            (await offset_commit(connection, group, {partitions[0]: OffsetAndMetadata(0)})).values()
        ) != {ErrorCode.none}:
            await asyncio.sleep(0.1)
        offset = 0
        while time.monotonic() < stop_at:
            offset += 1
            errors = await offset_commit(
                connection, group, {tp: OffsetAndMetadata(offset) for tp in partitions}
            )
            failed = {tp: e for tp, e in errors.items() if e is not ErrorCode.none}
            if failed:
                raise RuntimeError(f"{group}: commit failed: {failed}")
            committed += len(partitions)
            requests += 1
            last = dict.fromkeys(partitions, offset)
        stored = await offset_fetch(connection, group, partitions)
        if {tp: m.offset for tp, m in stored.items() if m is not None} != last:
            raise RuntimeError(f"{group}: offsets read back differ from the last commit")
    finally:
        await connection.close()
    return committed, requests, last


async def run(bootstrap: str, clients: int, partitions: int, seconds: float) -> tuple[float, float]:
    topic_partitions = [TopicPartition(TOPIC, p) for p in range(partitions)]
    # Coordinators found (and the offsets topic created) before the clock starts.
    for c in range(clients):
        await (await coordinator_connection(bootstrap, f"bench-{c}")).close()
    started = time.monotonic()
    stop_at = started + seconds
    results = await asyncio.gather(
        *(committer(bootstrap, f"bench-{c}", topic_partitions, stop_at) for c in range(clients))
    )
    elapsed = time.monotonic() - started
    return sum(r[0] for r in results) / elapsed, sum(r[1] for r in results) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", type=int, default=1, choices=(1, 3))
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=50, help="partition offsets per commit request")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="commit-bench-") as tmp:
        zookeeper = ZooKeeperServer(Path(tmp) / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=60)
        brokers: list[BrokerProcess] = []
        try:
            for broker_id in range(1, args.brokers + 1):
                broker = BrokerProcess(
                    broker_id,
                    zookeeper.connect_string + "/commit-bench",
                    Path(tmp) / f"broker-{broker_id}",
                    properties={"offsets.topic.replication.factor": args.brokers},
                )
                broker.start(timeout=60)
                brokers.append(broker)
            bootstrap = brokers[0].bootstrap
            with Admin(bootstrap_servers=bootstrap) as admin:
                admin.create_topics([NewTopic(TOPIC, args.partitions, args.brokers)])
            offsets_per_s, requests_per_s = asyncio.run(
                run(bootstrap, args.clients, args.partitions, args.seconds)
            )
        finally:
            for broker in brokers:
                broker.stop()
            zookeeper.stop()
    print(
        f"brokers={args.brokers} clients={args.clients} partitions/request={args.partitions}: "
        f"{offsets_per_s:,.0f} partition offsets/s committed ({requests_per_s:,.0f} requests/s)"
    )


if __name__ == "__main__":
    main()
