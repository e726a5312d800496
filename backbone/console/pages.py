"""The console's pages: overview, cluster, topic (with the message browser), consumer groups, mirrors,
the action log, and login. Each reads the samplers' snapshots and the history; only the message browser
asks a cluster while the page waits (it reads records the snapshot does not hold)."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlparse

from aiohttp import web

from backbone.client import KafkaClientError, KafkaError
from backbone.console import auth, browse
from backbone.console.app import render, state
from backbone.console.problems import problems
from backbone.console.snapshot import ClusterSnapshot, GroupState, TopicState

CONFIG_SOURCES = {1: "topic", 2: "dynamic broker", 3: "dynamic broker default", 4: "broker", 5: "default"}
RANGES = {"1h": 3_600_000, "6h": 6 * 3_600_000, "1d": 86_400_000, "7d": 7 * 86_400_000}


def routes(app: web.Application) -> None:
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/", overview)
    app.router.add_get("/clusters/{cluster}", cluster_page)
    app.router.add_get("/clusters/{cluster}/topics/{topic}", topic_page)
    app.router.add_get("/clusters/{cluster}/topics/{topic}/messages", messages_page)
    app.router.add_get("/clusters/{cluster}/groups", groups_page)
    app.router.add_get("/clusters/{cluster}/groups/{group}", group_page)
    app.router.add_get("/mirrors", mirrors_page)
    app.router.add_get("/actions", actions_page)


# -- lookups shared with the API and the actions -----------------------------------------------------------


def topic_of(snapshot: ClusterSnapshot, name: str) -> TopicState:
    topic = snapshot.topics.get(name)
    if topic is None:
        raise web.HTTPNotFound(text=f"cluster {snapshot.name} has no topic named {name!r}")
    return topic


def group_of(snapshot: ClusterSnapshot, group_id: str) -> GroupState:
    group = snapshot.groups.get(group_id)
    if group is None:
        raise web.HTTPNotFound(text=f"cluster {snapshot.name} has no consumer group named {group_id!r}")
    return group


def history_range(request: web.Request) -> tuple[str, int]:
    chosen = request.query.get("range", "1h")
    if chosen not in RANGES:
        raise web.HTTPBadRequest(text=f"range must be one of {', '.join(RANGES)}")
    return chosen, int(time.time() * 1000) - RANGES[chosen]


async def group_history(request: web.Request, snapshot: ClusterSnapshot, group: GroupState) -> tuple:
    """(range name, total lag series, per-partition series) for the range the request asks."""
    console = state(request)
    chosen, since = history_range(request)
    rounds = console.samplers[snapshot.name].rounds
    totals, per_partition = await console.group_history.read(
        console.history, group, snapshot.name, rounds, chosen, RANGES[chosen], since
    )
    return chosen, totals, per_partition


def retention_outlook(topic: TopicState) -> list[str]:
    """When retention will next delete, in words, from the oldest record's age and the topic's size."""
    lines = []
    oldest = min((p.oldest_ms for p in topic.partitions if p.oldest_ms is not None), default=None)
    if topic.retention_ms is not None and topic.retention_ms >= 0 and oldest is not None:
        due = oldest + topic.retention_ms
        lines.append(f"by time: the oldest records become due at {browse_clock(due)} (retention.ms elapsed)")
    elif topic.retention_ms is not None and topic.retention_ms < 0:
        lines.append("by time: never (retention.ms = -1)")
    if topic.retention_bytes is not None and topic.retention_bytes >= 0:
        over = [p for p in topic.partitions if (p.size_bytes or 0) > topic.retention_bytes]
        lines.append(
            f"by size: {len(over)} partitions over retention.bytes: their oldest closed segments go "
            "at the next check"
            if over
            else "by size: every partition is within retention.bytes"
        )
    lines.append("retention removes whole closed segments, so records may outlive these times a little")
    return lines


def browse_clock(ms: int) -> str:
    from backbone.console.problems import clock

    return clock(ms)


# -- login ------------------------------------------------------------------------------------------------


def _safe_next(target: str | None) -> str:
    parsed = urlparse(target or "/")
    return target if target and not parsed.scheme and not parsed.netloc and target.startswith("/") else "/"


async def login_page(request: web.Request) -> web.Response:
    await auth.login_token(request)
    return render(request, "login.html", next=_safe_next(request.query.get("next")), failed=False)


async def login(request: web.Request) -> web.Response:
    form = await request.post()
    await auth.check_login_token(request, str(form.get("csrf_token", "")))
    name, password = str(form.get("user", "")), str(form.get("password", ""))
    role = await asyncio.to_thread(auth.check_password, state(request).config, name, password)
    if role is None:
        await auth.login_token(request)
        return render(
            request, "login.html", status=401, next=_safe_next(str(form.get("next", "/"))), failed=True
        )
    await auth.log_in(request, name, role)
    raise web.HTTPSeeOther(_safe_next(str(form.get("next", "/"))))


async def logout(request: web.Request) -> web.Response:
    await auth.log_out(request)
    raise web.HTTPSeeOther("/login")


# -- pages ------------------------------------------------------------------------------------------------


async def overview(request: web.Request) -> web.Response:
    console = state(request)
    found = [p for s in console.snapshots() for p in problems(s)]
    found.sort(key=lambda p: p.severity != "ERR")
    return render(request, "overview.html", problems=found, mirrors=_mirrors(console))


async def cluster_page(request: web.Request) -> web.Response:
    snapshot = state(request).snapshot(request.match_info["cluster"])
    return render(request, "cluster.html", c=snapshot, problems=problems(snapshot))


async def topic_page(request: web.Request) -> web.Response:
    snapshot = state(request).snapshot(request.match_info["cluster"])
    topic = topic_of(snapshot, request.match_info["topic"])
    configs = sorted(topic.configs.values(), key=lambda e: (e.source != 1, e.name))
    return render(
        request,
        "topic.html",
        c=snapshot,
        t=topic,
        configs=configs,
        sources=CONFIG_SOURCES,
        outlook=retention_outlook(topic),
        brokers=sorted(b.id for b in snapshot.brokers.values() if b.up),
    )


def browse_query(request: web.Request, topic: TopicState) -> dict[str, Any]:
    """The message browser's parameters, checked: 400 with the reason when one is wrong."""
    query = request.query
    try:
        partition = int(query.get("partition", "0"))
        limit = int(query.get("limit", "20"))
        offset = int(query["offset"]) if query.get("offset", "").strip() else None
    except ValueError as error:
        raise web.HTTPBadRequest(
            text=f"partition, offset and limit must be whole numbers ({error})"
        ) from None
    try:
        time_ms = browse.parse_time(query["time"]) if query.get("time", "").strip() else None
    except browse.BadQuery as error:
        raise web.HTTPBadRequest(text=str(error)) from None
    fmt = query.get("format", "text")
    if partition not in {p.partition for p in topic.partitions}:
        raise web.HTTPBadRequest(text=f"topic {topic.name} has no partition {partition}")
    if not 1 <= limit <= browse.MAX_LIMIT:
        raise web.HTTPBadRequest(text=f"limit must be from 1 to {browse.MAX_LIMIT}")
    if offset is not None and offset < 0:
        raise web.HTTPBadRequest(text="offset must not be negative")
    if fmt not in browse.FORMATS:
        raise web.HTTPBadRequest(text=f"format must be one of {', '.join(browse.FORMATS)}")
    return {"partition": partition, "limit": limit, "offset": offset, "time_ms": time_ms, "fmt": fmt}


