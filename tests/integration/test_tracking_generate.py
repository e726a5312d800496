"""`backbone generate` against a real broker and schema registry: every acknowledged event is in its topic
once, readable by Confluent's AvroDeserializer; traffic is skewed, the rising page rises, and the producer
tier's audit counts match what was acknowledged."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from registry_support import running_registry

from backbone.client import Consumer, TopicPartition
from backbone.client.audit import read_audit_counts
from backbone.tracking import schemas
from backbone.tracking.serde import AvroDecoder, RegistryClient, UndecodableError, schema_id_of

pytestmark = pytest.mark.integration


def read_topic(bootstrap: str, topic: str) -> list:
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        found = []
        for _ in range(2000):
            if all(consumer.position(tp) >= ends[tp] for tp in partitions):
                break
            for records in consumer.poll(timeout_ms=500).values():
                found.extend(records)
        return found


def test_generated_events_arrive_once_decodable_and_audited(broker, tmp_path):
    with running_registry(tmp_path, broker.bootstrap) as url:
        acked_log = tmp_path / "acked.jsonl"
        done = subprocess.run(
            [sys.executable, "-m", "backbone", "generate", "--bootstrap-server", broker.bootstrap,
             "--schema-registry", url, "--datacenter", "dc1", "--rate", "800", "--duration", "5",
             "--rising", "page-rising", "--rising-share", "0.5", "--pages", "50", "--members", "1000",
             "--seed", "7", "--audit-interval-ms", "500", "--acked-log", str(acked_log)],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "generate dc1 done" in done.stderr and "failed=0" in done.stderr
        acked = [json.loads(line) for line in acked_log.read_text().splitlines()]
        assert len(acked) >= 2000
        acked_ids = Counter((a["topic"], a["event_id"]) for a in acked)
        assert max(acked_ids.values()) == 1

        confluent = AvroDeserializer(SchemaRegistryClient({"url": url}))
        ours = AvroDecoder(RegistryClient(url))
        stored: Counter[tuple[str, str]] = Counter()
        page_views = []
        for topic in schemas.TOPICS:
            for record in read_topic(broker.bootstrap, topic):
                event = confluent(record.value, SerializationContext(topic, MessageField.VALUE))
                assert ours.decode(record.value)[1] == event
                header = event["header"]
                assert (
                    header["datacenter"] == "dc1"
                    and header["session_id"]
                    and header["server"].endswith(".dc1")
                )
                assert int(header["time"].timestamp() * 1000) == record.timestamp  # record time is event time
                stored[(topic, header["event_id"])] += 1
                if topic == "page_views":
                    page_views.append(header)
        assert stored == acked_ids  # every acknowledged event exactly once, nothing else

        # Skewed: the most viewed ordinary page gets far more than a uniform share; the rising page's share
        # is larger in the second half of the run than in the first.
        pages = Counter(h["page_key"] for h in page_views if h["page_key"] != "page-rising")
        assert pages.most_common(1)[0][1] > 5 * sum(pages.values()) / 50
        ordered = sorted(page_views, key=lambda h: h["time"])
        half = len(ordered) // 2

        def rising_share(headers: list) -> float:
            return sum(h["page_key"] == "page-rising" for h in headers) / len(headers)

        assert rising_share(ordered[half:]) > 2 * rising_share(ordered[:half])

        # The producer tier's audit counts match what was acknowledged, topic by topic.
        counts, _ = read_audit_counts(broker.bootstrap)
        audited = Counter()
        for count in {(c.process, c.sequence): c for c in counts if c.tier == "producer"}.values():
            audited[count.topic] += count.count  # a retried publish may repeat a message: counted once
        assert audited == Counter(a["topic"] for a in acked)

        with pytest.raises(UndecodableError):
            schema_id_of(b"plain text")
        with pytest.raises(UndecodableError):
            ours.decode(b"\x00\x00\x00\x03\xe7payload")  # schema id 999 does not exist
