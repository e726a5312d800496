"""The producer: `AsyncProducer` and the machinery behind `send` (partitioner, record accumulator and its
buffer pool, batch builder, idempotence, the sender task); `RecordFuture` is what `send` returns."""

from backbone.client.producer.accumulator import RecordFuture
from backbone.client.producer.producer import AsyncProducer

__all__ = ["AsyncProducer", "RecordFuture"]