async def read_messages(
    request: web.Request, snapshot: ClusterSnapshot, topic: TopicState, q: dict
) -> tuple[list, int, str | None]:
    client = state(request).config.client_config(snapshot.name)
    try:
        rows, end = await browse.read_page(
            client, topic.name, q["partition"], q["offset"], q["time_ms"], q["limit"], q["fmt"]
        )
    except browse.BadQuery as error:
        raise web.HTTPBadRequest(text=str(error)) from None
    except (KafkaError, KafkaClientError, OSError, TimeoutError) as error:
        return [], -1, f"cluster {snapshot.name} did not answer: {error or type(error).__name__}"
    return rows, end, None


async def messages_page(request: web.Request) -> web.Response:
    snapshot = state(request).snapshot(request.match_info["cluster"])
    topic = topic_of(snapshot, request.match_info["topic"])
    try:
        q = browse_query(request, topic)
    except browse.BadQuery as error:
        raise web.HTTPBadRequest(text=str(error)) from None
    rows, end, failure = await read_messages(request, snapshot, topic, q)
    first = rows[0].offset if rows else q["offset"] or 0
    return render(
        request,
        "messages.html",
        c=snapshot,
        t=topic,
        q=q,
        rows=rows,
        end=end,
        error=failure,
        older=max(0, first - q["limit"]),
        newer=rows[-1].offset + 1 if rows else None,
        formats=browse.FORMATS,
    )


async def groups_page(request: web.Request) -> web.Response:
    snapshot = state(request).snapshot(request.match_info["cluster"])
    return render(request, "groups.html", c=snapshot)


async def group_page(request: web.Request) -> web.Response:
    console = state(request)
    snapshot = console.snapshot(request.match_info["cluster"])
    group = group_of(snapshot, request.match_info["group"])
    chosen, totals, per_partition = await group_history(request, snapshot, group)
    return render(
        request,
        "group.html",
        c=snapshot,
        g=group,
        ranges=list(RANGES),
        chosen=chosen,
        totals=totals,
        per_partition=per_partition,
        topics=sorted({p.topic for p in group.partitions}),
    )


def _mirrors(console: Any) -> list[dict[str, Any]]:
    """Each configured mirror with its state from its source cluster's sampler and its target's audit."""
    rows = []
    for mirror in console.config.mirrors:
        source = console.samplers[mirror.source].snapshot
        found = next((m for m in source.mirrors if m.group == mirror.group), None)
        target = console.samplers[mirror.target].snapshot
        rows.append({"settings": mirror, "state": found, "source": source, "target": target})
    return rows


async def mirrors_page(request: web.Request) -> web.Response:
    console = state(request)
    audits = [s for s in console.snapshots() if s.role == "aggregate"]
    grids = [(s, audit_grid(s.audit)) for s in audits]
    return render(request, "mirrors.html", mirrors=_mirrors(console), grids=grids)


def audit_grid(report: Any) -> dict[str, Any] | None:
    """The audit report as a grid: a row per topic, a column per 10-minute bucket, each cell its share."""
    if report is None:
        return None
    columns = sorted({b.bucket_start_ms for b in report.buckets})
    cells: dict[str, dict[int, Any]] = {}
    for bucket in report.buckets:
        cells.setdefault(bucket.topic, {})[bucket.bucket_start_ms] = bucket
    return {"columns": columns, "rows": sorted(cells.items()), "report": report}


async def actions_page(request: web.Request) -> web.Response:
    history = state(request).history
    return render(request, "actions.html", actions=await asyncio.to_thread(history.actions))
