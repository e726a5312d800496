"""The Kafka wire protocol: framing, API messages, error codes and the record batch format."""

from __future__ import annotations

TopicPartition = tuple[str, int]
"""(topic, partition index): how the rooms below the client key a partition (the client has a named tuple)."""
