"""The broker's metadata sync against a real ZooKeeper: what the listeners hear, and in which order."""

from __future__ import annotations

import asyncio
import time

from backbone.broker.metadata_cache import MetadataCache, MetadataListener, MetadataSync
from backbone.coordination import BrokerRegistration, ClusterStore, EndPoint

TIMEOUT_S = 15.0


class Recorder(MetadataListener):
    def __init__(self) -> None:
        self.heard: list[tuple] = []

    def on_topic_config(self, topic: str, overrides: dict[str, str]) -> None:
        self.heard.append(("config", topic, overrides))

    def on_topic_changed(self, topic: str) -> None:
        self.heard.append(("assignment", topic))


async def listen_until_assigned(store: ClusterStore, existing: str, create_after_start: str) -> list[tuple]:
    recorder = Recorder()
    sync = MetadataSync(store, MetadataCache(), asyncio.get_running_loop())
    sync.listeners = [recorder]
    await asyncio.to_thread(sync.start)
    try:
        await asyncio.to_thread(
            store.create_topic, create_after_start, 1, 1, configs={"cleanup.policy": "compact"}
        )
        deadline = time.monotonic() + TIMEOUT_S
        while not all(("assignment", topic) in recorder.heard for topic in (existing, create_after_start)):
            assert time.monotonic() < deadline, f"both assignments not heard: {recorder.heard}"
            await asyncio.sleep(0.02)
        return recorder.heard
    finally:
        sync.close()


def test_a_topics_config_is_heard_before_its_assignment(cluster_store: ClusterStore) -> None:
    # A broker creates a partition's log when it hears the assignment; the topic's overrides must already be
    # known then, or a compacted topic's leader takes keyless records with the default config. Both a topic
    # that exists as the broker starts and one created while it runs.
    cluster_store.register_broker(BrokerRegistration(1, (EndPoint("PLAINTEXT", "127.0.0.1", 9092),)))
    cluster_store.create_topic("existing", 1, 1, configs={"cleanup.policy": "compact", "retention.ms": "5"})

    heard = asyncio.run(listen_until_assigned(cluster_store, "existing", "created"))

    for topic, overrides in (
        ("existing", {"cleanup.policy": "compact", "retention.ms": "5"}),
        ("created", {"cleanup.policy": "compact"}),
    ):
        mine = [event for event in heard if event[1] == topic]
        assert mine[:2] == [("config", topic, overrides), ("assignment", topic)], heard
