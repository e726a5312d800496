"""`backbone dev up|down|status`: a local multi-datacenter backbone on one machine.

One real ZooKeeper serves every cluster, each under its own chroot (`/dc1`, `/dc2`, `/aggregate`); each
cluster has N broker processes. Everything runs detached in the background, and `topology.json` in the
directory records, for each cluster, its bootstrap servers and ZooKeeper connect string and, for every
process, its pid and the exact command that starts it again. `up` is idempotent: what is recorded and
still running is kept, what died is started again with its recorded command.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backbone.coordination import ZooKeeperServer, find_free_port, port_is_free
from backbone.dev.processes import BrokerProcess

log = logging.getLogger(__name__)

DEFAULT_DIR = Path("var/dev")
DEFAULT_CLUSTERS = ("dc1", "dc2", "aggregate")
TOPOLOGY_FILE = "topology.json"
PREFERRED_ZOOKEEPER_PORT = 2181
# dc1 brokers listen from 9092, the next cluster from 9192, and so on, when those ports are free.
FIRST_BROKER_PORT = 9092
PORTS_PER_CLUSTER = 100
HOST = "127.0.0.1"


def pick_port(preferred: int, taken: set[int]) -> int:
    port = preferred if preferred not in taken and port_is_free(HOST, preferred) else find_free_port(HOST)
    taken.add(port)
    return port


def process_alive(pid: int | None, marker: str) -> bool:
    """Whether `pid` runs and is still the process we started (its command line contains `marker`)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


@dataclass
class DevTopology:
    directory: Path
    data: dict[str, Any]

    @property
    def path(self) -> Path:
        return self.directory / TOPOLOGY_FILE

    @classmethod
    def load(cls, directory: Path) -> DevTopology | None:
        path = directory / TOPOLOGY_FILE
        if not path.exists():
            return None
        return cls(directory, json.loads(path.read_text(encoding="utf-8")))

    def save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def processes(self) -> list[dict[str, Any]]:
        """Every recorded process, brokers first (they stop before ZooKeeper)."""
        found = [b for cluster in self.data["clusters"].values() for b in cluster["brokers"]]
        return [*found, self.data["zookeeper"]]


def up(
    directory: Path = DEFAULT_DIR,
    clusters: tuple[str, ...] = DEFAULT_CLUSTERS,
    brokers: int = 3,
    progress: Callable[[str], None] = print,
) -> DevTopology:
    directory = directory.resolve()
    existing = DevTopology.load(directory)
    if existing is not None:
        wanted = set(clusters)
        if set(existing.data["clusters"]) != wanted or any(
            len(c["brokers"]) != brokers for c in existing.data["clusters"].values()
        ):
            raise ValueError(
                f"{directory} already holds a different topology ({', '.join(existing.data['clusters'])}); "
                f"run `backbone dev down --dir {directory} --purge` first or choose another --dir"
            )
        return _restart_dead(existing, progress)
    taken: set[int] = set()
    zk_port = pick_port(PREFERRED_ZOOKEEPER_PORT, taken)
    zookeeper = ZooKeeperServer(directory / "zookeeper", zk_port)
    progress(f"starting ZooKeeper on {HOST}:{zk_port}")
    zookeeper.start(timeout=60)
    data: dict[str, Any] = {
        "directory": str(directory),
        "zookeeper": {
            "name": "zookeeper",
            "connect": zookeeper.connect_string,
            "port": zk_port,
            "pid": zookeeper.pid,
            "start": zookeeper.command,
            "cwd": str(directory / "zookeeper"),
            "marker": str(directory / "zookeeper"),
        },
        "clusters": {},
    }
    topology = DevTopology(directory, data)
    started: list[BrokerProcess] = []
    try:
        for index, name in enumerate(clusters):
            data["clusters"][name] = _start_cluster(
                directory, name, index, brokers, zookeeper.connect_string, taken, started, progress
            )
            topology.save()
    except BaseException:
        # Leave nothing running behind a failed start: the user would have no topology.json to stop it with.
        for process in started:
            process.stop(timeout=15)
        zookeeper.stop()
        raise
    topology.save()
    return topology


