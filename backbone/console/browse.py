"""The message browser: a page of records from one partition, from an offset or a time, read with a
short-lived Consumer (no group) and shown as text, pretty JSON or hex, never as HTML."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from backbone.client import AsyncConsumer, TopicPartition

FORMATS = ("text", "json", "hex")
MAX_LIMIT = 200
READ_TIMEOUT_S = 5.0


class BadQuery(ValueError):
    """A browse parameter is wrong; the message says which and what it should be."""


@dataclass(frozen=True)
class Shown:
    key: str | None
    value: str | None
    headers: list[tuple[str, str]]


@dataclass(frozen=True)
class Row:
    offset: int
    timestamp_ms: int
    shown: Shown


def parse_time(text: str) -> int:
    """Epoch milliseconds, or ISO 8601 (UTC when no zone is given)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadQuery(
            f"time {text!r} is neither epoch milliseconds nor ISO 8601 (2024-05-01T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def show_bytes(data: bytes | None, fmt: str) -> str | None:
    if data is None:
        return None
    if fmt == "hex":
        return data.hex(" ")
    text = data.decode("utf-8", errors="replace")
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


async def read_page(
    client: Mapping[str, Any],
    topic: str,
    partition: int,
    offset: int | None,
    time_ms: int | None,
    limit: int,
    fmt: str,
) -> tuple[list[Row], int]:
    """Up to `limit` records from `offset` (or the first at or after `time_ms`), and the partition's end;
    `client`: the cluster's client settings (bootstrap servers, security)."""
    tp = TopicPartition(topic, partition)
    consumer = AsyncConsumer(
        dict(client),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        default_api_timeout_ms=int(READ_TIMEOUT_S * 1000),
        client_id="backbone-console-browser",
    )
    try:
        await consumer.start()
        consumer.assign([tp])
        start, end = (await consumer.beginning_offsets([tp]))[tp], (await consumer.end_offsets([tp]))[tp]
        if time_ms is not None:
            found = (await consumer.offsets_for_times({tp: time_ms}))[tp]
            offset = found.offset if found is not None else end
        first = min(max(offset if offset is not None else start, start), end)
        if first >= end:
            return [], end
        consumer.seek(tp, first)
        rows: list[Row] = []
        deadline = asyncio.get_running_loop().time() + READ_TIMEOUT_S
        while len(rows) < limit and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.poll(timeout_ms=500, max_records=limit - len(rows))
            for record in batch.get(tp, []):
                rows.append(
                    Row(
                        record.offset,
                        record.timestamp,
                        Shown(
                            show_bytes(record.key, "hex" if fmt == "hex" else "text"),
                            show_bytes(record.value, fmt),
                            [(k, show_bytes(v, "text") or "") for k, v in record.headers],
                        ),
                    )
                )
            if rows and rows[-1].offset >= end - 1:
                break
        return rows[:limit], end
    finally:
        await consumer.close()
