"""The controller: one broker per cluster, elected through the `/controller` ephemeral node.

It elects partition leaders: when a partition has no live leader, the first live replica of its ISR takes
over (an out-of-sync replica only when `unclean.leader.election.enable` is set), the leader epoch goes up,
and the new state is written to ZooKeeper with a versioned update fenced by the controller epoch, so a
stale controller cannot overwrite a newer one's decisions. Brokers follow the partition states through
their watches (see metadata.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from backbone.broker.metadata import MetadataListener
from backbone.coordination import ControllerEpoch, PartitionState, VersionConflictError
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

    @property
    def active(self) -> bool:
        return self.epoch is not None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")
        self._dirty.set()

    async def stop(self) -> bool:
        """Stop deciding; return whether this broker was the controller (the caller resigns it)."""
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
            except NotControllerError:
                log.warning("event=controller_fenced broker_id=%d", self.broker.broker_id)
                self.epoch = None
            except (KafkaError, OSError) as exc:
                log.warning("event=controller_step_failed error=%r", str(exc))
                await asyncio.sleep(1.0)
                self._dirty.set()

    async def _elect_leaders(self) -> None:
        cache = self.broker.cache
        live = set(cache.brokers)
        unclean = self.broker.config["unclean.leader.election.enable"]
        for (topic, index), state in list(cache.states.items()):
            if state.leader in live:
                continue
            replicas = cache.replicas(topic, index)
            candidates = [r for r in state.isr if r in live] or (
                [r for r in replicas if r in live] if unclean else []
            )
            leader = candidates[0] if candidates else -1
            if leader == state.leader:
                continue
            live_isr = tuple(r for r in state.isr if r in live)
            if leader < 0:
                new_isr = tuple(state.isr)  # keep the last ISR: it names who must come back, as Kafka does
            elif leader in live_isr:
                new_isr = live_isr
            else:
                new_isr = (leader,)  # an unclean election starts a new history
            await self._write(topic, index, state, leader, new_isr)

    async def _write(
        self, topic: str, index: int, state: PartitionState, leader: int, isr: tuple[int, ...]
    ) -> None:
        assert self.epoch is not None
        new = PartitionState(
            leader=leader,
            leader_epoch=state.leader_epoch + 1,
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
                "event=leader_elected partition=%s-%d leader=%d leader_epoch=%d isr=%s",
                topic,
                index,
                leader,
                new.leader_epoch,
                list(isr),
            )
        except VersionConflictError:
            self._dirty.set()  # someone changed it meanwhile: decide again from the new state
