"""/metrics in Prometheus text, built from the newest snapshots at each scrape (as Burrow's exporter does):
lag per group and partition, group status as a number, broker and partition health, mirror lag.
Open without login, so that Prometheus can scrape it; it shows only numbers and names."""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from backbone.console.app import ConsoleState, state
from backbone.console.burrow import SEVERITY

CONDITIONS = {"OK": 0, "WARN": 1, "STOP": 2, "STALL": 3, "REWIND": 4}


_PARTITION = ["cluster", "group", "topic", "partition"]
_GROUP = ["cluster", "group"]
_MIRROR = ["source", "target", "group"]
# What the console exports: {key: (metric name, help, labels)}, in the order they are exported.
_GAUGES = {
    "lag": ("backbone_console_group_partition_lag", "records the group is behind", _PARTITION),
    "status": ("backbone_console_group_status", "group status: 0 OK, 1 WARN, 2 ERR", _GROUP),
    "condition": (
        "backbone_console_partition_condition",
        "partition condition: 0 OK, 1 WARN, 2 STOP, 3 STALL, 4 REWIND",
        _PARTITION,
    ),
    "total": ("backbone_console_group_total_lag", "records behind in total", _GROUP),
    "broker_up": ("backbone_console_broker_up", "1 when the broker is registered", ["cluster", "broker"]),
    "reachable": ("backbone_console_cluster_reachable", "1 when the last sample succeeded", ["cluster"]),
    "partitions": ("backbone_console_partitions", "partitions by health", ["cluster", "health"]),
    "mirror_records": ("backbone_console_mirror_lag_records", "records a mirror has still to copy", _MIRROR),
    "mirror_seconds": ("backbone_console_mirror_lag_seconds", "event-time lag of a mirror", _MIRROR),
}


class SnapshotCollector(Collector):
    def __init__(self, console: ConsoleState) -> None:
        self.console = console

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauges = {
            key: GaugeMetricFamily(name, doc, labels=labels) for key, (name, doc, labels) in _GAUGES.items()
        }
        lag, status, condition, total = gauges["lag"], gauges["status"], gauges["condition"], gauges["total"]
        broker_up, reachable, partitions = gauges["broker_up"], gauges["reachable"], gauges["partitions"]
        mirror_records, mirror_seconds = gauges["mirror_records"], gauges["mirror_seconds"]
        for s in self.console.snapshots():
            reachable.add_metric([s.name], 1.0 if s.reachable else 0.0)
            if not s.taken_ms:
                continue
            for b in s.brokers.values():
                broker_up.add_metric([s.name, str(b.id)], 1.0 if b.up else 0.0)
            partitions.add_metric([s.name, "offline"], s.offline)
            partitions.add_metric([s.name, "under_replicated"], s.under_replicated)
            partitions.add_metric([s.name, "under_min_isr"], s.under_min_isr)
            partitions.add_metric([s.name, "total"], len(s.partitions()))
            for g in s.groups.values():
                status.add_metric([s.name, g.group_id], SEVERITY[g.verdict.status])
                total.add_metric([s.name, g.group_id], g.total_lag)
                for p in g.partitions:
                    labels = [s.name, g.group_id, p.topic, str(p.partition)]
                    if p.lag is not None:
                        lag.add_metric(labels, p.lag)
                    condition.add_metric(labels, CONDITIONS[p.verdict.condition])
            for m in s.mirrors:
                labels = [m.source, m.target, m.group]
                mirror_records.add_metric(labels, m.lag_records)
                if m.lag_seconds is not None:
                    mirror_seconds.add_metric(labels, m.lag_seconds)
        yield from gauges.values()


def routes(app: web.Application) -> None:
    app.router.add_get("/metrics", scrape)


async def scrape(request: web.Request) -> web.Response:
    console = state(request)
    registry = console.registry
    if registry is None:
        registry = console.registry = CollectorRegistry(auto_describe=False)
        registry.register(SnapshotCollector(console))
    # The text changes only when a sampler publishes: scrapes in between get the same bytes.
    version = tuple((s.name, s.taken_ms, s.error) for s in console.snapshots())
    cached = console.metrics_cache
    if cached is None or cached[0] != version:
        cached = console.metrics_cache = (version, generate_latest(registry))
    return web.Response(body=cached[1], headers={"Content-Type": CONTENT_TYPE_LATEST})
