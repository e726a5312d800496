"""The JSON API under /api/: everything the pages show, from the same snapshots and history, and the
OpenAPI document that describes it (/api/openapi.json)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from backbone.console.app import state
from backbone.console.pages import (
    CONFIG_SOURCES,
    _mirrors,
    audit_grid,
    browse_query,
    group_history,
    group_of,
    read_messages,
    retention_outlook,
    topic_of,
)
from backbone.console.problems import problems
from backbone.console.snapshot import ClusterSnapshot, GroupState, TopicState


def routes(app: web.Application) -> None:
    app.router.add_get("/api/openapi.json", openapi)
    app.router.add_get("/api/overview", overview)
    app.router.add_get("/api/clusters", clusters)
    app.router.add_get("/api/clusters/{cluster}", cluster)
    app.router.add_get("/api/clusters/{cluster}/topics/{topic}", topic)
    app.router.add_get("/api/clusters/{cluster}/topics/{topic}/messages", messages)
    app.router.add_get("/api/clusters/{cluster}/groups", groups)
    app.router.add_get("/api/clusters/{cluster}/groups/{group}", group)
    app.router.add_get("/api/mirrors", mirrors)
    app.router.add_get("/api/actions", actions)


def _cluster_summary(s: ClusterSnapshot) -> dict[str, Any]:
    worst = s.worst_group()
    return {
        "name": s.name,
        "role": s.role,
        "sampled_ms": s.taken_ms or None,
        "error": s.error,
        "controller": s.controller_id,
        "brokers_up": sum(b.up for b in s.brokers.values()),
        "brokers": len(s.brokers),
        "topics": len(s.topics),
        "offline_partitions": s.offline,
        "under_replicated_partitions": s.under_replicated,
        "under_min_isr_partitions": s.under_min_isr,
        "worst_group": None if worst is None else {"group": worst.group_id, "status": worst.verdict.status},
    }


def _topic_summary(s: ClusterSnapshot, t: TopicState) -> dict[str, Any]:
    return {
        "name": t.name,
        "internal": t.internal,
        "partitions": len(t.partitions),
        "replication_factor": t.replication_factor,
        "under_replicated": t.under_replicated,
        "offline": t.offline,
        "size_bytes": t.size_bytes,
        "retention_ms": t.retention_ms,
        "retention_bytes": t.retention_bytes,
        "records_per_s": s.rates.get(t.name),
    }


def _group_summary(g: GroupState) -> dict[str, Any]:
    return {
        "group": g.group_id,
        "state": g.state,
        "members": len(g.members),
        "total_lag": g.total_lag,
        "status": g.verdict.status,
        "condition": g.verdict.condition,
        "rule": g.verdict.rule,
    }


async def overview(request: web.Request) -> web.Response:
    snapshots = state(request).snapshots()
    return web.json_response(
        {
            "problems": [{"severity": p.severity, "text": p.text} for s in snapshots for p in problems(s)],
            "clusters": [_cluster_summary(s) for s in snapshots],
        }
    )


async def clusters(request: web.Request) -> web.Response:
    return web.json_response([_cluster_summary(s) for s in state(request).snapshots()])


async def cluster(request: web.Request) -> web.Response:
    s = state(request).snapshot(request.match_info["cluster"])
    return web.json_response(
        {
            **_cluster_summary(s),
            "problems": [{"severity": p.severity, "text": p.text} for p in problems(s)],
            "broker_list": [
                {
                    "id": b.id,
                    "host": b.host,
                    "port": b.port,
                    "rack": b.rack,
                    "up": b.up,
                    "down_since_ms": b.down_since_ms,
                    "partitions": b.partitions,
                    "leaders": b.leaders,
                    "size_bytes": b.size_bytes,
                }
                for b in s.brokers.values()
            ],
            "topic_list": [_topic_summary(s, t) for t in s.topics.values()],
        }
    )


async def topic(request: web.Request) -> web.Response:
    s = state(request).snapshot(request.match_info["cluster"])
    t = topic_of(s, request.match_info["topic"])
    return web.json_response(
        {
            **_topic_summary(s, t),
            "min_insync_replicas": t.min_isr,
            "retention_outlook": retention_outlook(t),
            "partition_list": [
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "out_of_sync": list(p.out_of_sync),
                    "on_down_brokers": list(p.down),
                    "preferred_leader": p.preferred_leader,
                    "leader_is_preferred": p.leader_is_preferred,
                    "start_offset": p.start_offset,
                    "end_offset": p.end_offset,
                    "size_bytes": p.size_bytes,
                    "oldest_record_ms": p.oldest_ms,
                }
                for p in t.partitions
            ],
            "configs": [
                {
                    "name": e.name,
                    "value": None if e.is_sensitive else e.value,
                    "source": CONFIG_SOURCES.get(e.source, "unknown"),
                }
                for e in sorted(t.configs.values())
            ],
        }
    )


async def messages(request: web.Request) -> web.Response:
    s = state(request).snapshot(request.match_info["cluster"])
    t = topic_of(s, request.match_info["topic"])
    q = browse_query(request, t)
    rows, end, error = await read_messages(request, s, t, q)
    if error:
        raise web.HTTPServiceUnavailable(text=error)
    return web.json_response(
        {
            "partition": q["partition"],
            "end_offset": end,
            "format": q["fmt"],
            "records": [
                {
                    "offset": r.offset,
                    "timestamp_ms": r.timestamp_ms,
                    "key": r.shown.key,
                    "value": r.shown.value,
                    "headers": [{"key": k, "value": v} for k, v in r.shown.headers],
                }
                for r in rows
            ],
        }
    )


async def groups(request: web.Request) -> web.Response:
    s = state(request).snapshot(request.match_info["cluster"])
    return web.json_response([_group_summary(g) for g in s.groups.values()])


async def group(request: web.Request) -> web.Response:
    console = state(request)
    s = console.snapshot(request.match_info["cluster"])
    g = group_of(s, request.match_info["group"])
    chosen, totals, per_partition = await group_history(request, s, g)
    return web.json_response(
        {
            **_group_summary(g),
            "assignor": g.protocol,
            "member_list": [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "host": m.host,
                    "partitions": [f"{tp.topic}/{tp.partition}" for tp in m.assignment],
                }
                for m in g.members
            ],
            "partitions": [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "committed": p.committed,
                    "log_end": p.log_end,
                    "lag": p.lag,
                    "owner": p.owner,
                    "status": p.verdict.status,
                    "condition": p.verdict.condition,
                    "rule": p.verdict.rule,
                }
                for p in g.partitions
            ],
            "history": {
                "range": chosen,
                "total_lag": totals[0][1],
                "partition_lag": {name: values for name, values in per_partition},
            },
        }
    )


async def mirrors(request: web.Request) -> web.Response:
    console = state(request)
    rows = []
    for m in _mirrors(console):
        found = m["state"]
        rows.append(
            {
                "source": m["settings"].source,
                "target": m["settings"].target,
                "group": m["settings"].group,
                "lag_records": found.lag_records if found else None,
                "lag_seconds": found.lag_seconds if found else None,
                "records_per_s": found.records_per_s if found else None,
                "error": found.error if found else None,
            }
        )
    audits = {}
    for s in console.snapshots():
        grid = audit_grid(s.audit) if s.role == "aggregate" else None
        if grid is not None:
            from backbone.client.audit.report import to_json

            audits[s.name] = to_json(grid["report"])
    return web.json_response({"mirrors": rows, "audit": audits})


async def actions(request: web.Request) -> web.Response:
    found = await asyncio.to_thread(state(request).history.actions)
    return web.json_response([a.__dict__ for a in found])


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


MESSAGES_QUERY = [
    _query("partition", {"type": "integer", "minimum": 0, "default": 0}, "the partition to read"),
    _query("offset", {"type": "integer", "minimum": 0}, "the first offset (default: the log start)"),
    _query(
        "time", {"type": "string"}, "instead of offset: epoch ms or ISO 8601; the first record at or after"
    ),
    _query("limit", {"type": "integer", "minimum": 1, "default": 20}, "how many records"),
    _query(
        "format", {"type": "string", "enum": ["text", "json", "hex"], "default": "text"}, "how values show"
    ),
]
RANGE_QUERY = [
    _query(
        "range",
        {"type": "string", "enum": ["1h", "6h", "1d", "7d"], "default": "1h"},
        "the lag history's span",
    )
]


def _get(summary: str, *params: str, query: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "parameters": [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}} for p in params
            ]
            + (query or []),
            "responses": {
                "200": {"description": "JSON"},
                "401": {"description": "not logged in"},
                "400": {"description": "a query parameter is wrong (the body says which and why)"},
                "404": {"description": "unknown cluster, topic or group (the body says which)"},
            },
        }
    }


OPENAPI = {
    "openapi": "3.0.3",
    "info": {
        "title": "Backbone console API",
        "version": "1",
        "description": "Read-only JSON views of what the console's pages show. Log in first: GET /login "
        "for the session cookie and the form's csrf_token, then POST /login with user, password and "
        "csrf_token; the session cookie authenticates the API.",
    },
    "paths": {
        "/api/overview": _get("problems in words, worst first, and every cluster's summary"),
        "/api/clusters": _get("every cluster's summary"),
        "/api/clusters/{cluster}": _get("a cluster's brokers, topics and problems", "cluster"),
        "/api/clusters/{cluster}/topics/{topic}": _get(
            "partitions, offsets, sizes, configs", "cluster", "topic"
        ),
        "/api/clusters/{cluster}/topics/{topic}/messages": _get(
            "records of one partition (query: partition, offset or time, limit, format text|json|hex)",
            "cluster",
            "topic",
            query=MESSAGES_QUERY,
        ),
        "/api/clusters/{cluster}/groups": _get("every group's state, lag and status", "cluster"),
        "/api/clusters/{cluster}/groups/{group}": _get(
            "a group's members, lag per partition with its Burrow status and rule, and lag history "
            "(query: range 1h|6h|1d|7d)",
            "cluster",
            "group",
            query=RANGE_QUERY,
        ),
        "/api/mirrors": _get(
            "every mirror's lag and rate, and the audit's completeness per topic and bucket"
        ),
        "/api/actions": _get("the action log, newest first"),
        "/metrics": _get("Prometheus text: lag, group status, broker and partition health, mirror lag"),
    },
}


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(OPENAPI)
