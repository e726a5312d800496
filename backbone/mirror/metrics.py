"""What a mirror exposes on its Prometheus endpoint (`metrics.port`): records and bytes copied, records
skipped because they had already been in the target cluster, failures, and lag per partition in records
(the source's high watermark minus the mirror's position) and in seconds (the age of the newest record
copied while lag remains; 0 when caught up).

Each mirror has its own registry, so several mirrors in one process (tests) do not collide.
"""

from __future__ import annotations

import contextlib
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server


class MirrorMetrics:
    def __init__(self, source: str, target: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["source", "target", "topic"]
        self._labels = {"source": source, "target": target}

        # Every metric is this mirror's, in its registry; counters per topic, gauges per partition.
        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=self.registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, [*labels, "partition"], registry=self.registry)

        self.records = counter("backbone_mirror_records", "Records copied and acknowledged by the target")
        self.bytes = counter("backbone_mirror_bytes", "Key and value bytes copied")
        self.skipped = counter(
            "backbone_mirror_skipped_records",
            "Records not copied because they had already been in the target cluster",
        )
        self.failures = counter("backbone_mirror_failed_records", "Records the target refused")
        self.lag_records = gauge(
            "backbone_mirror_lag_records", "Source high watermark minus the mirror's position"
        )
        self.lag_seconds = gauge(
            "backbone_mirror_lag_seconds",
            "Age of the newest record copied while the partition still lags; 0 when caught up",
        )
        self.copied_total = 0  # for progress lines, without reading the counters back

    def copied(self, topic: str, records: int, size: int) -> None:
        self.records.labels(topic=topic, **self._labels).inc(records)
        self.bytes.labels(topic=topic, **self._labels).inc(size)
        self.copied_total += records

    def skip(self, topic: str, records: int) -> None:
        self.skipped.labels(topic=topic, **self._labels).inc(records)

    def fail(self, topic: str, records: int = 1) -> None:
        self.failures.labels(topic=topic, **self._labels).inc(records)

    def lag(self, topic: str, partition: int, records: int, newest_timestamp_ms: int | None) -> None:
        labels = {"topic": topic, "partition": str(partition), **self._labels}
        self.lag_records.labels(**labels).set(records)
        age = 0.0
        if records > 0 and newest_timestamp_ms is not None:
            age = max(0.0, time.time() - newest_timestamp_ms / 1000)
        self.lag_seconds.labels(**labels).set(age)

    def forget(self, topic: str, partition: int) -> None:
        """A partition moved to another mirror: its lag is that mirror's to report."""
        labels = {"topic": topic, "partition": str(partition), **self._labels}
        for gauge in (self.lag_records, self.lag_seconds):
            with contextlib.suppress(KeyError):
                gauge.remove(*[labels[name] for name in gauge._labelnames])

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """The /metrics endpoint, on a background thread."""
        start_http_server(port, addr=host, registry=self.registry)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
