"""A numbered-record producer running in the background while a test breaks the cluster, and the
bookkeeping that proves nothing acknowledged was lost: acknowledged, lost and duplicated counts."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from backbone.client import Consumer, Producer, TopicPartition


@dataclass
class Ledger:
    sent: int = 0
    acknowledged: set[int] = field(default_factory=set)
    failed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def acked(self) -> int:
        with self.lock:
            return len(self.acknowledged)


class NumberedProducer:
    """Sends "0", "1", ... to partition 0 with acks=all (idempotent), at most `rate` per second, until stopped
    or `limit` records; every acknowledgement is recorded in the ledger."""

    def __init__(self, bootstrap: str, topic: str, *, rate: float = 500.0, limit: int = 200_000) -> None:
        self.topic = topic
        self.rate = rate
        self.limit = limit
        self.ledger = Ledger()
        self._stop = threading.Event()
        self._producer = Producer(
            bootstrap_servers=bootstrap,
            acks="all",
            linger_ms=2,
            retry_backoff_ms=50,
            request_timeout_ms=10_000,
        )
        self._thread = threading.Thread(target=self._run, name="numbered-producer", daemon=True)

    def __enter__(self) -> NumberedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        started = time.monotonic()
        for number in range(self.limit):
            if self._stop.is_set():
                break
            delay = started + number / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._producer.send(
                self.topic, value=str(number).encode(), partition=0, callback=self._answer(number)
            )
            self.ledger.sent = number + 1

    def _answer(self, number: int):
        def record(metadata, error) -> None:
            with self.ledger.lock:
                if error is None:
                    self.ledger.acknowledged.add(number)
                else:
                    self.ledger.failed += 1

        return record

    def wait_for_acks(self, more_than: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ledger.acked > more_than:
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=30)
        try:
            self._producer.flush(timeout=120)
        finally:
            self._producer.close(timeout=30)


@dataclass
class Audit:
    acknowledged: int
    lost: int
    duplicated: int
    out_of_order: int
    unacknowledged_present: int

    def __str__(self) -> str:
        return (
            f"acknowledged={self.acknowledged} lost={self.lost} duplicated={self.duplicated} "
            f"out_of_order={self.out_of_order} unacknowledged_but_present={self.unacknowledged_present}"
        )


def read_numbers(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[int]:
    """Every record of partition 0, as numbers, reading until `expected` are seen or the log end."""
    numbers: list[int] = []
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning()
        end = consumer.end_offsets([tp])[tp]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and consumer.position(tp) < end:
            for records in consumer.poll(timeout_ms=500).values():
                numbers.extend(int(r.value) for r in records)
    return numbers


def audit(ledger: Ledger, numbers: list[int]) -> Audit:
    seen: set[int] = set()
    duplicated = 0
    for number in numbers:
        if number in seen:
            duplicated += 1
        seen.add(number)
    out_of_order = sum(1 for a, b in itertools.pairwise(numbers) if b <= a)
    with ledger.lock:
        acknowledged = set(ledger.acknowledged)
    return Audit(
        acknowledged=len(acknowledged),
        lost=len(acknowledged - seen),
        duplicated=duplicated,
        out_of_order=out_of_order,
        unacknowledged_present=len(seen - acknowledged),
    )
