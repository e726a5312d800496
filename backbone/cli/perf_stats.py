"""Measuring for `backbone perf`: pacing to a target rate, latency samples and their percentiles, and the
progress line printed while a run goes on.

Memory is bounded whatever the run's length: at most `MAX_SAMPLES` latencies are kept (every Nth one
once the reservoir is full, N doubling each time), as Kafka's perf tools sample rather than keep all.
"""

from __future__ import annotations

import array
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

MAX_SAMPLES = 1_000_000
PERCENTILES = (0.5, 0.95, 0.99, 0.999)


class Throttle:
    """Pace work to `per_second` operations (no pacing when it is not positive).

    As Kafka's ThroughputThrottler does, it sleeps only once the run is `min_sleep` seconds (2 ms) ahead of
    schedule, so operations go in short bursts: a sleep before each record woke the sending thread up to
    10,000 times a second, and in one Python process each wake-up takes the GIL from the clients being
    measured (it cost `perf e2e` over a millisecond of median latency at 10,000 records/s).
    """

    def __init__(
        self, per_second: float, clock: Callable[[], float] = time.perf_counter, min_sleep: float = 0.002
    ) -> None:
        self.per_second = per_second
        self.min_sleep = min_sleep
        self._clock = clock
        self._started = clock()

    def wait_for(self, done: int) -> None:
        """Sleep until operation number `done` is due, if that is at least `min_sleep` away; never sleeps
        for a run that is behind schedule."""
        if self.per_second <= 0:
            return
        delay = self._started + done / self.per_second - self._clock()
        if delay >= self.min_sleep:
            time.sleep(delay)


class LatencySamples:
    """Latencies in milliseconds, kept in a bounded reservoir: every `stride`-th one once it fills up."""

    def __init__(self, limit: int = MAX_SAMPLES) -> None:
        self.limit = limit
        self._values = array.array("d")
        self._stride = 1
        self._seen = 0
        self.count = 0
        self.total_ms = 0.0
        self.max_ms = 0.0

    def add(self, latency_ms: float) -> None:
        self.count += 1
        self.total_ms += latency_ms
        if latency_ms > self.max_ms:
            self.max_ms = latency_ms
        self._seen += 1
        if self._seen >= self._stride:
            self._seen = 0
            self._values.append(latency_ms)
            if len(self._values) >= self.limit:  # keep every other sample, and sample half as often
                self._values = self._values[::2]
                self._stride *= 2

    def percentiles(self) -> dict[str, float]:
        """p50, p95, p99, p99.9 and max, in ms (empty when nothing was measured)."""
        if not self._values:
            return {}
        ordered = sorted(self._values)
        found = {_label(q): ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in PERCENTILES}
        found["max"] = self.max_ms
        return found

    @property
    def average_ms(self) -> float:
        return self.total_ms / self.count if self.count else 0.0


def _label(quantile: float) -> str:
    return "p" + f"{quantile * 100:g}"


@dataclass
class Summary:
    """What a run measured; `as_dict` is the --json form."""

    records: int
    bytes: int
    seconds: float
    latency: LatencySamples | None = None
    errors: int = 0

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def megabytes_per_second(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "records": self.records,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records_per_second, 1),
            "mb_per_second": round(self.megabytes_per_second, 2),
            "errors": self.errors,
        }
        if self.latency is not None:
            result["latency_ms"] = {
                "average": round(self.latency.average_ms, 3),
                **{k: round(v, 3) for k, v in self.latency.percentiles().items()},
            }
        return result

    def line(self) -> str:
        text = (
            f"{self.records:,} records in {self.seconds:.2f} s: {self.records_per_second:,.1f} records/s "
            f"({self.megabytes_per_second:.2f} MB/s)"
        )
        if self.errors:
            text += f", {self.errors:,} failed"
        if self.latency is not None and self.latency.count:
            marks = ", ".join(f"{k} {v:.2f}" for k, v in self.latency.percentiles().items())
            text += f"; latency ms: average {self.latency.average_ms:.2f}, {marks}"
        return text


class Progress:
    """A line on `stream` at most every `interval` seconds: the rate over the last window and in total."""

    def __init__(self, stream: TextIO, what: str, interval: float = 2.0) -> None:
        self.stream = stream
        self.what = what
        self.interval = interval
        self.started = time.perf_counter()
        self._last_time = self.started
        self._last_count = 0

    def update(self, count: int, latency: LatencySamples | None = None) -> None:
        now = time.perf_counter()
        if now - self._last_time < self.interval:
            return
        rate = (count - self._last_count) / (now - self._last_time)
        text = (
            f"{count:,} records {self.what}, {rate:,.1f} records/s in the last {now - self._last_time:.1f} s"
        )
        if latency is not None and latency.count:
            text += f", average latency {latency.average_ms:.2f} ms, max {latency.max_ms:.2f} ms"
        print(text, file=self.stream, flush=True)
        self._last_time, self._last_count = now, count

    def elapsed(self) -> float:
        return time.perf_counter() - self.started
