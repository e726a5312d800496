"""Decisions over a log's segment list: which file regions answer a fetch, which batch a timestamp names,
which segments retention deletes.

Pure functions over the segments; the Log calls them under its lock.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import pairwise

from backbone.log.config import LogConfig
from backbone.log.files import FileRegion
from backbone.log.segment import Segment


def plan_read(
    segments: list[Segment], bases: list[int], offset: int, max_bytes: int, limit: int, log_end: int
) -> tuple[FileRegion, ...]:
    """Regions of whole batches from the batch holding `offset`, leaving out batches whose last offset is
    >= `limit`, within `max_bytes` except that the first batch always comes whole.

    A read continues into later segments (one region per segment) until `max_bytes` is used up. Costs
    two index lookups and short header scans, whatever the number of segments.
    """
    limit_segment = bisect_right(bases, limit) - 1 if limit < log_end else len(segments)
    regions: list[FileRegion] = []
    remaining = max_bytes
    for i in range(max(0, bisect_right(bases, offset) - 1), min(limit_segment + 1, len(segments))):
        segment = segments[i]
        end = segment.size
        if i == limit_segment:
            found_limit = segment.find_batch(limit, end)
            end = found_limit[0] if found_limit is not None else end
        start, first_size = 0, 0
        if not regions:
            found = segment.find_batch(offset, end)
            if found is None:  # `offset` is in a gap after this segment's last batch
                continue
            start, first_size = found[0], found[1].size
        if end <= start:
            break
        if end - start > remaining:
            if first_size >= remaining:  # only the first batch fits (or not even that): no scan needed
                regions.append(FileRegion(segment.file, start, first_size))
                break
            stop = segment.last_boundary_within(start, start + remaining, end)
            if stop == start:
                if regions:
                    break
                stop = start + first_size  # the first batch always goes, however large
            regions.append(FileRegion(segment.file, start, stop - start))
            break
        regions.append(FileRegion(segment.file, start, end - start))
        remaining -= end - start
    return tuple(regions)


def find_offset_for_timestamp(
    segments: list[Segment], timestamp: int, log_start: int
) -> tuple[int, int] | None:
    """(offset, max timestamp) of the first batch at or after `log_start` whose max timestamp >= `timestamp`.

    Segments are tried in order by their largest timestamp (timestamps need not grow across segments, so
    this is a linear walk, as in Kafka), then the segment's time index narrows the header scan.
    """
    for i, segment in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1].base_offset <= log_start:
            continue
        if segment.largest_batch_timestamp() < timestamp:
            continue
        found = segment.find_timestamp(timestamp, log_start)
        if found is not None:
            return found
    return None


def expired_segments(
    segments: list[Segment], log_start: int, config: LogConfig, now_ms: int
) -> list[tuple[Segment, str]]:
    """The oldest closed segments retention deletes, each with its reason, as Kafka decides.

    A prefix of the closed segments (never the active one) that lie wholly below the log start offset,
    whose largest timestamp is older than retention.ms, or whose removal keeps the log at or above
    retention.bytes. Time and size retention apply only when cleanup.policy contains "delete".
    """
    excess = -1
    if config.deletes and config.retention_bytes >= 0:
        excess = sum(segment.size for segment in segments) - config.retention_bytes
    by_time = config.deletes and config.retention_ms >= 0
    expired: list[tuple[Segment, str]] = []
    for segment, following in pairwise(segments):
        if following.base_offset <= log_start:
            reason = "log_start_offset"
        elif by_time and now_ms - segment.largest_timestamp() > config.retention_ms:
            reason = "retention_ms"
        elif excess >= segment.size:
            reason = "retention_bytes"
        else:
            break
        excess -= segment.size
        expired.append((segment, reason))
    return expired
