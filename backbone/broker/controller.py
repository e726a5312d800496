"""The controller: one broker per cluster, elected through the `/controller` ephemeral node.

It elects partition leaders (leader_election.py decides): when a partition's leader is dead, unreachable
(liveness.py) or in controlled shutdown, an in-sync replica takes over with a new leader epoch, and brokers
that are gone leave the ISRs. Each new state is written to ZooKeeper with a versioned update fenced by the
controller epoch, so a stale controller cannot overwrite a newer one's decisions. Brokers follow the
partition states through their watches (see metadata.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from backbone.broker.elections import Elections
from backbone.broker.leader_election import decide
from backbone.broker.metadata import MetadataListener
from backbone.broker.reassignment import Reassignments
from backbone.coordination import ControllerEpoch, CoordinationError, PartitionState, VersionConflictError
from backbone.protocol.errors import KafkaError, NotControllerError

if TYPE_CHECKING:
    from backbone.broker.server import Broker

log = logging.getLogger(__name__)


class Controller(MetadataListener):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.epoch: ControllerEpoch | None = None
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Registered brokers that must not lead or count as in sync: ones in controlled shutdown (the
        # others, found dead before their sessions expired, are the broker's liveness verdicts).
        self.shutting_down: set[int] = set()
        self.reassignments = Reassignments(self)
        self.elections = Elections(self)  # ElectLeaders and automatic preferred-leader rebalancing

    @property
    def active(self) -> bool:
        return self.epoch is not None

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
        was_active, self.epoch = self.active, None
        return was_active

    # -- metadata events: each marks the controller's view dirty; one loop does the work ------------

    def on_controller_changed(self, controller_id: int) -> None:
        if controller_id != self.broker.broker_id and self.active:
            log.warning(
                "event=controller_lost broker_id=%d new_controller=%d", self.broker.broker_id, controller_id
            )
            self.epoch = None
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
                if not self.active and self.broker.cache.controller_id < 0:
                    self.epoch = await self.broker.zk(
                        self.broker.store.try_become_controller, self.broker.broker_id
                    )
                    if self.epoch is not None:
                        log.info(
                            "event=became_controller broker_id=%d epoch=%d",
                            self.broker.broker_id,
                            self.epoch.epoch,
                        )
                if self.active:
                    await self._elect_leaders()
                    await self.reassignments.advance()
            except NotControllerError:
                log.warning("event=controller_fenced broker_id=%d", self.broker.broker_id)
                self.epoch = None
            except (KafkaError, OSError, CoordinationError) as exc:  # e.g. ZooKeeper away: try again soon
                log.warning("event=controller_step_failed error=%r", str(exc))
                await asyncio.sleep(1.0)
                self._dirty.set()

    def live_brokers(self) -> set[int]:
        """Brokers that may lead partitions and be in sync: registered, reachable, not shutting down."""
        return set(self.broker.cache.brokers) - self.broker.liveness.unreachable - self.shutting_down

    def mark_dirty(self) -> None:
        """Ask the control loop to look at the cluster again."""
        self._dirty.set()

    async def _elect_leaders(self) -> None:
        cache = self.broker.cache
        live = self.live_brokers()
        unclean = self.broker.config["unclean.leader.election.enable"]
        for (topic, index), state in list(cache.states.items()):
            decision = decide(
                state,
                cache.replicas(topic, index),
                live,
                shutting_down=self.shutting_down,
                unclean=unclean,
            )
            if decision is not None:
                await self._write(
                    topic, index, state, decision.leader, decision.isr, bump_epoch=decision.new_epoch
                )

    async def _write(
        self,
        topic: str,
        index: int,
        state: PartitionState,
        leader: int,
        isr: tuple[int, ...],
        *,
        bump_epoch: bool = True,
    ) -> bool:
        """Write a new leader/ISR, fenced by the controller epoch; False when the state changed meanwhile.

        A new leader always gets a new leader epoch; an ISR-only change keeps it (`bump_epoch=False`).
        """
        assert self.epoch is not None
        new = PartitionState(
            leader=leader,
            leader_epoch=state.leader_epoch + 1 if bump_epoch else state.leader_epoch,
            isr=isr,
            controller_epoch=self.epoch.epoch,
        )
        try:
            await self.broker.zk(
                self.broker.store.set_partition_state,
                topic,
                index,
                new,
                state.zk_version,
                controller_epoch_version=self.epoch.zk_version,
            )
            log.info(
                "event=partition_state_written partition=%s-%d leader=%d leader_epoch=%d isr=%s",
                topic,
                index,
                leader,
                new.leader_epoch,
                list(isr),
            )
            return True
        except VersionConflictError:
            self._dirty.set()  # someone changed it meanwhile: decide again from the new state
            return False
