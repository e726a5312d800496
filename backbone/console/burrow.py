"""Burrow's consumer lag evaluation, over a sliding window of the sampler's observations of each partition's
committed offset and lag.

Per partition, looking at the last `window` observations (oldest first), in this order:

1. fewer than three observations, or the newest lag is 0 (or unknown): OK;
2. STOP (ERR): the committed offset has not moved over the whole window while lag is above 0 and the group
   has no members: nobody is consuming;
3. OK: the lag was 0 somewhere in the window (the consumer caught up recently);
4. REWIND (ERR): the committed offset went backwards somewhere in the window;
5. STALL (ERR): the committed offset has not moved over the window while members are in the group and the
   lag is steady or growing: a consumer is there but stuck;
6. WARN: the offsets move but the lag grew between every pair of observations: the consumer falls behind;
7. otherwise OK.

The group takes its worst partition's status. Every non-OK verdict carries the rule in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OK, WARN, ERR = "OK", "WARN", "ERR"
SEVERITY = {OK: 0, WARN: 1, ERR: 2}
MIN_OBSERVATIONS = 3


@dataclass(frozen=True)
class Observation:
    ts_ms: int
    committed: int | None
    lag: int | None


@dataclass(frozen=True)
class Verdict:
    status: str
    """OK, WARN or ERR."""
    condition: str
    """OK, WARN, STOP, STALL or REWIND (Burrow's partition statuses)."""
    rule: str
    """Why, in words; empty when OK."""


OK_VERDICT = Verdict(OK, "OK", "")


def _n(value: int) -> str:
    return f"{value:,}"


def evaluate_partition(
    label: str, observations: Sequence[Observation], has_members: bool, window: int
) -> Verdict:
    known = [
        (o.committed, o.lag)
        for o in list(observations)[-window:]
        if o.committed is not None and o.lag is not None
    ]
    if len(known) < MIN_OBSERVATIONS or not known[-1][1]:
        return OK_VERDICT
    offsets = [committed for committed, _ in known]
    lags = [lag for _, lag in known]
    samples = len(known)
    unmoved = all(offset == offsets[0] for offset in offsets)
    if unmoved and not has_members:
        return Verdict(
            ERR,
            "STOP",
            f"{label}: offset {_n(offsets[-1])} has not moved for {samples} samples and the group has "
            "no members, while lag "
            + (f"grew from {_n(lags[0])} to {_n(lags[-1])}" if lags[-1] > lags[0] else f"is {_n(lags[-1])}"),
        )
    if 0 in lags:
        return OK_VERDICT
    back = next((i for i in range(1, len(offsets)) if offsets[i] < offsets[i - 1]), None)
    if back is not None:
        return Verdict(
            ERR,
            "REWIND",
            f"{label}: the committed offset went back from {_n(offsets[back - 1])} to {_n(offsets[back])}",
        )
    if unmoved and lags[-1] >= lags[0]:
        return Verdict(
            ERR,
            "STALL",
            f"{label}: offsets have not moved for {samples} samples while lag grew from "
            f"{_n(lags[0])} to {_n(lags[-1])}"
            if lags[-1] > lags[0]
            else f"{label}: offsets have not moved for {samples} samples with lag steady at {_n(lags[-1])}",
        )
    if all(lags[i] > lags[i - 1] for i in range(1, len(lags))):
        return Verdict(
            WARN,
            "WARN",
            f"{label}: offsets move but lag grew in each of the last {samples - 1} intervals, from "
            f"{_n(lags[0])} to {_n(lags[-1])}",
        )
    return OK_VERDICT


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    return max(verdicts, key=lambda v: SEVERITY[v.status], default=OK_VERDICT)
