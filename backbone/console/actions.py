"""Actions on clusters, for operators only: each is shown first (with its plan where it has one) and done
only once confirmed, then written to the action log with its result. They call the public Admin client's
methods, as the `backbone` command does."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from backbone.client import (
    AsyncAdmin,
    AsyncProducer,
    ConfigResource,
    ConfigResourceType,
    KafkaClientError,
    KafkaError,
    NewTopic,
    TopicPartition,
)
from backbone.client.admin.offset_reset import NothingToShiftError, ResetTarget, plan_reset
from backbone.console import auth, browse
from backbone.console.app import render, state
from backbone.console.pages import group_of, topic_of
from backbone.console.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
CONFIG_NAME = re.compile(r"^[a-z][a-z0-9.]{0,100}$")
MAX_PARTITIONS = 10_000
MAX_RECORD_BYTES = 512 * 1024
RESET_TARGETS = ("earliest", "latest", "offset", "time", "shift")


def routes(app: web.Application) -> None:
    base = "/clusters/{cluster}"
    app.router.add_post(f"{base}/topics", create_topic)
    app.router.add_post(f"{base}/topics/{{topic}}/configs", alter_config)
    app.router.add_post(f"{base}/topics/{{topic}}/partitions", add_partitions)
    app.router.add_post(f"{base}/topics/{{topic}}/delete", delete_topic)
    app.router.add_post(f"{base}/topics/{{topic}}/produce", produce)
    app.router.add_post(f"{base}/topics/{{topic}}/reassign", reassign)
    app.router.add_get(f"{base}/reassignments", reassignments_page)
    app.router.add_post(f"{base}/groups/{{group}}/reset", reset_offsets)
    app.router.add_post(f"{base}/elect", elect_leaders)


def bad(reason: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=reason)


def _int(form: Any, name: str, low: int, high: int, default: int | None = None) -> int:
    raw = str(form.get(name, "")).strip()
    if not raw and default is not None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad(f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise bad(f"{name} must be from {low} to {high}, got {value}")
    return value


async def _context(request: web.Request) -> tuple[ClusterSnapshot, Any]:
    auth.require_operator(request)
    snapshot = state(request).snapshot(request.match_info["cluster"])
    return snapshot, await request.post()


def _client_config(request: web.Request, cluster: str) -> dict[str, Any]:
    return state(request).config.client_config(cluster)


async def _with_admin(
    request: web.Request, cluster: str, work: Callable[[AsyncAdmin], Awaitable[Any]]
) -> Any:
    async with AsyncAdmin(_client_config(request, cluster), default_api_timeout_ms=15_000) as admin:
        return await work(admin)


async def _run(
    request: web.Request,
    snapshot: ClusterSnapshot,
    action: str,
    target: str,
    detail: str,
    work: Callable[[AsyncAdmin], Awaitable[Any]],
    back: str,
    describe: Callable[[Any], str] = lambda _: "done",
) -> web.Response:
    """Do the action, log it (who, when, what, result), and say how it went."""
    console = state(request)
    try:
        outcome = await _with_admin(request, snapshot.name, work)
        result, ok, status = f"ok: {describe(outcome)}", True, 200
    except (KafkaError, KafkaClientError, OSError, TimeoutError) as error:
        result, ok, status = _failure(error, snapshot.name)
    user = request[auth.USER]
    await asyncio.to_thread(console.history.log_action, user, snapshot.name, action, target, detail, result)
    log.info(
        "event=console_action user=%s cluster=%s action=%s target=%s ok=%s",
        user,
        snapshot.name,
        action,
        target,
        ok,
    )
    console.samplers[snapshot.name].wake()
    return _done(request, status, f"{action} {target}", result, ok, back)


def _failure(error: Exception, cluster: str) -> tuple[str, bool, int]:
    """An action's result line, success flag and HTTP status when it raised `error`: the cluster refused
    (a Kafka error, 400) or did not answer (503)."""
    if isinstance(error, KafkaError):
        return f"failed: {type(error).__name__}: {error}", False, 400
    return f"failed: cluster {cluster} did not answer: {error}", False, 503


def _done(request: web.Request, status: int, title: str, result: str, ok: bool, back: str) -> web.Response:
    """The page saying how a one-step action went."""
    return render(
        request,
        "done.html",
        status=status,
        title=title,
        result=result,
        ok=ok,
        back=back,
        progress=None,
        progress_header=None,
    )


def _confirm(
    request: web.Request,
    title: str,
    summary: str,
    button: str,
    fields: dict,
    back: str,
    plan: list | None = None,
    plan_header: list | None = None,
) -> web.Response:
    return render(
        request,
        "confirm.html",
        title=title,
        summary=summary,
        button=button,
        fields=fields,
        back=back,
        action=request.path,
        plan=plan,
        plan_header=plan_header,
    )


def _topic_url(cluster: str, topic: str) -> str:
    from urllib.parse import quote

    return f"/clusters/{quote(cluster, safe='')}/topics/{quote(topic, safe='')}"


# -- topics -------------------------------------------------------------------------------------------------


async def create_topic(request: web.Request) -> web.Response:
    snapshot, form = await _context(request)
    name = str(form.get("name", "")).strip()
    if not TOPIC_NAME.match(name) or name in (".", ".."):
        raise bad("a topic name is 1 to 249 letters, digits, '.', '_' or '-' (and not '.' or '..')")
    if name in snapshot.topics:
        raise bad(f"topic {name} already exists on {snapshot.name}")
    partitions = _int(form, "partitions", 1, MAX_PARTITIONS)
    up = max(1, len([b for b in snapshot.brokers.values() if b.up]))
    replication = _int(form, "replication_factor", 1, up)
    configs = {}
    if str(form.get("retention_ms", "")).strip():
        configs["retention.ms"] = str(_int(form, "retention_ms", -1, 2**62))
    fields = {
        "name": name,
        "partitions": partitions,
        "replication_factor": replication,
        "retention_ms": configs.get("retention.ms", ""),
    }
    back = f"/clusters/{snapshot.name}"
    if form.get("confirmed") != "yes":
        summary = (
            f"Create topic {name} on {snapshot.name} with {partitions} partitions, "
            f"{replication} replicas each" + (f", retention.ms {configs['retention.ms']}" if configs else "")
        )
        return _confirm(request, f"create topic {name}", summary, "Create", fields, back)
    new = NewTopic(name, partitions, replication, configs=configs)
    return await _run(
        request,
        snapshot,
        "create topic",
        name,
        str(fields),
        lambda a: a.create_topics([new]),
        _topic_url(snapshot.name, name),
    )


async def alter_config(request: web.Request) -> web.Response:
    snapshot, form = await _context(request)
    topic = topic_of(snapshot, request.match_info["topic"])
    name = str(form.get("name", "")).strip()
    if not CONFIG_NAME.match(name):
        raise bad(f"config name {name!r} is not a Kafka topic config name (such as retention.ms)")
    value: str | None = str(form.get("value", "")).strip() or None
    if value is not None and name.endswith((".ms", ".bytes")):
        value = str(_int(form, "value", -1, 2**62))
    entry = topic.configs.get(name)
    if entry is None and topic.configs:
        raise bad(f"topic {topic.name} has no config named {name}; the topic page lists them")
    back = _topic_url(snapshot.name, topic.name)
    current = entry.value if entry is not None else "?"
    what = f"{name}: {current} -> {value if value is not None else '(default)'}"
    if form.get("confirmed") != "yes":
        return _confirm(
            request,
            f"change a config of {topic.name}",
            f"On {snapshot.name}, set {what}",
            "Change",
            {"name": name, "value": value or ""},
            back,
        )
    resource = ConfigResource(ConfigResourceType.TOPIC, topic.name)
    return await _run(
        request,
        snapshot,
        "alter config",
        topic.name,
        what,
        lambda a: a.alter_configs({resource: {name: value}}),
        back,
    )


async def add_partitions(request: web.Request) -> web.Response:
    snapshot, form = await _context(request)
    topic = topic_of(snapshot, request.match_info["topic"])
    now = len(topic.partitions)
    if now >= MAX_PARTITIONS:
        raise bad(f"topic {topic.name} already has {now} partitions, the most the console adds to")
    count = _int(form, "count", now + 1, MAX_PARTITIONS)
    back = _topic_url(snapshot.name, topic.name)
    what = f"partitions {now} -> {count}"
    if form.get("confirmed") != "yes":
        return _confirm(
            request,
            f"add partitions to {topic.name}",
            f"On {snapshot.name}, grow {topic.name} from {now} to {count} partitions. Keys will map "
            "to other partitions than before.",
            "Add partitions",
            {"count": count},
            back,
        )
    return await _run(
        request,
        snapshot,
        "add partitions",
        topic.name,
        what,
        lambda a: a.create_partitions({topic.name: count}),
        back,
    )


async def delete_topic(request: web.Request) -> web.Response:
    snapshot, form = await _context(request)
    topic = topic_of(snapshot, request.match_info["topic"])
    if str(form.get("confirm", "")) != topic.name:
        raise bad(f"to delete the topic, type its name ({topic.name}) exactly into the confirmation field")
    return await _run(
        request,
        snapshot,
        "delete topic",
        topic.name,
        f"{topic.records:,} records retained",
        lambda a: a.delete_topics([topic.name]),
        f"/clusters/{snapshot.name}",
    )


async def produce(request: web.Request) -> web.Response:
    snapshot, form = await _context(request)
    topic = topic_of(snapshot, request.match_info["topic"])
    key = str(form.get("key", "")).encode() or None
    value = str(form.get("value", "")).encode()
    if len(value) + len(key or b"") > MAX_RECORD_BYTES:
        raise bad(f"a test record may hold at most {MAX_RECORD_BYTES} bytes of key and value")
    partition = None
    if str(form.get("partition", "")).strip():
        partition = _int(form, "partition", 0, len(topic.partitions) - 1)
    back = _topic_url(snapshot.name, topic.name)
    console = state(request)
    try:
        async with AsyncProducer(_client_config(request, snapshot.name), acks="all") as producer:
            sent = await (await producer.send(topic.name, value, key=key, partition=partition))
        result, ok, status = f"ok: partition {sent.partition} offset {sent.offset}", True, 200
    except (KafkaError, KafkaClientError, OSError, TimeoutError) as error:
        result, ok, status = _failure(error, snapshot.name)
    detail = f"key {browse.show_bytes(key, 'text')!r}, {len(value)} bytes of value"
    await asyncio.to_thread(
        console.history.log_action, request[auth.USER], snapshot.name, "produce", topic.name, detail, result
    )
    return _done(request, status, f"produce to {topic.name}", result, ok, back)


# -- replicas -----------------------------------------------------------------------------------------------


async def elect_leaders(request: web.Request) -> web.Response:
    snapshot, form = await _context(request)
    moved = [(t.name, p) for t, p in snapshot.partitions() if not p.leader_is_preferred and p.replicas]
    back = f"/clusters/{snapshot.name}"
    if form.get("confirmed") != "yes":
        plan = [[t, p.partition, p.leader, p.preferred_leader] for t, p in moved]
        summary = (
            (
                f"{len(moved)} partitions on {snapshot.name} are not led by their preferred replica; "
                "an election gives each back to it when it is in sync."
            )
            if moved
            else "Every partition is led by its preferred replica; an election would change nothing."
        )
        return _confirm(
            request,
            "elect preferred leaders",
            summary,
            "Elect",
            {},
            back,
            plan,
            ["topic", "partition", "leader now", "preferred leader"],
        )
    wanted = [TopicPartition(t, p.partition) for t, p in moved]

    def described(results: dict) -> str:
        done = sum(error is None for error in results.values())
        return f"{done} of {len(results)} partitions moved to their preferred leader"

    return await _run(
        request,
        snapshot,
        "elect preferred leaders",
        "all partitions",
        f"{len(wanted)} partitions",
        lambda a: a.elect_leaders("preferred", wanted) if wanted else _nothing(),
        back,
        described,
    )


async def _nothing() -> dict:
    return {}


async def reassign(request: web.Request) -> web.Response:
    snapshot, form = await _context(request)
    topic = topic_of(snapshot, request.match_info["topic"])
    partition = _int(form, "partition", 0, len(topic.partitions) - 1)
    try:
        replicas = [int(r) for r in str(form.get("replicas", "")).replace(" ", "").split(",") if r]
    except ValueError:
        raise bad("replicas must be broker ids separated by commas, such as 1,2,3") from None
    live = {b.id for b in snapshot.brokers.values() if b.up}
    if not replicas or len(set(replicas)) != len(replicas):
        raise bad("name each new replica's broker once, the preferred leader first (such as 1,2,3)")
    unknown = sorted(set(replicas) - live)
    if unknown:
        raise bad(
            f"brokers {', '.join(map(str, unknown))} are not live on {snapshot.name} (live: {sorted(live)})"
        )
    current = next(p for p in topic.partitions if p.partition == partition)
    if tuple(replicas) == current.replicas:
        raise bad(f"{topic.name} partition {partition} already has replicas {replicas}: nothing would move")
    back = f"/clusters/{snapshot.name}/reassignments"
    what = f"{topic.name}/{partition}: {list(current.replicas)} -> {replicas}"
    if form.get("confirmed") != "yes":
        plan = [[topic.name, partition, ",".join(map(str, current.replicas)), ",".join(map(str, replicas))]]
        return _confirm(
            request,
            f"reassign {topic.name} partition {partition}",
            "The new replicas copy the partition in the background; the progress page follows it.",
            "Reassign",
            {"partition": partition, "replicas": ",".join(map(str, replicas))},
            _topic_url(snapshot.name, topic.name),
            plan,
            ["topic", "partition", "replicas now", "new replicas"],
        )
    tp = TopicPartition(topic.name, partition)

    def described(results: dict) -> str:
        error = results.get(tp)
        if error is not None:
            raise error
        return f"started {what}"

    return await _run(
        request,
        snapshot,
        "reassign",
        f"{topic.name}/{partition}",
        what,
        lambda a: a.alter_partition_reassignments({tp: replicas}),
        back,
        described,
    )


async def reassignments_page(request: web.Request) -> web.Response:
    """Reassignments in progress with each new replica's copy against the leader's size."""
    snapshot = state(request).snapshot(request.match_info["cluster"])

    async def progress(admin: AsyncAdmin) -> list[list[Any]]:
        moving = await admin.list_partition_reassignments()
        live = sorted(b.id for b in snapshot.brokers.values() if b.up)
        dirs = await admin.describe_log_dirs(live) if moving and live else {}
        rows = []
        for tp, r in sorted(moving.items()):
            topic = snapshot.topics.get(tp.topic)
            state_ = (
                next((p for p in topic.partitions if p.partition == tp.partition), None) if topic else None
            )
            leader_size = dirs.get(state_.leader, {}).get(tp) if state_ else None
            for broker in r.adding:
                copy = dirs.get(broker, {}).get(tp)
                done = (
                    "-"
                    if copy is None or leader_size is None or not leader_size.size
                    else f"{min(100.0, copy.size * 100 / leader_size.size):.0f}%"
                )
                rows.append([tp.topic, tp.partition, ",".join(map(str, r.target)), broker, done])
        return rows

    try:
        rows = await _with_admin(request, snapshot.name, progress)
        result, ok = (f"{len(rows)} replicas being copied" if rows else "no reassignment in progress"), True
    except (KafkaError, KafkaClientError, OSError, TimeoutError) as error:
        rows, result, ok = [], f"cluster {snapshot.name} did not answer: {error}", False
    return render(
        request,
        "done.html",
        title=f"reassignments on {snapshot.name}",
        result=result,
        ok=ok,
        back=f"/clusters/{snapshot.name}",
        progress=rows,
        progress_header=["topic", "partition", "target replicas", "copying to broker", "copied"],
    )


# -- groups -------------------------------------------------------------------------------------------------


async def reset_offsets(request: web.Request) -> web.Response:
    snapshot, form = await _context(request)
    group = group_of(snapshot, request.match_info["group"])
    topic = topic_of(snapshot, str(form.get("topic", "")))
    to = str(form.get("to", ""))
    if to not in RESET_TARGETS:
        raise bad(f"reset target must be one of {', '.join(RESET_TARGETS)}")
    raw = str(form.get("value", "")).strip()
    if group.members:
        raise bad(
            f"group {group.group_id} has {len(group.members)} members: stop its consumers first, or their "
            "next commit undoes the reset"
        )
    value = 0
    if to in ("offset", "shift"):
        value = _int(form, "value", -(2**62) if to == "shift" else 0, 2**62)
    elif to == "time":
        try:
            value = browse.parse_time(raw)
        except browse.BadQuery as error:
            raise bad(str(error)) from None
    partitions = {TopicPartition(topic.name, p.partition): p for p in topic.partitions}
    committed = {
        TopicPartition(p.topic, p.partition): p.committed
        for p in group.partitions
        if p.topic == topic.name and p.committed is not None
    }
    by_time: dict[TopicPartition, int] = {}
    if to == "time":
        specs = dict.fromkeys(partitions, value)
        found = await _with_admin(request, snapshot.name, lambda a: a.list_offsets(specs))
        by_time = {tp: o.offset for tp, o in found.items()}
    target = ResetTarget("datetime" if to == "time" else to, value)
    try:
        planned = plan_reset(
            target,
            partitions,
            committed,
            {tp: p.start_offset or 0 for tp, p in partitions.items()},
            {tp: p.end_offset or 0 for tp, p in partitions.items()},
            by_time,
        )
    except NothingToShiftError as error:
        raise bad(
            f"partition {error.partitions[0].partition} has no committed offset to shift from: "
            "choose another target"
        ) from None
    plan = [[s.topic, s.partition, "-" if s.current is None else s.current, s.new] for s in planned]
    back = f"/clusters/{snapshot.name}/groups/{group.group_id}"
    what = "; ".join(f"{t}/{p}: {c} -> {n}" for t, p, c, n in plan)
    if form.get("confirmed") != "yes":
        return _confirm(
            request,
            f"reset the offsets of {group.group_id}",
            f"Commit these offsets for group {group.group_id} on {snapshot.name}:",
            "Reset offsets",
            {"topic": topic.name, "to": to, "value": raw},
            back,
            plan,
            ["topic", "partition", "committed now", "new offset"],
        )
    offsets = {TopicPartition(s.topic, s.partition): s.new for s in planned}
    return await _run(
        request,
        snapshot,
        "reset offsets",
        group.group_id,
        what,
        lambda a: a.alter_consumer_group_offsets(group.group_id, offsets),
        back,
    )
