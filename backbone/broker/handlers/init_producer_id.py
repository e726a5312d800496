"""InitProducerId: a fresh producer id (epoch 0) for every idempotent producer, from blocks of ids each
broker reserves in ZooKeeper, so ids are unique across the cluster. Transactions are not offered."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from backbone.broker.handlers.admin_common import ZooKeeperCall
from backbone.broker.handlers.common import build, error_code_of, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.coordination.znodes import ProducerIdBlock
from backbone.protocol.api import ApiKey

if TYPE_CHECKING:
    from backbone.coordination import ClusterStore

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    """Hands out ids from the current block, reserving the next block (`reserve_block`) once it is used up."""

    def __init__(self, reserve_block: Callable[[], Awaitable[ProducerIdBlock]]) -> None:
        self._reserve_block = reserve_block
        self._next = 0
        self._last = -1
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next > self._last:
                block = await self._reserve_block()
                self._next, self._last = block.first, block.last
            producer_id = self._next
            self._next += 1
            return producer_id


def zookeeper_allocator(store: ClusterStore, zk: ZooKeeperCall, broker_id: int) -> ProducerIdAllocator:
    """Ids from blocks of BLOCK_SIZE that `broker_id` reserves in ZooKeeper."""

    def reserve_block() -> Awaitable[ProducerIdBlock]:
        return zk(store.allocate_producer_id_block, broker_id, BLOCK_SIZE)

    return ProducerIdAllocator(reserve_block)


def init_producer_id_handler(allocator: ProducerIdAllocator) -> Handler:
    async def handle(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.INIT_PRODUCER_ID, context.api_version)
        producer_id, epoch, error = -1, -1, ErrorCode.none
        if request.transactional_id is not None:
            error = ErrorCode.transactional_id_authorization_failed
        else:
            try:
                producer_id, epoch = await allocator.next_id(), 0
            except Exception as exc:
                error = error_code_of(exc)
        return build(
            module.InitProducerIdResponse,
            throttle_time=throttle(),
            error_code=error,
            producer_id=producer_id,
            producer_epoch=epoch,
        )

    return handle
