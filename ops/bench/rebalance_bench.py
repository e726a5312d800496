"""Rebalance time of a 10-member consumer group: how long until the group is stable again when a member
joins or leaves.

    python ops/bench/rebalance_bench.py [--members 10] [--partitions 30] [--rounds 5]
        [--heartbeat-ms 3000] [--strategy range] [--write docs/benchmarks.md]

Starts a real ZooKeeper and one broker (`group.initial.rebalance.delay.ms=0`), creates a topic, and runs
`--members` of our AsyncConsumers on one event loop, each polling continuously. Then, `--rounds` times:
one more member subscribes (join) and, once the group is stable, that member closes (leave, with
LeaveGroup). "Stable" means every member holds the same generation, none wants to rejoin, and their
assignments cover every partition exactly once. Prints the median and worst of each.

A rebalance starts at the coordinator at once, but the other members hear of it with their next
heartbeat, so the figure is about one heartbeat interval plus the join and sync round trips.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backbone.client import AsyncAdmin, AsyncConsumer, NewTopic, TopicPartition
from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str, heartbeat_ms: int, strategy: str) -> None:
        self.consumer = AsyncConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            heartbeat_interval_ms=heartbeat_ms,
            session_timeout_ms=max(10_000, heartbeat_ms * 3),
            partition_assignment_strategy=[strategy],
            fetch_max_wait_ms=100,
        )
        self.consumer.subscribe([topic])
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await self.consumer.poll(timeout_ms=100)

    def state(self) -> tuple[int, bool, set[TopicPartition]]:
        group = self.consumer.group
        assert group is not None
        membership = group.membership
        stable = membership.in_group and not membership.rejoin_needed
        return membership.generation_id, stable, self.consumer.assignment()

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.close()


def is_stable(members: list[Member], partitions: int) -> bool:
    states = [member.state() for member in members]
    generations = {generation for generation, _, _ in states}
    owned = [tp for _, _, assignment in states for tp in assignment]
    return (
        len(generations) == 1
        and all(stable for _, stable, _ in states)
        and len(owned) == len(set(owned)) == partitions
    )


async def wait_stable(members: list[Member], partitions: int, timeout_s: float = 120.0) -> float:
    started = time.perf_counter()
    while not is_stable(members, partitions):
        if time.perf_counter() - started > timeout_s:
            raise RuntimeError(f"the group did not settle within {timeout_s} s")
        await asyncio.sleep(0.005)
    return time.perf_counter() - started


async def measure(bootstrap: str, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    topic = f"rebalance-{uuid.uuid4().hex[:8]}"
    async with AsyncAdmin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, args.partitions, 1)])
    group = f"bench-{uuid.uuid4().hex[:8]}"

    def new_member() -> Member:
        return Member(bootstrap, group, topic, args.heartbeat_ms, args.strategy)

    members = [new_member() for _ in range(args.members - 1)]
    joins: list[float] = []
    leaves: list[float] = []
    try:
        await wait_stable(members, args.partitions)
        for _ in range(args.rounds):
            started = time.perf_counter()
            members.append(new_member())
            await wait_stable(members, args.partitions)
            joins.append(time.perf_counter() - started)
            leaving = members.pop()
            started = time.perf_counter()
            await leaving.close()
            await wait_stable(members, args.partitions)
            leaves.append(time.perf_counter() - started)
    finally:
        await asyncio.gather(*(member.close() for member in members))
    return joins, leaves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--heartbeat-ms", type=int, default=3000)
    parser.add_argument("--strategy", default="range")
    parser.add_argument("--write", type=Path, help="append the table to this markdown file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rebalance-bench-") as tmp:
        zookeeper = ZooKeeperServer(Path(tmp) / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=60)
        broker = BrokerProcess(
            1,
            zookeeper.connect_string + "/bench",
            Path(tmp) / "broker",
            properties={
                "group.initial.rebalance.delay.ms": 0,
                "offsets.topic.replication.factor": 1,
                "offsets.topic.num.partitions": 4,
            },
        )
        try:
            broker.start()
            joins, leaves = asyncio.run(measure(broker.bootstrap, args))
        finally:
            broker.stop()
            zookeeper.stop()
    lines = [
        f"| event | median | worst | ({args.members} members, {args.partitions} partitions, "
        f"{args.strategy}, heartbeat.interval.ms={args.heartbeat_ms}, {args.rounds} rounds) |",
        "| --- | ---: | ---: | --- |",
        f"| a member joins | {statistics.median(joins) * 1000:.0f} ms | {max(joins) * 1000:.0f} ms | |",
        f"| a member leaves | {statistics.median(leaves) * 1000:.0f} ms | {max(leaves) * 1000:.0f} ms | |",
    ]
    print("\n".join(lines))
    if args.write is not None:
        with args.write.open("a", encoding="utf-8") as out:
            out.write("\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
