"""What the console knows about one cluster at one moment: the sampler builds a `ClusterSnapshot` once per
interval and every page reads the newest one, so no page waits on a cluster."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from backbone.console.burrow import OK_VERDICT, Verdict


@dataclass
class BrokerState:
    id: int
    host: str | None
    port: int | None
    rack: str | None
    up: bool
    down_since_ms: int | None = None
    partitions: int = 0
    leaders: int = 0
    size_bytes: int = 0


@dataclass
class PartitionState:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    start_offset: int | None = None
    end_offset: int | None = None
    size_bytes: int | None = None
    oldest_ms: int | None = None
    """The oldest retained record's timestamp"""
    down: tuple[int, ...] = ()
    """Replicas on brokers the console found down: the cluster keeps a dead broker in the ISR until its
    ZooKeeper session expires, but its replicas copy nothing from the moment it died."""

    @property
    def out_of_sync(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.isr)

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas) or bool(self.down)

    @property
    def offline(self) -> bool:
        """No leader, or a leader on a down broker (until the controller elects another)."""
        return self.leader < 0 or self.leader in self.down

    @property
    def preferred_leader(self) -> int | None:
        return self.replicas[0] if self.replicas else None

    @property
    def leader_is_preferred(self) -> bool:
        return bool(self.replicas) and self.leader == self.replicas[0]


@dataclass
class TopicState:
    name: str
    internal: bool
    partitions: list[PartitionState]
    configs: dict[str, Any] = field(default_factory=dict)
    """name -> ConfigEntry"""

    def config(self, name: str) -> str | None:
        entry = self.configs.get(name)
        return entry.value if entry is not None else None

    def _int_config(self, name: str) -> int | None:
        value = self.config(name)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def min_isr(self) -> int:
        return self._int_config("min.insync.replicas") or 1

    @property
    def retention_ms(self) -> int | None:
        return self._int_config("retention.ms")

    @property
    def retention_bytes(self) -> int | None:
        return self._int_config("retention.bytes")

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)

    @property
    def under_min_isr(self) -> int:
        # a down broker still in the ISR (until its session expires) takes no writes: it does not count
        return sum(len(set(p.isr) - set(p.down)) < self.min_isr and not p.offline for p in self.partitions)

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes or 0 for p in self.partitions)

    @property
    def end_offsets(self) -> int:
        return sum(p.end_offset or 0 for p in self.partitions)

    @property
    def records(self) -> int:
        return sum((p.end_offset or 0) - (p.start_offset or 0) for p in self.partitions)


@dataclass
class PartitionLagState:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    lag: int | None
    owner: str | None
    verdict: Verdict = OK_VERDICT


@dataclass
class GroupState:
    group_id: str
    state: str
    protocol: str
    members: list[Any]
    """MemberDescription"""
    partitions: list[PartitionLagState]
    verdict: Verdict = OK_VERDICT

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)


@dataclass
class MirrorState:
    source: str
    target: str
    group: str
    partitions: list[Any] = field(default_factory=list)
    """MirrorLag rows"""
    error: str | None = None
    records_per_s: float | None = None

    @property
    def lag_records(self) -> int:
        return sum(p.records or 0 for p in self.partitions)

    @property
    def lag_seconds(self) -> float | None:
        known = [p.seconds for p in self.partitions if p.seconds is not None]
        return max(known) if known else None


@dataclass
class Problem:
    severity: str
    """"ERR" or "WARN"."""
    text: str
    link: str = ""


@dataclass
class ClusterSnapshot:
    name: str
    role: str
    taken_ms: int = 0
    """When the last complete sample was taken (0: never)."""
    error: str | None = None
    """Why the last attempt failed (the rest is the last good sample)."""
    failing_since_ms: int | None = None
    cluster_id: str | None = None
    controller_id: int | None = None
    brokers: dict[int, BrokerState] = field(default_factory=dict)
    topics: dict[str, TopicState] = field(default_factory=dict)
    groups: dict[str, GroupState] = field(default_factory=dict)
    mirrors: list[MirrorState] = field(default_factory=list)
    audit: Any = None
    """The audit report (backbone.client.audit.report.Report) of an aggregate cluster, when read."""
    audit_error: str | None = None
    notes: list[str] = field(default_factory=list)
    """Parts of the last sample that could not be read (the rest was)."""
    rates: dict[str, float] = field(default_factory=dict)
    """records/s into each topic over the last minutes, from the history"""

    @property
    def reachable(self) -> bool:
        return self.error is None and self.taken_ms > 0

    @property
    def age_s(self) -> float:
        return time.time() - self.taken_ms / 1000 if self.taken_ms else float("inf")

    def partitions(self) -> list[tuple[TopicState, PartitionState]]:
        return [(t, p) for t in self.topics.values() for p in t.partitions]

    @cached_property  # a snapshot never changes once published; pages ask often
    def under_replicated(self) -> int:
        return sum(t.under_replicated for t in self.topics.values())

    @cached_property  # a snapshot never changes once published; pages ask often
    def offline(self) -> int:
        return sum(t.offline for t in self.topics.values())

    @cached_property  # a snapshot never changes once published; pages ask often
    def under_min_isr(self) -> int:
        return sum(t.under_min_isr for t in self.topics.values())

    @property
    def brokers_down(self) -> list[BrokerState]:
        return [b for b in self.brokers.values() if not b.up]

    def worst_group(self) -> GroupState | None:
        from backbone.console.burrow import SEVERITY

        return max(
            self.groups.values(), key=lambda g: (SEVERITY[g.verdict.status], g.total_lag), default=None
        )
