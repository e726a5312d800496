"""One sampler per cluster: once per interval it asks the cluster, through the public Admin client, for
everything the pages show (brokers, topics with their configs, offsets and sizes, groups with their committed
offsets, the mirrors reading from it), builds a new `ClusterSnapshot`, judges every group (burrow.py) and
writes the history. A cluster that does not answer keeps its last good snapshot, marked with the error."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from backbone.client import (
    AsyncAdmin,
    ConfigResource,
    ConfigResourceType,
    KafkaClientError,
    KafkaError,
    TopicPartition,
)
from backbone.console.burrow import Observation, evaluate_partition, worst
from backbone.console.config import ClusterSettings, ConsoleConfig
from backbone.console.history import HistoryStore, LagRow, TopicRow
from backbone.console.snapshot import (
    BrokerState,
    ClusterSnapshot,
    GroupState,
    MirrorState,
    PartitionLagState,
    PartitionState,
    TopicState,
)

log = logging.getLogger(__name__)

AUDIT_WINDOW_MS = 6 * 3_600_000
# A broker whose log directories are not described within this long is asked whether it still accepts
# connections: a killed broker's port refuses them at once, while a busy one still accepts (and is only slow).
PROBE_AFTER_S = 0.25
PROBE_TIMEOUT_S = 2.0
RATE_WINDOW_MS = 300_000
T = TypeVar("T")
Listener = Callable[[ClusterSnapshot, ClusterSnapshot | None], Awaitable[None]]


def _now_ms() -> int:
    return int(time.time() * 1000)


class ClusterSampler:
    def __init__(
        self,
        settings: ClusterSettings,
        config: ConsoleConfig,
        history: HistoryStore,
        listeners: list[Listener] | None = None,
    ) -> None:
        self.settings = settings
        self.config = config
        self.history = history
        self.listeners = listeners or []
        self.snapshot = ClusterSnapshot(settings.name, settings.role)
        # Requests give up within two intervals (rounds never overlap: the next waits for this one), and not
        # before five seconds: a busy broker is slow, not down.
        timeout = max(5000, min(config.interval_ms * 2, 15_000))
        self.admin = AsyncAdmin(
            settings.client_config(),
            client_id=f"backbone-console-{settings.name}",
            default_api_timeout_ms=timeout,
            request_timeout_ms=timeout,
            reconnect_backoff_max_ms=1000,
        )
        self._observations: dict[tuple[str, str, int], collections.deque[Observation]] = {}
        self._known_brokers: dict[int, BrokerState] = {}
        self._refused_ms: dict[int, int] = {}  # when the watcher last found a broker refusing connections
        self._audit_read_ms = 0
        self.rounds = 0
        self.last_round_s = 0.0
        self.round_timeout_s = max(10.0, 3 * config.interval_ms / 1000)
        self.woken = asyncio.Event()

    @property
    def mirrors(self) -> list[Any]:
        return [m for m in self.config.mirrors if m.source == self.settings.name]

    async def run(self, stop: asyncio.Event) -> None:
        await self.admin.start()
        watcher = asyncio.create_task(self._watch_brokers(stop), name=f"watch-{self.settings.name}")
        try:
            while not stop.is_set():
                started = time.monotonic()
                await self.sample_once()
                wait = max(0.0, self.config.interval_ms / 1000 - (time.monotonic() - started))
                stopping = asyncio.ensure_future(stop.wait())
                woken = asyncio.ensure_future(self.woken.wait())
                await asyncio.wait({stopping, woken}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                for task in (stopping, woken):
                    task.cancel()
                self.woken.clear()
        finally:
            watcher.cancel()
            await self.admin.close()

    async def _watch_brokers(self, stop: asyncio.Event) -> None:
        """Between rounds too, twice per interval, see whether a broker that was up now refuses connections:
        a round can be stuck for a whole request timeout on a broker that died while it ran, and a dead
        broker must show within two intervals whatever the round is doing."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.interval_ms / 2000)
            current = self.snapshot
            if not current.taken_ms or current.error:
                continue
            up = [b for b in current.brokers.values() if b.up]
            refused = await asyncio.gather(*(_refuses_connections(b.host, b.port) for b in up))
            dead = {b.id for b, no in zip(up, refused, strict=True) if no}
            if not dead or self.snapshot is not current:  # a newer snapshot is judged at the next look
                continue
            now = _now_ms()
            brokers = {}
            for broker_id, state in current.brokers.items():
                if broker_id in dead:
                    state = dataclasses.replace(state, up=False, down_since_ms=now)
                    self._known_brokers[broker_id] = dataclasses.replace(
                        self._known_brokers.get(broker_id, state), up=False, down_since_ms=now
                    )
                    self._refused_ms[broker_id] = now
                    log.info(
                        "event=broker_not_answering cluster=%s broker=%d error=connection_refused",
                        self.settings.name,
                        broker_id,
                    )
                brokers[broker_id] = state
            _mark_down_replicas(current.topics, brokers)
            self.snapshot = dataclasses.replace(current, brokers=brokers)

    def wake(self) -> None:
        """Sample again now (after an action changed the cluster)."""
        self.woken.set()

    async def sample_once(self) -> ClusterSnapshot:
        previous = self.snapshot
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.round_timeout_s):
                snapshot = await self._sample()
        except Exception as error:  # whatever went wrong, the sampler goes on and the pages say it
            reason = str(error) or type(error).__name__
            unreachable = isinstance(error, KafkaError | KafkaClientError | OSError | TimeoutError)
            if not unreachable:
                log.exception("event=sample_error cluster=%s", self.settings.name)
            log.warning("event=sample_failed cluster=%s error=%s", self.settings.name, reason)
            snapshot = dataclasses.replace(previous)  # the last good sample, marked below
            snapshot.error = f"cannot be reached: {reason}" if unreachable else f"sampling failed: {reason}"
            snapshot.failing_since_ms = previous.failing_since_ms or _now_ms()
        self.snapshot = snapshot
        self.rounds += 1
        self.last_round_s = time.monotonic() - started
        for listener in self.listeners:
            try:
                await listener(snapshot, previous)
            except Exception:  # a listener's failure must never stop the sampling
                log.exception("event=listener_failed cluster=%s", self.settings.name)
        return snapshot

    async def _part(self, what: str, work: Awaitable[T], fallback: T, notes: list[str]) -> T:
        """One part of a sample; when it fails the rest still counts, and the pages say what is missing."""
        try:
            return await work
        except (KafkaError, KafkaClientError, OSError, TimeoutError) as error:
            notes.append(f"{what} could not be read: {error or type(error).__name__}")
            log.warning(
                "event=sample_part_failed cluster=%s part=%r error=%s", self.settings.name, what, error
            )
            return fallback

    async def _sample(self) -> ClusterSnapshot:
        now = _now_ms()
        admin = self.admin
        previous = self.snapshot
        notes: list[str] = []
        cluster = await admin.describe_cluster()
        described = await admin.describe_topics()
        topics = {
            name: TopicState(
                name,
                d.is_internal,
                [
                    PartitionState(p.partition, p.leader, tuple(p.replicas), tuple(p.isr))
                    for p in d.partitions
                ],
            )
            for name, d in sorted(described.items())
        }
        led = [
            TopicPartition(t.name, p.partition)
            for t in topics.values()
            for p in t.partitions
            if p.leader >= 0
        ]
        self._publish_health_first(cluster, topics, now)
        resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in topics]
        configs, starts, ends, oldest, dirs, group_data = await asyncio.gather(
            self._part("topic configs", admin.describe_configs(resources), {}, notes) if topics else _empty(),
            self._part("log start offsets", self._offsets(led, "earliest"), {}, notes),
            self._part("log end offsets", self._offsets(led, "latest"), {}, notes),
            # the first record at or after time 0 is the oldest one
            self._part("oldest records", self._offsets(led, 0, timestamps=True), {}, notes),
            self._log_dirs_publishing_silence(cluster, topics, now),
            self._part("consumer groups", self._group_offsets(), None, notes),
        )
        for broker_id, refused_ms in self._refused_ms.items():
            if refused_ms >= now:  # it answered this round before it died: that answer is stale
                dirs[broker_id] = None
        for name, topic in topics.items():
            found = configs.get(ConfigResource(ConfigResourceType.TOPIC, name))
            kept = previous.topics.get(name)
            topic.configs = found if found is not None else (kept.configs if kept is not None else {})
        for topic in topics.values():
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                p.start_offset = starts.get(tp)
                p.end_offset = ends.get(tp)
                p.oldest_ms = oldest.get(tp)
                leader_dir = (dirs.get(p.leader) or {}).get(tp)
                p.size_bytes = leader_dir.size if leader_dir is not None else None
        snapshot = ClusterSnapshot(
            self.settings.name,
            self.settings.role,
            taken_ms=now,
            cluster_id=cluster.cluster_id,
            controller_id=cluster.controller_id,
            brokers=self._brokers(cluster.brokers, topics, dirs, now),
            topics=topics,
            notes=notes,
        )
        _mark_down_replicas(topics, snapshot.brokers)
        snapshot.groups = previous.groups if group_data is None else self._groups(group_data, ends, now)
        snapshot.mirrors = await self._mirrors()
        await self._audit(snapshot, now)
        try:
            await asyncio.to_thread(self._write_history, snapshot, now)
        except SQLAlchemyError as error:  # the pages still show the cluster; only the history has a gap
            log.warning("event=history_write_failed cluster=%s error=%s", self.settings.name, error)
        return snapshot

    def _publish_health_first(self, cluster: Any, topics: dict[str, TopicState], now: int) -> None:
        """Publish what the metadata alone says (brokers, leaders, ISR) at once, the rest as last sampled:
        the other reads can wait on a broker that just died, and health must not wait for them."""
        previous = self.snapshot
        if previous.error or not previous.taken_ms:
            return
        for name, topic in topics.items():
            before = previous.topics.get(name)
            kept = {p.partition: p for p in before.partitions} if before is not None else {}
            topic.configs = before.configs if before is not None else {}
            for p in topic.partitions:
                old = kept.get(p.partition)
                if old is not None:
                    p.start_offset, p.end_offset, p.size_bytes = (
                        old.start_offset,
                        old.end_offset,
                        old.size_bytes,
                    )
                    p.oldest_ms = old.oldest_ms
        # A registered broker counts as answering unless the last round found it silent; this round asks.
        silent = {b.id for b in previous.brokers.values() if not b.up}
        answering: dict[int, dict | None] = {
            b.node_id: None if b.node_id in silent else {} for b in cluster.brokers
        }
        brokers = self._brokers(cluster.brokers, topics, answering, now)
        self._publish_brokers(previous, brokers, topics, taken_ms=now, controller_id=cluster.controller_id)

    def _publish_brokers(
        self, base: ClusterSnapshot, brokers: dict[int, BrokerState], topics: dict, **changes: Any
    ) -> None:
        """Publish `base` with these brokers (sizes as last read) and topics, their replicas on down brokers
        marked."""
        for broker_id, state in brokers.items():
            if broker_id in base.brokers:
                state.size_bytes = base.brokers[broker_id].size_bytes
        _mark_down_replicas(topics, brokers)
        self.snapshot = dataclasses.replace(base, brokers=brokers, topics=topics, **changes)

    async def _log_dirs_publishing_silence(
        self, cluster: Any, topics: dict[str, TopicState], now: int
    ) -> dict[int, dict | None]:
        """`_log_dirs`; when a broker turns silent, the pages learn it at once, not when the slowest of this
        round's other reads (some wait on that broker's partitions) ends."""
        dirs = await self._log_dirs(cluster.brokers)
        current = self.snapshot
        newly_silent = [b for b, d in dirs.items() if d is None and current.brokers.get(b, _UP).up]
        if newly_silent and current.taken_ms == now and not current.error:  # the health-first one
            answering: dict[int, dict | None] = {b: None if d is None else {} for b, d in dirs.items()}
            self._publish_brokers(current, self._brokers(cluster.brokers, topics, answering, now), topics)
        return dirs

    async def _log_dirs(self, registered: list[Any]) -> dict[int, dict | None]:
        """Each registered broker's replicas; None for a broker that does not answer (registered but dead:
        its ZooKeeper session has not expired yet)."""

        async def ask(broker: Any) -> dict | None:
            request = asyncio.ensure_future(self.admin.describe_log_dirs([broker.node_id]))
            try:
                done, _ = await asyncio.wait({request}, timeout=PROBE_AFTER_S)
                if not done and await _refuses_connections(broker.host, broker.port):
                    raise ConnectionRefusedError(f"{broker.host}:{broker.port} refuses connections")
                return (await request)[broker.node_id]
            except (KafkaError, KafkaClientError, OSError, TimeoutError) as error:
                log.info(
                    "event=broker_not_answering cluster=%s broker=%d error=%s",
                    self.settings.name,
                    broker.node_id,
                    error,
                )
                return None
            finally:
                request.cancel()

        brokers = sorted(registered, key=lambda b: b.node_id)
        answers = await asyncio.gather(*(ask(b) for b in brokers))
        return {b.node_id: answer for b, answer in zip(brokers, answers, strict=True)}

    async def _offsets(
        self, partitions: list[TopicPartition], spec: str | int, timestamps: bool = False
    ) -> dict[TopicPartition, int]:
        """Each partition's offset for `spec` (or, with `timestamps`, the found record's timestamp)."""
        if not partitions:
            return {}
        try:
            found = await self.admin.list_offsets(dict.fromkeys(partitions, spec))
        except KafkaError as error:  # some partitions failed (a leader moving): keep what answered
            answered = getattr(error, "results", None)
            if answered is None:
                raise
            found = answered
        if timestamps:
            return {tp: o.timestamp for tp, o in found.items() if o.offset >= 0 and o.timestamp >= 0}
        return {tp: o.offset for tp, o in found.items()}

    def _brokers(
        self, registered: list[Any], topics: dict[str, TopicState], dirs: dict[int, dict | None], now: int
    ) -> dict[int, BrokerState]:
        """Every broker the cluster showed us or assigns replicas to; up when registered and answering."""
        assigned = {r for t in topics.values() for p in t.partitions for r in p.replicas}
        answering = {b.node_id for b in registered if dirs.get(b.node_id) is not None}
        for broker in registered:
            known = self._known_brokers.get(broker.node_id)
            up = broker.node_id in answering
            since = None if up else (known.down_since_ms if known and not known.up else now)
            self._known_brokers[broker.node_id] = BrokerState(
                broker.node_id, broker.host, broker.port, broker.rack, up=up, down_since_ms=since
            )
        registered_ids = {b.node_id for b in registered}
        for broker_id in assigned | set(self._known_brokers):
            if broker_id in registered_ids:
                continue
            known = self._known_brokers.get(broker_id) or BrokerState(broker_id, None, None, None, up=False)
            if known.up or known.down_since_ms is None:
                known = BrokerState(known.id, known.host, known.port, known.rack, up=False, down_since_ms=now)
            self._known_brokers[broker_id] = known
        brokers = {}
        for broker_id, known in sorted(self._known_brokers.items()):
            state = BrokerState(**known.__dict__)
            for topic in topics.values():
                for p in topic.partitions:
                    state.partitions += broker_id in p.replicas
                    state.leaders += p.leader == broker_id
            state.size_bytes = sum(r.size for r in (dirs.get(broker_id) or {}).values())
            brokers[broker_id] = state
        return brokers

    async def _group_offsets(self) -> tuple[dict[str, Any], dict[str, dict]]:
        """Every group's description and committed offsets."""
        listed = await self.admin.list_consumer_groups()
        ids = [g.group_id for g in listed]
        if not ids:
            return {}, {}
        descriptions = await self.admin.describe_consumer_groups(ids)
        committed = await asyncio.gather(*(self.admin.list_consumer_group_offsets(g) for g in ids))
        return descriptions, dict(zip(ids, committed, strict=True))

    def _groups(
        self, group_data: tuple[dict[str, Any], dict[str, dict]], ends: dict[TopicPartition, int], now: int
    ) -> dict[str, GroupState]:
        descriptions, committed = group_data
        groups = {}
        window = self.config.status_window
        for group_id, offsets in committed.items():
            description = descriptions[group_id]
            owners = {tp: m.client_id or m.member_id for m in description.members for tp in m.assignment}
            rows = []
            for tp in sorted({*offsets, *owners}):
                position = offsets[tp].offset if tp in offsets else None
                end = ends.get(tp)
                lag = max(0, end - position) if position is not None and end is not None else None
                seen = self._observations.setdefault(
                    (group_id, tp.topic, tp.partition), collections.deque(maxlen=window)
                )
                seen.append(Observation(now, position, lag))
                verdict = evaluate_partition(
                    f"{tp.topic} partition {tp.partition}", seen, bool(description.members), window
                )
                rows.append(
                    PartitionLagState(tp.topic, tp.partition, position, end, lag, owners.get(tp), verdict)
                )
            groups[group_id] = GroupState(
                group_id,
                description.state,
                description.protocol,
                list(description.members),
                rows,
                worst([r.verdict for r in rows]),
            )
        return groups

    async def _mirrors(self) -> list[MirrorState]:
        states = []
        for mirror in self.mirrors:
            state = MirrorState(mirror.source, mirror.target, mirror.group)
            try:
                state.partitions = await self.admin.mirror_lag(mirror.group)
            except (KafkaError, KafkaClientError) as error:
                state.error = str(error)
            states.append(state)
        return states

    async def _audit(self, snapshot: ClusterSnapshot, now: int) -> None:
        """An aggregate cluster's completeness, read from its audit topic every `audit.interval.ms`."""
        previous = self.snapshot
        snapshot.audit, snapshot.audit_error = previous.audit, previous.audit_error
        if self.settings.role != "aggregate" or self.config.audit_topic not in snapshot.topics:
            return
        if now - self._audit_read_ms < max(self.config.audit_interval_ms, self.config.interval_ms):
            return
        from backbone.client.audit import read_audit_counts
        from backbone.client.audit.report import summarize

        self._audit_read_ms = now
        datacenters = tuple(c.name for c in self.config.clusters if c.role == "datacenter")
        try:
            messages, _ = await asyncio.to_thread(
                read_audit_counts,
                self.settings.bootstrap_servers,
                self.config.audit_topic,
                30.0,
                self.settings.security,
            )
        except (LookupError, TimeoutError, KafkaError, KafkaClientError) as error:
            snapshot.audit_error = f"the audit topic could not be read: {error}"
            return
        baseline = ("producer",) if any(m.tier == "producer" for m in messages) else datacenters
        snapshot.audit = summarize(messages, baseline, "aggregate", since_ms=now - AUDIT_WINDOW_MS)
        snapshot.audit_error = None

    def _write_history(self, snapshot: ClusterSnapshot, now: int) -> None:
        name = snapshot.name
        lags = [
            LagRow(name, g.group_id, p.topic, p.partition, p.committed, p.log_end, p.lag)
            for g in snapshot.groups.values()
            for p in g.partitions
        ]
        statuses = [(name, g.group_id, g.verdict.status, g.total_lag) for g in snapshot.groups.values()]
        sizes = [TopicRow(name, t.name, t.size_bytes, t.end_offsets) for t in snapshot.topics.values()]
        self.history.record(now, lags, statuses, sizes)
        snapshot.rates = self.history.topic_rates(name, now - RATE_WINDOW_MS)
        for mirror in snapshot.mirrors:
            mirror.records_per_s = _mirror_rate(snapshot, mirror)
        self.history.compact_when_due(now)


_UP = BrokerState(-1, None, None, None, up=True)


def _mark_down_replicas(topics: dict[str, TopicState], brokers: dict[int, BrokerState]) -> None:
    down = {b.id for b in brokers.values() if not b.up}
    for topic in topics.values():
        for p in topic.partitions:
            p.down = tuple(r for r in p.replicas if r in down)


async def _refuses_connections(host: str | None, port: int | None) -> bool:
    """True when nothing listens at host:port any more (the connection is refused); a connection that is
    accepted, or slow to be, says nothing against the broker. The connection carries no request."""
    if host is None or port is None:
        return False
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False


def _mirror_rate(snapshot: ClusterSnapshot, mirror: MirrorState) -> float | None:
    """Records/s a mirror must copy to keep up: what arrives in the source topics it copies (taken from the
    history's end offsets); a mirror that keeps up copies at this rate."""
    topics = {p.topic for p in mirror.partitions}
    return sum(snapshot.rates.get(t, 0.0) for t in topics) if topics else None


async def _empty() -> dict:
    return {}
