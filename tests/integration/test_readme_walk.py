"""A newcomer's walk through the README, in order, on a machine whose usual ports are taken: `dev up` says so
and picks others, `backbone` commands run from the checkout find the topology by themselves, kcat uses the
address `dev up` printed, and the audit chain `dev up` runs makes the report 100.000% after a produce, then
names the bucket when a record is deleted from the aggregate before its counter saw it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from backbone.client import Admin, TopicPartition
from backbone.dev.topology import process_alive
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
USUAL_PORTS = [2181, 9092, 9093, 9094, 9192, 9193, 9194, 9292, 9293, 9294, 9400, 9401]
# "A first walk", as the README spells it (the test swaps 127.0.0.1:9092 for the address dev up chose).
WALK = [
    "backbone topics create pageviews --partitions 3 --config retention.ms=86400000",
    'echo "hello" | kcat -P -b 127.0.0.1:9092 -t pageviews',
    "kcat -C -b 127.0.0.1:9092 -t pageviews -o beginning -e",
    "printf 'alice:/home\\nbob:/cart\\n' | backbone produce pageviews --key-separator : --header source=web",
    "backbone consume pageviews --from-beginning --max-messages 3 --format '%p/%o %k %s %h\\n'",
    "backbone consume pageviews --group etl --from-beginning --max-messages 3",
    "backbone groups describe --group etl",
    "backbone topics describe pageviews",
    "backbone audit report",
]


@contextmanager
def usual_ports_taken() -> Iterator[None]:
    """Listen on every usual port that is free (one already in use is taken anyway)."""
    with ExitStack() as stack:
        for port in USUAL_PORTS:
            sock = stack.enter_context(socket.socket())
            # As the brokers bind: a port whose earlier connections linger in TIME_WAIT is free to listen on.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
                sock.listen()
            except OSError:
                continue
        yield


def shell(command: str, cwd: Path, dc1: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run a README line as a user's shell would, `backbone` being this interpreter's."""
    line = command.replace("127.0.0.1:9092", dc1)
    line = re.sub(r"(^|\| )backbone ", rf"\1{sys.executable} -m backbone ", line)
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_readme_walk_works_in_order_with_the_usual_ports_taken(tmp_path: Path) -> None:
    text = README.read_text()
    positions = [text.find(command) for command in WALK]
    assert -1 not in positions, f"not in README: {WALK[positions.index(-1)]}"
    assert positions == sorted(positions), "the README lists the walk in this order"

    env = {k: v for k, v in os.environ.items() if k != "BACKBONE_BOOTSTRAP"}
    checkout = tmp_path / "checkout"  # where a user runs commands; dev up keeps var/dev here
    checkout.mkdir()
    backbone = [sys.executable, "-m", "backbone"]
    try:
        with usual_ports_taken():
            # Two at once, as two `ops/start` typed in two terminals: the second waits for the first.
            both = [
                subprocess.Popen(
                    [*backbone, "dev", "up", "--brokers", "1"],
                    cwd=checkout,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                )
                for _ in range(2)
            ]
            outputs = [process.communicate(timeout=300) for process in both]
        assert [process.returncode for process in both] == [0, 0], outputs
        waited = [i for i, (out, _) in enumerate(outputs) if "nothing was started" in out]
        assert len(waited) == 1, outputs
        assert "another `backbone dev up`" in outputs[waited[0]][0]
        up = subprocess.CompletedProcess([], 0, *outputs[1 - waited[0]])
        assert "*** The usual ports were busy" in up.stderr
        topology = json.loads((checkout / "var/dev/topology.json").read_text())
        dc1 = topology["clusters"]["dc1"]["bootstrap"]
        aggregate = topology["clusters"]["aggregate"]["bootstrap"]
        assert f"kcat -P -b {dc1} -t pageviews" in up.stdout, "the examples name the chosen address"
        assert dc1 != "127.0.0.1:9092"

        done = [shell(command, checkout, dc1) for command in WALK[:-1]]
        for command, result in zip(WALK, done, strict=False):
            assert result.returncode == 0, f"{command}: {result.stderr}"
        kcat_out, consumed, grouped, described = (
            done[2].stdout,
            done[4].stdout,
            done[6].stdout,
            done[7].stdout,
        )
        assert kcat_out == "hello\n"
        assert "alice /home source=web" in consumed and "bob /cart source=web" in consumed
        assert re.search(r"etl\s+pageviews", grouped) and " 0 " in grouped.replace("\t", " ")
        assert "pageviews" in described

        def report() -> subprocess.CompletedProcess[str]:
            return shell(WALK[-1], checkout, dc1)

        wait_until(lambda: report().returncode == 0, timeout=90, interval=1.0, what="a complete audit report")
        complete = report().stdout
        assert (
            "completeness of aggregate against dc1+dc2: 100.000% (3 of 3 records); verdict: complete"
            in complete
        )

        # A record the aggregate loses before its counter reads it is named by its bucket.
        auditor = next(a for a in topology["auditors"] if a["tier"] == "aggregate")
        os.kill(auditor["pid"], signal.SIGTERM)  # it commits what it counted, then stops
        wait_until(
            lambda: not process_alive(auditor["pid"], auditor["marker"]), timeout=60, what="counter stopped"
        )
        tp = TopicPartition("pageviews", 0)
        with Admin(bootstrap_servers=aggregate) as admin:
            before = admin.list_offsets({tp: "latest"})[tp].offset
            lost = shell("echo lost | backbone produce pageviews --partition 0", checkout, dc1)
            assert lost.returncode == 0, lost.stderr

            def copied() -> bool:
                return admin.list_offsets({tp: "latest"})[tp].offset > before

            wait_until(copied, timeout=60, what="the mirror copied the record")
            end = admin.list_offsets({tp: "latest"})[tp].offset
            admin.delete_records({tp: end})
        again = subprocess.run(
            [*backbone, "dev", "up", "--brokers", "1"], cwd=checkout, capture_output=True, text=True,
            timeout=120, check=False, env=env,
        )  # fmt: skip
        assert again.returncode == 0 and "restarting audit count aggregate" in again.stdout, again.stderr
        wait_until(lambda: report().returncode == 1, timeout=90, interval=1.0, what="the report names a loss")
        incomplete = report().stdout
        # One of the four records is gone; its bucket is named (the walk may cross a 10-minute bucket's edge,
        # so the bucket's own count is 1 to 4).
        assert "75.000% (3 of 4 records); verdict: incomplete" in incomplete, incomplete
        assert re.search(r"missing: pageviews bucket \S+: 1 of [1-4] records", incomplete), incomplete

        status = subprocess.run(
            [*backbone, "dev", "status"],
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert status.returncode == 0 and "audit count dc2" in status.stdout
    finally:
        down = subprocess.run(
            [*backbone, "dev", "down"], cwd=checkout, capture_output=True, text=True, timeout=300, check=False
        )
        assert down.returncode == 0, down.stderr
