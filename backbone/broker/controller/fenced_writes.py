"""The controller's writes to ZooKeeper, each fenced by the controller epoch.

The decisions (leader_decisions.py, reassignment_decisions.py) are pure; every one of them the controller
acts on is written here. Each write is a versioned update that also checks the `/controller_epoch` znode's
version, so a stale controller cannot overwrite a newer one's decisions.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from backbone.coordination import (
    ClusterStore,
    ControllerEpoch,
    PartitionState,
    TopicAssignment,
    VersionConflictError,
)
from backbone.protocol.errors import NotControllerError

log = logging.getLogger(__name__)

T = TypeVar("T")
ZooKeeperCall = Callable[..., Awaitable[Any]]  # runs a blocking ClusterStore call off the event loop


class FencedWriter:
    """Holds this broker's controller epoch (None when it is not the controller) and writes under it."""

    def __init__(
        self, broker_id: int, store: ClusterStore, zk: ZooKeeperCall, on_conflict: Callable[[], None]
    ) -> None:
        self.broker_id = broker_id
        self.store = store
        self.zk = zk
        self._on_conflict = (
            on_conflict  # a write lost to a concurrent change: decide again from the new state
        )
        self.epoch: ControllerEpoch | None = None

    @property
    def active(self) -> bool:
        return self.epoch is not None

    def require_active(self) -> None:
        """NotControllerError unless this broker is the controller (a request for the controller came)."""
        if self.epoch is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")

    def fence(self) -> int:
        """The controller epoch's znode version every write is conditional on."""
        if self.epoch is None:
            raise NotControllerError("this broker is no longer the controller")
        return self.epoch.zk_version

    async def try_become_controller(self) -> None:
        self.epoch = await self.zk(self.store.try_become_controller, self.broker_id)
        if self.epoch is not None:
            log.info("event=became_controller broker_id=%d epoch=%d", self.broker_id, self.epoch.epoch)

    async def write_partition_state(
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
            await self.zk(
                self.store.set_partition_state,
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
            self._on_conflict()
            return False

    async def update_topic_assignment(
        self, topic: str, change: Callable[[TopicAssignment], TopicAssignment]
    ) -> TopicAssignment:
        """Apply `change` to the topic's assignment znode, fenced by the controller epoch."""
        return await self.zk(
            self.store.update_topic_assignment, topic, change, controller_epoch_version=self.fence()
        )