def _start_cluster(
    directory: Path,
    name: str,
    index: int,
    brokers: int,
    zookeeper_connect: str,
    taken: set[int],
    started: list[BrokerProcess],
    progress: Callable[[str], None],
) -> dict[str, Any]:
    connect = f"{zookeeper_connect}/{name}"
    members = []
    for broker_number in range(brokers):
        broker_id = broker_number + 1
        port = pick_port(FIRST_BROKER_PORT + index * PORTS_PER_CLUSTER + broker_number, taken)
        process = BrokerProcess(
            broker_id,
            connect,
            directory / name / f"broker-{broker_id}",
            port=port,
            properties={"cluster.name": name, **cluster_defaults(brokers)},
        )
        progress(f"starting {name} broker {broker_id} on {process.bootstrap}")
        started.append(process)
        process.start(timeout=60, detach=True)
        members.append(
            {
                "id": broker_id,
                "host": HOST,
                "port": port,
                "pid": process.pid,
                "start": process.command,
                "marker": str(process.config_file),
                "output": str(process.output_file),
            }
        )
    return {
        "bootstrap": ",".join(f"{m['host']}:{m['port']}" for m in members),
        "zookeeper": connect,
        "brokers": members,
    }


def cluster_defaults(brokers: int) -> dict[str, str]:
    """Replication defaults for a cluster of `brokers`: three copies and two in sync when it can hold them."""
    replication = min(3, brokers)
    return {
        "default.replication.factor": str(replication),
        "min.insync.replicas": str(2 if replication >= 3 else 1),
        "offsets.topic.replication.factor": str(replication),
    }


def _restart_dead(topology: DevTopology, progress: Callable[[str], None]) -> DevTopology:
    for entry in topology.processes():
        if process_alive(entry.get("pid"), entry["marker"]):
            continue
        what = entry.get("name") or f"broker {entry['id']} ({entry['marker']})"
        progress(f"restarting {what}")
        output = open(entry.get("output") or os.devnull, "ab")  # noqa: SIM115 - handed to the child
        with output:
            process = subprocess.Popen(
                entry["start"],
                cwd=entry.get("cwd"),
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        entry["pid"] = process.pid
        _wait_listening(entry.get("host", HOST), entry["port"], what)
    topology.save()
    return topology


def _wait_listening(host: str, port: int, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.settimeout(1.0)
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what} is not listening on {host}:{port} after {timeout:.0f}s")


def down(
    directory: Path = DEFAULT_DIR, progress: Callable[[str], None] = print, timeout: float = 30.0
) -> int:
    """Stop every recorded process (SIGTERM, then SIGKILL after `timeout`); return how many were running."""
    topology = DevTopology.load(directory.resolve())
    if topology is None:
        return 0
    stopped = 0
    for entry in topology.processes():
        pid = entry.get("pid")
        if not process_alive(pid, entry["marker"]):
            continue
        what = entry.get("name") or f"broker {entry['id']}"
        progress(f"stopping {what} (pid {pid})")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while process_alive(pid, entry["marker"]) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.05)
        if process_alive(pid, entry["marker"]):
            os.kill(pid, signal.SIGKILL)
        _reap(pid)
        entry["pid"] = None
        stopped += 1
    topology.save()
    return stopped


def _reap(pid: int) -> None:
    # A process started by an earlier `up` is not our child: init reaps it.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def status(directory: Path = DEFAULT_DIR) -> list[tuple[str, int | None, bool]]:
    topology = DevTopology.load(directory.resolve())
    if topology is None:
        return []
    rows = []
    for name, cluster in topology.data["clusters"].items():
        for broker in cluster["brokers"]:
            rows.append(
                (
                    f"{name} broker {broker['id']} {broker['host']}:{broker['port']}",
                    broker["pid"],
                    process_alive(broker["pid"], broker["marker"]),
                )
            )
    zk = topology.data["zookeeper"]
    rows.append((f"zookeeper {zk['connect']}", zk["pid"], process_alive(zk["pid"], zk["marker"])))
    return rows
