"""Realistic tracking traffic for one datacenter: `backbone generate`.

Members and pages are drawn from Zipf-like distributions (a few members and pages get most of the traffic),
each member keeps a session that ends now and then, and the mix is mostly page views with searches,
impressions and invitations beside them. With `rising`, a page's share of the page views grows steadily
from nothing to `rising_share` over the run, so a "rising" job has something true to find.

Events are produced with an audited producer (tier `producer`), so the audit can prove that everything
produced reached the aggregate; the record timestamp is the event time. Event time runs from `start_ms`
(default: now) at `time_scale` times the wall clock, which lets a test produce hours of event time in a
minute. Every acknowledged event can be written to a file (`acked_path`, JSON lines) for checks.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import socket
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from backbone.client import Producer
from backbone.tracking import schemas
from backbone.tracking.serde import AvroEncoder, RegistryClient

log = logging.getLogger(__name__)

READY_LINE = "event=generate_started"
# The share of each event kind (cumulative weights for random.choices).
MIX = {"page_views": 60, "impressions": 20, "searches": 15, "invitations": 5}
QUERIES = ("data engineer", "kafka", "python", "product manager", "hadoop", "sales", "nurse", "design")
MODULES = ("feed", "people-you-may-know", "jobs-you-may-be-interested-in", "ads")


@dataclass
class GeneratorSettings:
    bootstrap: str
    registry_url: str
    datacenter: str
    rate: float  # events per second
    duration_s: float  # 0: until stopped
    audit_bootstrap: str = ""  # the cluster of the audit topic ('' : the datacenter's own)
    audit_interval_ms: int = 10_000
    audit_bucket_ms: int = 600_000
    members: int = 10_000
    pages: int = 500
    skew: float = 1.1  # the Zipf exponent
    rising: str = ""
    rising_share: float = 0.3
    start_ms: int = 0  # 0: now
    time_scale: float = 1.0
    seed: int | None = None
    acked_path: str = ""
    client: dict[str, Any] = field(default_factory=dict)  # more producer settings (security.protocol, ...)
    progress_interval_s: float = 1.0


def zipf_weights(count: int, skew: float) -> list[float]:
    """Cumulative weights of ranks 1..count under a Zipf law with exponent `skew`."""
    return list(itertools.accumulate(1 / rank**skew for rank in range(1, count + 1)))


class TrafficGenerator:
    def __init__(self, settings: GeneratorSettings) -> None:
        self.settings = settings
        self.random = random.Random(settings.seed)
        registry = RegistryClient(settings.registry_url)
        self.encoders = {
            topic: AvroEncoder(registry, schemas.subject(topic), schema)
            for topic, schema in schemas.TOPICS.items()
        }
        self.member_weights = zipf_weights(settings.members, settings.skew)
        self.page_weights = zipf_weights(settings.pages, settings.skew)
        self.page_keys = [f"page-{n}" for n in range(settings.pages)]
        self.kinds, kind_weights = list(MIX), list(itertools.accumulate(MIX.values()))
        self.kind_weights = kind_weights
        self.sessions: dict[int, str] = {}
        self.host = socket.gethostname()
        self.producer_id = uuid.uuid4().hex[:8]
        self.sequence = 0
        self.sent: Counter[str] = Counter()
        self.acked: Counter[str] = Counter()
        self.failed = 0
        self.first_error: BaseException | None = None
        self._acked_file: TextIO | None = None

    # -- one event ----------------------------------------------------------------------------------------

    def event_time(self, elapsed_s: float, wall_start_ms: int) -> int:
        start = self.settings.start_ms or wall_start_ms
        return start + int(elapsed_s * 1000 * self.settings.time_scale)

    def member(self) -> int | None:
        if self.random.random() < 0.1:
            return None  # a guest
        return self.random.choices(range(1, self.settings.members + 1), cum_weights=self.member_weights)[0]

    def session(self, member: int | None) -> str:
        key = member if member is not None else -self.random.randrange(1, 1000)
        if key not in self.sessions or self.random.random() < 0.02:  # a session ends now and then
            self.sessions[key] = uuid.UUID(int=self.random.getrandbits(128)).hex
        return self.sessions[key]

    def page(self, kind: str, progress: float) -> str:
        rising = self.settings.rising
        if rising and kind == "page_views" and self.random.random() < self.settings.rising_share * progress:
            return rising
        return self.random.choices(self.page_keys, cum_weights=self.page_weights)[0]

    def make(self, time_ms: int, progress: float) -> tuple[str, int | None, dict[str, Any]]:
        kind = self.random.choices(self.kinds, cum_weights=self.kind_weights)[0]
        member = self.member()
        self.sequence += 1
        header = {
            "event_id": f"{self.settings.datacenter}-{self.producer_id}-{self.sequence}",
            "time": time_ms,
            "datacenter": self.settings.datacenter,
            "host": self.host,
            "server": f"app-{self.random.randrange(1, 9)}.{self.settings.datacenter}",
            "member_id": member,
            "session_id": self.session(member),
            "page_key": self.page(kind, progress),
        }
        r = self.random
        body: dict[str, Any]
        if kind == "page_views":
            body = {
                "referrer": r.choice([None, "search", "feed", "email"]),
                "load_time_ms": r.randrange(20, 2000),
            }
        elif kind == "searches":
            body = {
                "query": r.choice(QUERIES),
                "vertical": r.choice(["PEOPLE", "JOBS", "COMPANIES", "CONTENT"]),
                "result_count": r.randrange(0, 500),
            }
        elif kind == "impressions":
            body = {
                "item_ids": [r.randrange(1, 10**6) for _ in range(r.randrange(1, 6))],
                "module": r.choice(MODULES),
            }
        else:
            body = {
                "invitee_id": r.randrange(1, self.settings.members + 1),
                "message": r.choice([None, "Hi!"]),
            }
        return kind, member, {"header": header, **body}

    # -- the run ------------------------------------------------------------------------------------------

    def producer_config(self) -> dict[str, Any]:
        s = self.settings
        return {
            **s.client,
            "bootstrap.servers": s.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "client.id": f"generate-{s.datacenter}",
            "audit.enable": True,
            "audit.tier": "producer",
            "audit.bootstrap.servers": s.audit_bootstrap or None,
            "audit.interval.ms": s.audit_interval_ms,
            "audit.bucket.ms": s.audit_bucket_ms,
        }

    def run(self, stop: Callable[[], bool] = lambda: False, progress: TextIO = sys.stderr) -> dict[str, int]:
        """Produce until the duration is over or `stop()` is true; return the acknowledged counts by topic."""
        s = self.settings
        if s.acked_path:
            self._acked_file = open(s.acked_path, "a", encoding="utf-8")  # noqa: SIM115 - closed below
        wall_start_ms = int(time.time() * 1000)
        started = time.monotonic()
        next_report = started + s.progress_interval_s
        producer = Producer(self.producer_config())
        log.info(
            "%s datacenter=%s rate=%s duration_s=%s rising=%s",
            READY_LINE,
            s.datacenter,
            s.rate,
            s.duration_s,
            s.rising or "-",
        )
        try:
            while not stop():
                elapsed = time.monotonic() - started
                if s.duration_s and elapsed >= s.duration_s:
                    break
                due = int(elapsed * s.rate) - sum(self.sent.values())
                for _ in range(min(due, 10_000)):
                    self.send_one(producer, elapsed, wall_start_ms)
                now = time.monotonic()
                if now >= next_report:
                    next_report = now + s.progress_interval_s
                    self.report(progress, now - started)
                if due <= 0:
                    time.sleep(min(0.005, 1 / max(s.rate, 1)))
            producer.flush(60)
        finally:
            producer.close(60)
            if self._acked_file is not None:
                self._acked_file.close()
        self.report(progress, time.monotonic() - started, final=True)
        return dict(self.acked)

    def send_one(self, producer: Producer, elapsed: float, wall_start_ms: int) -> None:
        s = self.settings
        time_ms = self.event_time(elapsed, wall_start_ms)
        kind, member, event = self.make(time_ms, min(1.0, elapsed / s.duration_s) if s.duration_s else 1.0)
        value = self.encoders[kind].encode(event)
        key = str(member if member is not None else event["header"]["session_id"]).encode()
        future = producer.send(kind, value, key=key, timestamp_ms=time_ms)
        self.sent[kind] += 1
        event_id = event["header"]["event_id"]
        future.add_callback(self._acked, kind, event_id)
        future.add_errback(self._failed)

    def _acked(self, kind: str, event_id: str, metadata: Any) -> None:
        self.acked[kind] += 1
        if self._acked_file is not None:
            self._acked_file.write(json.dumps({"topic": kind, "event_id": event_id}) + "\n")

    def _failed(self, error: BaseException) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = error
            log.error("event=generate_send_failed error=%r", str(error))

    def report(self, out: TextIO, elapsed: float, final: bool = False) -> None:
        sent, acked = sum(self.sent.values()), sum(self.acked.values())
        word = "done" if final else "running"
        print(
            f"generate {self.settings.datacenter} {word}: {elapsed:.0f}s sent={sent} acked={acked} "
            f"failed={self.failed} rate={sent / max(elapsed, 1e-9):.0f}/s",
            file=out,
            flush=True,
        )
