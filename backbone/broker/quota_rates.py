"""The arithmetic of Kafka's client quotas: a rate measured over sampled windows, and the throttle time of
a rate above its bound.

As Kafka's `Rate` over a `SampledStat`: `quota.window.num` samples of `quota.window.size.seconds` each; a
value lands in the current sample, a sample older than all the windows together counts for nothing, and the
rate is the samples' total over the time they span, where a young rate is taken to span at least
`samples - 1` whole windows (so a first burst is not divided by a few milliseconds). A rate above its
bound throttles for `(rate - bound) / bound * span`: the time after which the rate, with nothing more
recorded, is back at the bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Rate", "throttle_time_ms"]


@dataclass(slots=True)
class _Sample:
    started_ms: float
    value: float = 0.0

    def reset(self, now_ms: float) -> None:
        self.started_ms = now_ms
        self.value = 0.0


@dataclass(slots=True)
class Rate:
    """Per-second rate of recorded values over `samples` windows of `window_ms` each."""

    samples: int
    window_ms: float
    _samples: list[_Sample] = field(default_factory=list)
    _current: int = 0
    last_record_ms: float = 0.0

    def record(self, value: float, now_ms: float) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.started_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        self.last_record_ms = now_ms

    def measure(self, now_ms: float) -> float:
        """The rate per second now."""
        self._purge(now_ms)
        total = sum(sample.value for sample in self._samples)
        return total / (self.span_ms(now_ms) / 1000)

    def span_ms(self, now_ms: float) -> float:
        """The time the samples cover, at least `samples - 1` whole windows (Kafka's Rate.windowSize)."""
        self._purge(now_ms)
        oldest = min((s.started_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full_windows = int(elapsed // self.window_ms)
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return elapsed

    def idle(self, now_ms: float) -> bool:
        """Nothing recorded within the windows: the rate is as good as a new one."""
        return now_ms - self.last_record_ms >= self.samples * self.window_ms

    def _current_sample(self, now_ms: float) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: float) -> _Sample:
        self._current = (self._current + 1) % self.samples
        if self._current >= len(self._samples):
            self._samples.append(_Sample(now_ms))
        else:
            self._samples[self._current].reset(now_ms)
        return self._samples[self._current]

    def _purge(self, now_ms: float) -> None:
        expire_ms = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.started_ms >= expire_ms:
                sample.reset(now_ms)


def throttle_time_ms(rate: float, bound: float, span_ms: float) -> int:
    """How long a client whose rate is `rate` against `bound` waits (0 within the bound)."""
    if rate <= bound:
        return 0
    return round((rate - bound) / bound * span_ms)
