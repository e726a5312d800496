"""The consumer: `AsyncConsumer`, its fetcher and subscription state, and its group membership (joining,
syncing, heartbeats and offset commits, with the assignors of `backbone.wire.groups`)."""

from backbone.client.consumer.consumer import AsyncConsumer
from backbone.client.consumer.subscription import ConsumerRebalanceListener

__all__ = ["AsyncConsumer", "ConsumerRebalanceListener"]
