"""A streaming query whose driver is killed (SIGKILL) and restarted several times while records keep
arriving ends with every record exactly once in its Parquet sink, and its consumer group's committed
offsets equal the checkpoint's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from spark_support import (
    checkpoint_offsets,
    create_topic,
    group_offsets,
    produce,
)

from backbone.dev.processes import BrokerProcess
from tests.helpers.names import unique_name

DRIVER = Path(__file__).with_name("stream_driver.py")
KILLS = 3


def committed_batches(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def start_driver(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as output:
        return subprocess.Popen(
            [sys.executable, str(DRIVER), *args],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=DRIVER.parent,
            start_new_session=True,  # the driver and its JVM form one group, killed together
        )


def kill_driver(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


@pytest.mark.timeout(900)
def test_killed_and_restarted_driver_loses_and_repeats_nothing(
    spark, live_broker: BrokerProcess, tmp_path, wait_for
):
    topic = unique_name("restart")
    create_topic(live_broker.bootstrap, topic, 2)
    group = f"spark-restart-{uuid.uuid4().hex[:6]}"
    out, checkpoint, log = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "driver.log"
    args = [live_broker.bootstrap, topic, group, str(out), str(checkpoint)]
    produced: list = []

    def produce_while_running(stop: threading.Event) -> None:  # bounded: at most 30 rounds of 40
        for _ in range(30):
            produced.extend(produce(live_broker.bootstrap, topic, 40, 2))
            if stop.wait(0.2):
                return

    for _ in range(KILLS):
        before = committed_batches(checkpoint)
        driver = start_driver(args, log)
        stop = threading.Event()
        producer = threading.Thread(target=produce_while_running, args=(stop,))
        producer.start()
        try:
            wait_for(
                lambda b=before, d=driver: committed_batches(checkpoint) > b or d.poll() is not None,
                240,
                what="a batch committed by the restarted driver",
            )
            assert driver.poll() is None, log.read_text()[-3000:]
        finally:
            kill_driver(driver)  # while records keep arriving
            stop.set()
            producer.join()
    produced.extend(produce(live_broker.bootstrap, topic, 100, 2))

    final = start_driver([*args, "--available-now"], log)
    try:
        assert final.wait(300) == 0, log.read_text()[-3000:]
    finally:
        kill_driver(final)

    rows = spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in rows)
    assert len(got) == len(set(got)), "a record appears twice"
    assert got == sorted((r.partition, r.offset, r.value) for r in produced)
    ends = checkpoint_offsets(checkpoint)
    assert ends == {topic: {"0": len(produced) // 2, "1": len(produced) // 2}}
    wait_for(
        lambda: group_offsets(live_broker.bootstrap, group) == ends, 30, what="the group at the checkpoint"
    )
