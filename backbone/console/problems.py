"""What is wrong with a cluster, in words, worst first: the overview's first lines."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import quote

from backbone.console.burrow import ERR, SEVERITY, WARN
from backbone.console.snapshot import ClusterSnapshot, Problem


def clock(ms: int | None) -> str:
    """A moment as the operator's wall clock says it (local time of the console)."""
    if not ms:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000)
    today = datetime.now().date() == moment.date()
    return moment.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M")


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def problems(snapshot: ClusterSnapshot) -> list[Problem]:
    """The snapshot's problems, worked out once per snapshot (pages, the API and webhooks all ask)."""
    found = snapshot.__dict__.get("_problems")
    if found is None:
        found = snapshot.__dict__["_problems"] = _problems(snapshot)
    return found


def _problems(snapshot: ClusterSnapshot) -> list[Problem]:
    name = snapshot.name
    base = f"/clusters/{quote(name)}"
    found: list[Problem] = []
    if snapshot.error:
        when = clock(snapshot.failing_since_ms)
        shown = f"; showing the sample of {clock(snapshot.taken_ms)}" if snapshot.taken_ms else ""
        found.append(Problem(ERR, f"{name}: {snapshot.error} (since {when}){shown}", base))
        if not snapshot.taken_ms:
            return found
    # A down broker and what it leaves behind read as one sentence ("dc1: broker 2 down since 14:02; 12
    # partitions under-replicated"); without a down broker each replication figure stands alone.
    replication = []
    if snapshot.offline:
        replication.append((ERR, f"{_plural(snapshot.offline, 'partition')} offline (no live leader)"))
    if snapshot.under_min_isr:
        replication.append((ERR, f"{_plural(snapshot.under_min_isr, 'partition')} under min.insync.replicas"))
    if snapshot.under_replicated:
        replication.append((WARN, f"{_plural(snapshot.under_replicated, 'partition')} under-replicated"))
    if snapshot.brokers_down:
        down = [f"broker {b.id} down since {clock(b.down_since_ms)}" for b in snapshot.brokers_down]
        found.append(Problem(ERR, f"{name}: " + "; ".join(down + [words for _, words in replication]), base))
    for note in snapshot.notes:
        found.append(Problem(WARN, f"{name}: {note}", base))
    if not snapshot.brokers_down:
        found.extend(Problem(level, f"{name}: {words}", base) for level, words in replication)
    for group in sorted(snapshot.groups.values(), key=lambda g: -SEVERITY[g.verdict.status]):
        if group.verdict.status != "OK":
            found.append(
                Problem(
                    group.verdict.status,
                    f"{name}: group {group.group_id} {group.verdict.status} ({group.verdict.condition}): "
                    f"{group.verdict.rule}",
                    f"{base}/groups/{quote(group.group_id, safe='')}",
                )
            )
    for mirror in snapshot.mirrors:
        if mirror.error:
            found.append(
                Problem(WARN, f"mirror {mirror.source} -> {mirror.target}: {mirror.error}", "/mirrors")
            )
    if snapshot.audit_error:
        found.append(Problem(WARN, f"{name}: {snapshot.audit_error}", "/mirrors"))
    elif snapshot.audit is not None and snapshot.audit.verdict == "cannot judge":
        unreported = ", ".join(snapshot.audit.unreported)
        found.append(
            Problem(
                WARN,
                f"{name}: the audit cannot judge completeness yet"
                + (f" (no counts from {unreported})" if unreported else ""),
                "/mirrors",
            )
        )
    elif snapshot.audit is not None and not snapshot.audit.complete:
        missing = snapshot.audit.incomplete_buckets()
        found.append(
            Problem(
                WARN,
                f"{name}: audit finds {snapshot.audit.missing:,} records missing in "
                f"{_plural(len(missing), 'bucket')} of the last hours",
                "/mirrors",
            )
        )
    return sorted(found, key=lambda p: -SEVERITY[p.severity])
