"""A broker's Prometheus metrics, served on `metrics.port` (0: none), named `backbone_broker_*`.

What Kafka's operators alert on (docs/operations.md lists every name and its meaning). The hot path pays a
few counter increments per request and per partition of a produce or fetch, never per record: message
counts come from the offsets an append assigned. Everything that is a state rather than an event (under-
replicated partitions, leaders, connections, groups) is computed when Prometheus scrapes (`_StateCollector`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

from backbone.protocol.api import ApiKey

if TYPE_CHECKING:
    from backbone.broker.server import Broker

log = logging.getLogger(__name__)

PREFIX = "backbone_broker"
# Request latencies from 0.5 ms to 30 s (long-polled fetches wait up to their max_wait_ms).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
PHASES = ("queue", "local", "remote", "send", "total")


def api_name(key: int) -> str:
    try:
        return ApiKey(key).name.lower()
    except ValueError:
        return str(key)


class BrokerMetrics:
    def __init__(self, broker: Broker) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.messages_in = Counter(
            f"{PREFIX}_topic_messages_in",
            "Records appended by producers, per topic",
            ["topic"],
            registry=registry,
        )
        self.bytes_in = Counter(
            f"{PREFIX}_topic_bytes_in",
            "Record-batch bytes appended by producers, per topic",
            ["topic"],
            registry=registry,
        )
        self.bytes_out = Counter(
            f"{PREFIX}_topic_bytes_out", "Record-batch bytes sent to consumers and followers, per topic",
            ["topic"], registry=registry,
        )  # fmt: skip
        self.requests = Counter(
            f"{PREFIX}_requests",
            "Requests handled, per API and version",
            ["api", "version"],
            registry=registry,
        )
        self.errors = Counter(
            f"{PREFIX}_request_errors",
            "Requests refused as a whole (connection closed: unreadable, unsupported, undecodable), per API "
            "and version",
            ["api", "version"],
            registry=registry,
        )
        self.latency = {
            phase: Histogram(
                f"{PREFIX}_request_{phase}_seconds",
                f"Request {phase} time, per API",
                ["api"],
                buckets=LATENCY_BUCKETS,
                registry=registry,
            )
            for phase in PHASES
        }
        self.log_flush = Histogram(
            f"{PREFIX}_log_flush_seconds", "Time to flush the logs due for a flush", registry=registry
        )
        registry.register(_StateCollector(broker))
        ProcessCollector(registry=registry)  # process_resident_memory_bytes, process_cpu_seconds_total, ...
        # Per-API children, made once: labels() on every request would cost a dict lookup and a lock more.
        self._children: dict[tuple[int, int], tuple[Any, ...]] = {}
        self._topics: dict[str, tuple[Any, Any]] = {}
        self._bytes_out: dict[str, Any] = {}

    def request_done(
        self, key: int, version: int, queued: float, started: float, ready: float, remote: float
    ) -> None:
        """One answered request: `queued` when its frame arrived, `started` when its handler ran, `ready` when
        its answer was ready, `remote` seconds it waited for other brokers or for data (acks=all, long-poll);
        the send ends now."""
        children = self._children.get((key, version))
        if children is None:
            name = api_name(key)
            children = self._children[(key, version)] = (
                self.requests.labels(name, str(version)),
                *(self.latency[phase].labels(name) for phase in PHASES),
            )
        count, queue, local, remote_wait, send, total = children
        now = time.monotonic()
        count.inc()
        queue.observe(started - queued)
        local.observe(ready - started - remote)
        remote_wait.observe(remote)
        send.observe(now - ready)
        total.observe(now - queued)

    def appended(self, topic: str, records: int, size: int) -> None:
        """A producer's record set appended to a partition of `topic` (one call per partition)."""
        children = self._topics.get(topic)
        if children is None:
            children = self._topics[topic] = (self.messages_in.labels(topic), self.bytes_in.labels(topic))
        children[0].inc(records)
        children[1].inc(size)

    def sent(self, topics: list[tuple[str, list[Any]]]) -> None:
        """A fetch answer's record bytes per topic (file regions or bytes, by their length)."""
        for topic, results in topics:
            size = 0
            for result in results:
                records = result.records
                size += (
                    len(records) if isinstance(records, bytes | bytearray | memoryview) else records.length
                )
            if size:
                child = self._bytes_out.get(topic)
                if child is None:
                    child = self._bytes_out[topic] = self.bytes_out.labels(topic)
                child.inc(size)

    def request_failed(self, key: int, version: int) -> None:
        self.errors.labels(api_name(key), str(version)).inc()

    def serve(self, port: int, host: str) -> None:
        start_http_server(port, addr=host, registry=self.registry)
        log.info("event=metrics_listening address=%s:%d", host, port)


class _StateCollector:
    """Gauges read from the broker's state when scraped: nothing on the hot path."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Any]:
        broker = self.broker
        replicas = broker.replicas
        led = [p for p in list(replicas.partitions.values()) if p.is_leader]
        under = under_min = 0
        for partition in led:
            if len(partition.isr) < len(partition.replicas):
                under += 1
            required = int(replicas.topic_config(partition.topic, "min.insync.replicas", broker.config))
            if len(partition.isr) < required:
                under_min += 1
        yield _gauge("partitions", "Partitions with a replica on this broker", len(replicas.partitions))
        yield _gauge("leader_partitions", "Partitions this broker leads", len(led))
        yield _gauge(
            "under_replicated_partitions", "Led partitions whose ISR is smaller than their replicas", under
        )
        yield _gauge(
            "under_min_isr_partitions", "Led partitions whose ISR is below min.insync.replicas", under_min
        )
        active = broker.cache.controller_id == broker.broker_id and broker.controller.active
        yield _gauge("active_controller", "1 on the cluster's active controller, else 0", int(active))
        offline = 0
        if active:  # as Kafka, the controller reports the cluster's partitions without a live leader
            live = broker.cache.brokers
            offline = sum(
                1 for s in list(broker.cache.states.values()) if s.leader < 0 or s.leader not in live
            )
        yield _gauge("offline_partitions", "On the controller: partitions without a live leader", offline)
        for name, help_text, value in (
            ("isr_shrinks", "Times a led partition's ISR shrank", replicas.isr_shrinks),
            ("isr_expands", "Times a led partition's ISR grew", replicas.isr_expands),
        ):
            counter = CounterMetricFamily(f"{PREFIX}_{name}", help_text)
            counter.add_metric([], value)
            yield counter
        connections = GaugeMetricFamily(
            f"{PREFIX}_connections", "Open client connections, per listener", labels=["listener"]
        )
        for listener in broker.listeners:
            connections.add_metric([listener.name], len(listener.connections))
        yield connections
        groups = GaugeMetricFamily(
            f"{PREFIX}_groups", "Consumer groups this broker coordinates, per state", labels=["state"]
        )
        by_state: dict[str, int] = {}
        for group in broker.group_coordinator.groups():
            state = group.state.name.lower()
            by_state[state] = by_state.get(state, 0) + 1
        for state, count in sorted(by_state.items()):
            groups.add_metric([state], count)
        yield groups


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", help_text, value=value)
