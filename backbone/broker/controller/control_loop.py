"""The controller: one broker per cluster, elected through the `/controller` ephemeral node.

It elects partition leaders (leader_decisions.py decides, fenced_writes.py writes): when a partition's
leader is dead, unreachable (liveness.py) or in controlled shutdown, an in-sync replica takes over with a
new leader epoch, and brokers that are gone leave the ISRs. Each new state is written to ZooKeeper with a
versioned update fenced by the controller epoch, so a stale controller cannot overwrite a newer one's
decisions. Brokers follow the partition states through their watches (see metadata_cache.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Set

from backbone.broker.config import BrokerConfig
from backbone.broker.controller.fenced_writes import FencedWriter, ZooKeeperCall
from backbone.broker.controller.leader_decisions import decide
from backbone.broker.controller.reassignment_work import Reassignments
from backbone.broker.controller.requested_elections import Elections
from backbone.broker.metadata_cache import MetadataCache, MetadataListener
from backbone.coordination import ClusterStore, ControllerEpoch, CoordinationError
from backbone.protocol.errors import KafkaError, NotControllerError

log = logging.getLogger(__name__)


class Controller(MetadataListener):
    def __init__(
        self,
        broker_id: int,
        cache: MetadataCache,
        store: ClusterStore,
        zk: ZooKeeperCall,
        config: BrokerConfig,
        unreachable: Callable[[], Set[int]],
    ) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.config = config
        self._unreachable = unreachable  # the liveness probes' verdict
        self.writer = FencedWriter(broker_id, store, zk, on_conflict=self.mark_dirty)
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Registered brokers that must not lead or count as in sync: ones in controlled shutdown (the
        # others, found dead before their sessions expired, are the broker's liveness verdicts).
        self.shutting_down: set[int] = set()
        self.reassignments = Reassignments(cache, self.writer, self.live_brokers, self.mark_dirty)
        # ElectLeaders and automatic preferred-leader rebalancing
        self.elections = Elections(cache, config, self.writer, self.live_brokers, self.reassignments)

    @property
    def epoch(self) -> ControllerEpoch | None:
        return self.writer.epoch

    @property
    def active(self) -> bool:
        return self.writer.active

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")
        self.elections.start()
        self._dirty.set()

    async def stop(self) -> bool:
        """Stop deciding; return whether this broker was the controller (the caller resigns it)."""
        await self.elections.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        was_active, self.writer.epoch = self.active, None
        return was_active

    # -- metadata events: each marks the controller's view dirty; one loop does the work ------------

    def on_controller_changed(self, controller_id: int) -> None:
        if controller_id != self.broker_id and self.active:
            log.warning("event=controller_lost broker_id=%d new_controller=%d", self.broker_id, controller_id)
            self.writer.epoch = None
        self._dirty.set()

    def on_brokers_changed(self, previous: set[int], current: set[int]) -> None:
        self._dirty.set()

    def on_topic_changed(self, topic: str) -> None:
        self._dirty.set()

    def on_partition_state(self, topic: str, partition: int) -> None:
        if self.active:
            self._dirty.set()

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                if not self.active and self.cache.controller_id < 0:
                    await self.writer.try_become_controller()
                if self.active:
                    await self._elect_leaders()
                    await self.reassignments.advance()
            except NotControllerError:
                log.warning("event=controller_fenced broker_id=%d", self.broker_id)
                self.writer.epoch = None
            except (KafkaError, OSError, CoordinationError) as exc:  # e.g. ZooKeeper away: try again soon
                log.warning("event=controller_step_failed error=%r", str(exc))
                await asyncio.sleep(1.0)
                self._dirty.set()

    def live_brokers(self) -> set[int]:
        """Brokers that may lead partitions and be in sync: registered, reachable, not shutting down."""
        return set(self.cache.brokers) - self._unreachable() - self.shutting_down

    def mark_dirty(self) -> None:
        """Ask the control loop to look at the cluster again."""
        self._dirty.set()

    async def _elect_leaders(self) -> None:
        cache = self.cache
        live = self.live_brokers()
        unclean = self.config["unclean.leader.election.enable"]
        for (topic, index), state in list(cache.states.items()):
            decision = decide(
                state,
                cache.replicas(topic, index),
                live,
                shutting_down=self.shutting_down,
                unclean=unclean,
            )
            if decision is not None:
                await self.writer.write_partition_state(
                    topic, index, state, decision.leader, decision.isr, bump_epoch=decision.new_epoch
                )
