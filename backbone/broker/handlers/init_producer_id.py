"""InitProducerId: a fresh producer id (epoch 0) for every idempotent producer, from blocks of ids each
broker reserves in ZooKeeper, so ids are unique across the cluster. Transactions are not offered."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from backbone.broker.handlers.common import build, error_code_of, response_module, throttle
from backbone.broker.network import RequestContext
from backbone.protocol.api import ApiKey

if TYPE_CHECKING:
    from backbone.broker.server import Broker

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._next = 0
        self._last = -1
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next > self._last:
                block = await self.broker.zk(
                    self.broker.store.allocate_producer_id_block, self.broker.broker_id, BLOCK_SIZE
                )
                self._next, self._last = block.first, block.last
            producer_id = self._next
            self._next += 1
            return producer_id


def register(broker: Broker) -> None:
    allocator = ProducerIdAllocator(broker)

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

    broker.api_table.register(ApiKey.INIT_PRODUCER_ID, handle)
