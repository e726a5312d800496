"""The controller's leader elections on demand (ElectLeaders) and its automatic preferred-leader rebalancing.

After a failover, leadership stays where it moved: a broker that comes back follows until something gives
its partitions back. With `auto.leader.rebalance.enable` the controller looks every
`leader.imbalance.check.interval.seconds` and, for each broker leading too few of the partitions it is the
preferred replica of (`leader.imbalance.per.broker.percentage`), runs preferred elections for them. The
choices themselves are leader_decisions.py's; the writes are fenced_writes.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from backbone.broker.config import BrokerConfig
from backbone.broker.controller.fenced_writes import FencedWriter
from backbone.broker.controller.leader_decisions import PREFERRED, elect_on_demand, imbalanced_partitions
from backbone.broker.controller.reassignment_work import Reassignments
from backbone.broker.metadata_cache import MetadataCache
from backbone.protocol import TopicPartition
from backbone.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

Outcome = tuple[ErrorCode, str | None]


class Elections:
    def __init__(
        self,
        cache: MetadataCache,
        config: BrokerConfig,
        writer: FencedWriter,
        live_brokers: Callable[[], set[int]],
        reassignments: Reassignments,
    ) -> None:
        self.cache = cache
        self.config = config
        self.writer = writer
        self.live_brokers = live_brokers
        self.reassignments = reassignments
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._rebalance_loop(), name="leader-rebalance")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def elect(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, Outcome]:
        """ElectLeaders: run the asked election on each partition (all when None); the outcome of each."""
        self.writer.require_active()
        cache = self.cache
        live = self.live_brokers()
        results: dict[TopicPartition, Outcome] = {}
        for key in sorted(cache.states) if partitions is None else partitions:
            state = cache.states.get(key)
            if state is None:
                results[key] = (ErrorCode.unknown_topic_or_partition, f"{key[0]}-{key[1]} does not exist")
                continue
            decision, error = elect_on_demand(election_type, state, cache.replicas(*key), live)
            if error != ErrorCode.none:
                results[key] = (error, _message(election_type, error))
            elif decision is not None and await self.writer.write_partition_state(
                *key, state, decision.leader, decision.isr
            ):
                results[key] = (ErrorCode.none, None)
                log.info(
                    "event=leader_elected partition=%s-%d election_type=%d leader=%d",
                    *key,
                    election_type,
                    decision.leader,
                )
            else:
                # Another write came first (a failover, an ISR change): the caller may simply ask again.
                results[key] = (ErrorCode.unknown_server_error, "the partition changed meanwhile; ask again")
        return results

    async def _rebalance_loop(self) -> None:
        config = self.config
        while True:
            await asyncio.sleep(config["leader.imbalance.check.interval.seconds"])
            if not self.writer.active or not config["auto.leader.rebalance.enable"]:
                continue
            try:
                await self.rebalance()
            except (KafkaError, OSError) as exc:
                # The next check tries again; a controller that lost its role stops in the meantime.
                log.warning("event=preferred_leader_rebalance_failed error=%r", str(exc))
            except Exception:
                # A bug must not end the loop for good: log it loudly and keep checking.
                log.exception("event=preferred_leader_rebalance_crashed")

    async def rebalance(self) -> None:
        """One automatic check: preferred elections for the brokers above the imbalance threshold."""
        cache = self.cache
        # As Kafka does, partitions being reassigned are left alone: the reassignment picks their leader.
        moving = await self.reassignments.in_progress(None)
        settled = {key: state for key, state in cache.states.items() if key not in moving}
        keys = imbalanced_partitions(
            settled,
            {key: cache.replicas(*key) for key in settled},
            self.live_brokers(),
            self.config["leader.imbalance.per.broker.percentage"],
        )
        if keys:
            log.info("event=preferred_leader_rebalance partitions=%d", len(keys))
            await self.elect(PREFERRED, keys)


def _message(election_type: int, error: ErrorCode) -> str:
    if error == ErrorCode.election_not_needed:
        if election_type == PREFERRED:
            return "the preferred replica already leads"
        return "the partition has a live leader; an unclean election only gives leaderless partitions one"
    return _MESSAGES.get(error, "")


_MESSAGES = {
    ErrorCode.preferred_leader_not_available: (
        "the preferred replica is not live or not in sync; wait until it has caught up, then retry"
    ),
    ErrorCode.eligible_leaders_not_available: (
        "no replica of the partition is live; start one of its brokers, then retry"
    ),
    ErrorCode.invalid_request: "unknown election type: 0 is preferred, 1 is unclean",
}
