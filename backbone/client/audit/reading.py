"""Reading the audit topic back: every count message up to the topic's current end, for a report."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from backbone.client.audit.counts import DEFAULT_TOPIC, AuditCount


def read_audit_counts(
    bootstrap_servers: str,
    audit_topic: str = DEFAULT_TOPIC,
    timeout_s: float = 60.0,
    client_config: Mapping[str, Any] | None = None,
) -> tuple[list[AuditCount], int]:
    """Every count message in the audit topic up to its current end, and how many records were not audit
    messages (skipped). Raises LookupError when the topic does not exist. `client_config`: more consumer
    settings (security ones)."""
    from backbone.client import Consumer, TopicPartition  # the client imports this package

    with Consumer({**(client_config or {}), "bootstrap.servers": bootstrap_servers}) as consumer:
        if audit_topic not in consumer.topics():
            raise LookupError(audit_topic)
        partitions = [
            TopicPartition(audit_topic, p) for p in sorted(consumer.partitions_for_topic(audit_topic))
        ]
        # Sought as soon as assigned: the consumer starts fetching at once, and a fetch it began from the
        # default position (the end) would hold the sought one back for its whole long-poll wait.
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        messages: list[AuditCount] = []
        malformed = 0
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {audit_topic} did not reach its end within {timeout_s} s")
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    try:
                        messages.append(AuditCount.decode(record.value))
                    except ValueError:
                        malformed += 1
        return messages, malformed
