"""A broker's Prometheus metrics, served on `metrics.port` (0: none), named `backbone_broker_*`.

What Kafka's operators alert on (docs/operations.md lists every name and its meaning). The hot path pays a
few plain integer increments per request and per partition of a produce or fetch, never per record (message
counts come from the offsets an append assigned), and no prometheus-client call: its counters and
histograms take a lock and look up their labels on every event, several times the cost. Everything that is
a state rather than an event (under-replicated partitions, leaders, connections, groups) is computed when
Prometheus scrapes (`_StateCollector`).
"""

from __future__ import annotations

import itertools
import logging
import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
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
    """The event counts the broker's event loop adds to, with plain increments (no lock, no label lookup:
    only the loop's thread writes them); `_EventCollector` turns them into Prometheus families when
    scraped, from the scraping thread, which reads a moment's values."""

    def __init__(self, broker: Broker) -> None:
        self.registry = CollectorRegistry()
        self._requests: dict[tuple[int, int], _RequestCells] = {}
        self._errors: dict[tuple[int, int], int] = {}
        self._topics_in: dict[str, list[int]] = {}  # topic -> [records, bytes]
        self._bytes_out: dict[str, int] = {}
        self.log_flush = Histogram(
            f"{PREFIX}_log_flush_seconds", "Time to flush the logs due for a flush", registry=self.registry
        )
        self.events = _EventCollector(self)
        self.registry.register(self.events)
        self.registry.register(_StateCollector(broker))
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, process_cpu_seconds_total

    def request_done(
        self, key: int, version: int, queued: float, started: float, ready: float, remote: float
    ) -> None:
        """One answered request: `queued` when its frame arrived, `started` when its handler ran, `ready` when
        its answer was ready, `remote` seconds it waited for other brokers or for data (acks=all, long-poll);
        the send ends now."""
        cells = self._requests.get((key, version))
        if cells is None:
            cells = self._requests[(key, version)] = _RequestCells()
        now = time.monotonic()
        cells.count += 1
        counts, sums = cells.counts, cells.sums
        for phase, seconds in enumerate(
            (started - queued, ready - started - remote, remote, now - ready, now - queued)
        ):
            counts[phase][bisect_left(LATENCY_BUCKETS, seconds)] += 1  # bucket i: values <= bound i
            sums[phase] += seconds

    def appended(self, topic: str, records: int, size: int) -> None:
        """A producer's record set appended to a partition of `topic` (one call per partition)."""
        cells = self._topics_in.get(topic)
        if cells is None:
            cells = self._topics_in[topic] = [0, 0]
        cells[0] += records
        cells[1] += size

    def sent(self, topics: list[tuple[str, list[Any]]]) -> None:
        """A fetch answer's record bytes per topic (file regions or bytes, by their length)."""
        bytes_out = self._bytes_out
        for topic, results in topics:
            size = 0
            for result in results:
                records = result.records
                size += (
                    len(records) if isinstance(records, bytes | bytearray | memoryview) else records.length
                )
            if size:
                bytes_out[topic] = bytes_out.get(topic, 0) + size

    def request_failed(self, key: int, version: int) -> None:
        self._errors[(key, version)] = self._errors.get((key, version), 0) + 1

    def serve(self, port: int, host: str) -> None:
        start_http_server(port, addr=host, registry=self.registry)
        log.info("event=metrics_listening address=%s:%d", host, port)


class _RequestCells:
    """One API version's request count and, per phase, a count per latency bucket (not cumulative; the
    last one above every bound) and the sum of the latencies."""

    __slots__ = ("count", "counts", "sums")

    def __init__(self) -> None:
        self.count = 0
        self.counts = [[0] * (len(LATENCY_BUCKETS) + 1) for _ in PHASES]
        self.sums = [0.0] * len(PHASES)


class _EventCollector:
    """The event counts of `BrokerMetrics` as Prometheus families."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        metrics = self.metrics
        requests = list(metrics._requests.items())
        topics_in = list(metrics._topics_in.items())
        messages_in = _counter("topic_messages_in", "Records appended by producers, per topic", "topic")
        bytes_in = _counter("topic_bytes_in", "Record-batch bytes appended by producers, per topic", "topic")
        for topic, (records, size) in topics_in:
            messages_in.add_metric([topic], records)
            bytes_in.add_metric([topic], size)
        yield messages_in
        yield bytes_in
        bytes_out = _counter(
            "topic_bytes_out", "Record-batch bytes sent to consumers and followers, per topic", "topic"
        )
        for topic, size in list(metrics._bytes_out.items()):
            bytes_out.add_metric([topic], size)
        yield bytes_out
        handled = _counter("requests", "Requests handled, per API and version", "api", "version")
        for (key, version), cells in requests:
            handled.add_metric([api_name(key), str(version)], cells.count)
        yield handled
        errors = _counter(
            "request_errors",
            "Requests refused as a whole (connection closed: unreadable, unsupported, undecodable), per API "
            "and version",
            "api",
            "version",
        )
        for (key, version), count in list(metrics._errors.items()):
            errors.add_metric([api_name(key), str(version)], count)
        yield errors
        bounds = [*map(str, LATENCY_BUCKETS), "+Inf"]
        for index, phase in enumerate(PHASES):
            histogram = HistogramMetricFamily(
                f"{PREFIX}_request_{phase}_seconds", f"Request {phase} time, per API", labels=["api"]
            )
            merged: dict[str, tuple[list[int], list[float]]] = {}  # one series per API, its versions together
            for (key, _), cells in requests:
                counts, total = merged.setdefault(api_name(key), ([0] * len(bounds), [0.0]))
                for bucket, count in enumerate(list(cells.counts[index])):
                    counts[bucket] += count
                total[0] += cells.sums[index]
            for name, (counts, total) in sorted(merged.items()):
                cumulative = list(zip(bounds, itertools.accumulate(counts), strict=True))
                histogram.add_metric([name], cumulative, total[0])
            yield histogram


def _counter(name: str, help_text: str, *labels: str) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", help_text, labels=list(labels))


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
        yield _gauge(
            "fetch_sessions", "Incremental fetch sessions (KIP-227) held", len(broker.fetch_sessions)
        )
        for name, help_text, value in (
            ("isr_shrinks", "Times a led partition's ISR shrank", replicas.isr_shrinks),
            ("isr_expands", "Times a led partition's ISR grew", replicas.isr_expands),
            (
                "fetch_session_evictions",
                "Fetch sessions evicted to make room for new ones",
                broker.fetch_sessions.evictions,
            ),
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
        yield from _quota_families(broker)


def _quota_families(broker: Broker) -> Iterator[Any]:
    quotas = broker.quotas
    throttled = _counter("quota_throttled", "Answers throttled by a client quota, per quota", "quota")
    seconds = _counter("quota_throttle_seconds", "Throttle time given by client quotas, per quota", "quota")
    for quota, count in quotas.throttled.items():
        throttled.add_metric([quota], count)
        seconds.add_metric([quota], quotas.throttle_ms_total[quota] / 1000)
    yield throttled
    yield seconds
    yield _gauge(
        "quota_rates", "Client quota rates being measured (one per user and client id)", quotas.rate_count()
    )


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", help_text, value=value)
