"""A group's lag over time for its charts and its API answer, read once per sampling round.

The history changes only when a sampler records a round, so a group's series are read from the database
once per round of its cluster and range, and every request until the next round is served from memory.
Each read is bounded however long the range: one point per series and `1/CHART_POINTS` of the range
(the highest lag in that step), for the total and the `CHARTED_PARTITIONS` partitions lagging most.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import OrderedDict

from backbone.console.history import HistoryStore
from backbone.console.snapshot import GroupState

CHART_POINTS = 360  # about one per two pixels of the chart's plot
CHARTED_PARTITIONS = 8  # the chart's colours; the table lists every partition
CACHED_GROUPS = 256  # (cluster, group, range) entries kept; the least recently asked goes first

Series = list[tuple[str, list[tuple[int, int]]]]


def read_group_history(
    history: HistoryStore, group: GroupState, cluster: str, since_ms: int, range_ms: int
) -> tuple[Series, Series]:
    """Total lag over time, and lag over time of the partitions lagging most now."""
    step = max(1, range_ms // CHART_POINTS)
    totals = history.group_total_series(cluster, group.group_id, since_ms, step)
    worst = sorted(group.partitions, key=lambda p: -(p.lag or 0))[:CHARTED_PARTITIONS]
    series = history.group_lag_series(
        cluster, group.group_id, since_ms, {(p.topic, p.partition) for p in worst}, step
    )
    per_partition = [(f"{t}/{p}", values) for (t, p), values in sorted(series.items())]
    return [("total lag", totals)], per_partition


def _since(series: Series, since_ms: int) -> Series:
    return [
        (name, values[bisect.bisect_left(values, since_ms, key=lambda v: v[0]) :]) for name, values in series
    ]


class GroupHistoryCache:
    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, str, str], tuple[int, tuple[Series, Series]]] = OrderedDict()

    async def read(
        self,
        history: HistoryStore,
        group: GroupState,
        cluster: str,
        sampled_rounds: int,
        range_name: str,
        range_ms: int,
        since_ms: int,
    ) -> tuple[Series, Series]:
        """The series of `group` since `since_ms`, from memory when its cluster's sampler has finished no
        round since they were read (`sampled_rounds` counts them; points that fell out of the range since
        then are left out)."""
        key = (cluster, group.group_id, range_name)
        found = self._entries.get(key)
        if found is not None and found[0] == sampled_rounds:
            self._entries.move_to_end(key)
            totals, per_partition = found[1]
            return _since(totals, since_ms), _since(per_partition, since_ms)
        read = await asyncio.to_thread(read_group_history, history, group, cluster, since_ms, range_ms)
        self._entries[key] = (sampled_rounds, read)
        self._entries.move_to_end(key)
        while len(self._entries) > CACHED_GROUPS:
            self._entries.popitem(last=False)
        return read
