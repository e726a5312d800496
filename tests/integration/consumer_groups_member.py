"""A group member run as its own process by test_consumer_groups.py, so a test can kill it with SIGKILL.

    python consumer_groups_member.py BOOTSTRAP GROUP TOPIC OUTPUT

At-least-once: each polled batch is processed (its values appended to OUTPUT, one JSON line per batch,
flushed) and only then committed. Lines: {"assigned": [...]} after each assignment, {"values": [...]} per
batch, {"committed": {...}} after each commit.
"""

from __future__ import annotations

import json
import sys

from backbone.client import Consumer, ConsumerRebalanceListener


def main(bootstrap: str, group: str, topic: str, output_path: str) -> None:
    with open(output_path, "a", encoding="utf-8") as output:

        def emit(entry: dict) -> None:
            output.write(json.dumps(entry) + "\n")
            output.flush()

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned):
                emit({"assigned": sorted(p.partition for p in assigned)})

        consumer = Consumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
            max_poll_records=20,
        )
        consumer.subscribe([topic], listener=Listener())
        while True:
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                continue
            emit({"values": [r.value.decode() for records in batch.values() for r in records]})
            consumer.commit()
            emit({"committed": {str(tp.partition): consumer.committed(tp).offset for tp in batch}})


if __name__ == "__main__":
    main(*sys.argv[1:5])
