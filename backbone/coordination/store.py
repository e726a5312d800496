"""ClusterStore: everything brokers and admin tools keep in ZooKeeper for one cluster (one chroot).

The API is synchronous and thread-safe (kazoo multiplexes one session); call it from a thread or an
executor in asyncio code. Watch callbacks and session listeners run on kazoo's and the store's own
threads: hand their results to your event loop with `loop.call_soon_threadsafe`.

    with ClusterStore("127.0.0.1:2181/dc1") as store:
        store.register_broker(BrokerRegistration(1, (EndPoint("PLAINTEXT", "127.0.0.1", 9092),)))
        store.create_topic("events", partitions=6, replication_factor=1)

The operations live in layers, each a small module: session (connection, chroot, session events,
watches) < brokers (cluster id, registration, controller) < topics (assignments, partition state,
deletion) < configs (dynamic configs and their notifications) < credentials (SCRAM) < quotas
(client quota entities).
"""

from __future__ import annotations

from backbone.coordination.quotas import QuotaOps

__all__ = ["ClusterStore"]


class ClusterStore(QuotaOps):
    """One cluster's ZooKeeper state. `ClusterStore(connect)` then `start()`, or use it with `with`."""

    def __enter__(self) -> ClusterStore:
        self.start()
        return self

    def __repr__(self) -> str:
        return f"ClusterStore({self.connect_string!r}, session=0x{self.session_id or 0:x})"
