"""`backbone dev up|down|status`: a local multi-datacenter backbone on one machine.

One real ZooKeeper serves every cluster, each under its own chroot (`/dc1`, `/dc2`, `/aggregate`); each
cluster has N broker processes, and a mirror process copies each datacenter cluster into `aggregate` (see
backbone/dev/mirrors.py). Everything runs detached in the background, and `topology.json` in the
directory records, for each cluster, its bootstrap servers and ZooKeeper connect string, for each mirror
its source, target and metrics port, and for every process its pid and the exact command that starts it
again. `up` is idempotent: what is recorded and
still running is kept, what died is started again with its recorded command. `up --secure` starts the same
topology with SASL_SSL listeners and ACLs on (backbone/dev/secure.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backbone.coordination import ZooKeeperServer, find_free_port, port_is_free
from backbone.dev import auditors, console, mirrors, registry
from backbone.dev import secure as dev_secure
from backbone.dev.processes import BrokerProcess, spawn, start_until_line, stop_child, wait_listening

log = logging.getLogger(__name__)

DEFAULT_DIR = Path("var/dev")
DEFAULT_CLUSTERS = ("dc1", "dc2", "aggregate")
TOPOLOGY_FILE = "topology.json"
PREFERRED_ZOOKEEPER_PORT = 2181
# dc1 brokers listen from 9092, the next cluster from 9192, and so on, when those ports are free.
FIRST_BROKER_PORT = 9092
PORTS_PER_CLUSTER = 100
HOST = "127.0.0.1"


class PortPlan:
    """The ports of a new topology: the preferred ones (9092.., 2181, 9400..) where free, else any free one;
    `preferred=False` takes any free port throughout (tests running side by side)."""

    def __init__(self, preferred: bool = True) -> None:
        self.preferred = preferred
        self.taken: set[int] = set()

    def any(self) -> int:
        """A free port not handed out yet."""
        port = find_free_port(HOST)
        while port in self.taken:
            port = find_free_port(HOST)
        self.taken.add(port)
        return port

    def pick(self, wanted: int) -> int:
        usable = self.preferred and wanted not in self.taken and port_is_free(HOST, wanted)
        port = wanted if usable else find_free_port(HOST)
        self.taken.add(port)
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
    restarted: int | None = None
    """How many recorded processes `up` started again; None when it started a new topology."""

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

    @property
    def mirrors(self) -> list[dict[str, Any]]:
        return self.data.setdefault("mirrors", [])

    @property
    def auditors(self) -> list[dict[str, Any]]:
        return self.data.setdefault("auditors", [])

    def processes(self) -> list[dict[str, Any]]:
        """Every recorded process in stopping order: audit counters and mirrors (they read and write the
        clusters), brokers, then ZooKeeper. Starting goes the other way."""
        found = [b for cluster in self.data["clusters"].values() for b in cluster["brokers"]]
        watching = [self.data["console"]] if "console" in self.data else []  # it only reads: stopped first
        generators = self.data.get("generators", [])  # before the counters, so they count every record
        schema_registry = [self.data["schema_registry"]] if "schema_registry" in self.data else []
        return [
            *watching,
            *generators,
            *self.auditors,
            *self.mirrors,
            *schema_registry,
            *found,
            self.data["zookeeper"],
        ]


LOCK_FILE = "up.lock"
LOCK_WAIT_S = 600.0


@contextlib.contextmanager
def _only_one_up(directory: Path, progress: Callable[[str], None]) -> Iterator[None]:
    """One `up` at a time per directory: a second one waits for the first, then finds its topology."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOCK_FILE, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            progress(f"another `backbone dev up` (pid {holder}) is starting {directory}: waiting for it")
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ValueError(
                            f"another `backbone dev up` (pid {holder}) has held {directory} for "
                            f"{LOCK_WAIT_S:.0f} s; stop it or use another --dir"
                        ) from None
                    time.sleep(0.2)
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def up(
    directory: Path = DEFAULT_DIR,
    clusters: tuple[str, ...] = DEFAULT_CLUSTERS,
    brokers: int = 3,
    progress: Callable[[str], None] = print,
    preferred_ports: bool = True,
    console_interval_ms: int = console.DEFAULT_INTERVAL_MS,
    generate_rate: float = 0.0,
    secure: bool = False,
) -> DevTopology:
    directory = directory.resolve()
    with _only_one_up(directory, progress):
        return _up(
            directory,
            clusters,
            brokers,
            progress,
            preferred_ports,
            console_interval_ms,
            generate_rate,
            secure,
        )


def _up(
    directory: Path,
    clusters: tuple[str, ...],
    brokers: int,
    progress: Callable[[str], None],
    preferred_ports: bool,
    console_interval_ms: int,
    generate_rate: float,
    secure: bool,
) -> DevTopology:
    existing = DevTopology.load(directory)
    if existing is not None:
        wanted = set(clusters)
        if (
            set(existing.data["clusters"]) != wanted
            or any(len(c["brokers"]) != brokers for c in existing.data["clusters"].values())
            or bool(existing.data.get("secure")) != secure
        ):
            raise ValueError(
                f"{directory} already holds a different topology ({', '.join(existing.data['clusters'])}"
                f"{', secure' if existing.data.get('secure') else ''}); "
                f"run `backbone dev down --dir {directory} --purge` first or choose another --dir"
            )
        return _restart_dead(existing, progress)
    ports = PortPlan(preferred_ports)
    zk_port = ports.pick(PREFERRED_ZOOKEEPER_PORT)
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
        "mirrors": [],
    }
    topology = DevTopology(directory, data)
    started: list[BrokerProcess] = []
    started_mirrors: list[subprocess.Popen[bytes]] = []
    try:
        security = None
        if secure:
            progress(f"making the CA, certificates and passwords in {directory / dev_secure.SECURE_DIR}/")
            security = dev_secure.prepare(directory)
            data["secure"] = True
        for index, name in enumerate(clusters):
            data["clusters"][name] = _start_cluster(
                directory, name, index, brokers, zookeeper.connect_string, ports, started, progress, security
            )
            topology.save()
        for index, (source, target) in enumerate(mirrors.routes(clusters)):
            metrics_port = ports.pick(mirrors.FIRST_METRICS_PORT + index)
            progress(f"starting mirror {source} -> {target} (metrics on {HOST}:{metrics_port})")
            entry = mirrors.start(
                directory, source, target, data["clusters"], metrics_port, HOST, started_mirrors, security
            )
            topology.mirrors.append(entry)
            topology.save()
        if mirrors.AGGREGATE in clusters:  # the registry keeps its schemas in the aggregate cluster
            port = ports.pick(registry.PREFERRED_PORT)
            progress(f"starting the schema registry on http://{HOST}:{port}")
            bootstrap = data["clusters"][mirrors.AGGREGATE]["bootstrap"]
            data["schema_registry"] = registry.start(
                directory, bootstrap, HOST, port, started_mirrors, security
            )
            topology.save()
            for name in clusters if generate_rate > 0 else ():
                if name != mirrors.AGGREGATE:
                    progress(f"starting the traffic generator of {name} ({generate_rate:g} events/s)")
                    url = data["schema_registry"]["url"]
                    entry = registry.start_generator(
                        directory,
                        name,
                        data["clusters"],
                        url,
                        mirrors.AGGREGATE,
                        generate_rate,
                        started_mirrors,
                        security,
                    )
                    data.setdefault("generators", []).append(entry)
                    topology.save()
        for tier in auditors.tiers(clusters):
            progress(f"starting audit count {tier}")
            topology.auditors.append(
                auditors.start(directory, tier, data["clusters"], started_mirrors, security)
            )
            topology.save()
        console_port = ports.pick(console.PREFERRED_PORT)
        progress(f"starting the console on http://{HOST}:{console_port}/")
        data["console"] = console.start(
            directory,
            data["clusters"],
            topology.mirrors,
            console_port,
            HOST,
            console_interval_ms,
            started_mirrors,
            security,
        )
        topology.save()
    except BaseException:
        # Leave nothing running and nothing recorded behind a failed start: the next `up` starts afresh
        # rather than restarting half a topology.
        for mirror in started_mirrors:
            stop_child(mirror, timeout=15)
        for process in started:
            process.stop(timeout=15)
        zookeeper.stop()
        topology.path.unlink(missing_ok=True)
        raise
    topology.save()
    return topology


def _start_cluster(
    directory: Path,
    name: str,
    index: int,
    brokers: int,
    zookeeper_connect: str,
    ports: PortPlan,
    started: list[BrokerProcess],
    progress: Callable[[str], None],
    security: dev_secure.DevSecurity | None = None,
) -> dict[str, Any]:
    connect = f"{zookeeper_connect}/{name}"
    if security is not None:  # the brokers' own login must exist before they authenticate to each other
        dev_secure.add_users(connect, security)
        dev_secure.private_directory(directory / name)  # the brokers' properties hold their password
    members = []
    for broker_number in range(brokers):
        broker_id = broker_number + 1
        port = ports.pick(FIRST_BROKER_PORT + index * PORTS_PER_CLUSTER + broker_number)
        metrics_port = ports.any()
        properties = {"cluster.name": name, "metrics.port": metrics_port, **cluster_defaults(brokers)}
        if security is not None:
            properties.update(security.broker_properties(HOST, port))
        process = BrokerProcess(
            broker_id, connect, directory / name / f"broker-{broker_id}", port=port, properties=properties
        )
        progress(f"starting {name} broker {broker_id} on {process.bootstrap}")
        started.append(process)
        process.start(timeout=60, detach=True)
        members.append(
            {
                "id": broker_id,
                "host": HOST,
                "port": port,
                "metrics_port": metrics_port,
                "pid": process.pid,
                "start": process.command,
                "marker": str(process.config_file),
                "output": str(process.output_file),
            }
        )
    bootstrap = ",".join(f"{m['host']}:{m['port']}" for m in members)
    entry: dict[str, Any] = {"bootstrap": bootstrap, "zookeeper": connect, "brokers": members}
    if security is not None:
        entry["security"] = security.cluster_entry(bootstrap)
    return entry


def cluster_defaults(brokers: int) -> dict[str, str]:
    """Replication defaults for a cluster of `brokers`: three copies and two in sync when it can hold them."""
    replication = min(3, brokers)
    return {
        "default.replication.factor": str(replication),
        "min.insync.replicas": str(2 if replication >= 3 else 1),
        "offsets.topic.replication.factor": str(replication),
    }


def _restart_dead(topology: DevTopology, progress: Callable[[str], None]) -> DevTopology:
    topology.restarted = 0
    for entry in reversed(topology.processes()):  # ZooKeeper, brokers, then the mirrors that use them
        if process_alive(entry.get("pid"), entry["marker"]):
            continue
        topology.restarted += 1
        what = _describe(entry)
        progress(f"restarting {what}")
        if entry.get("ready"):  # a mirror says when it is ready: a port could still answer for the dead one
            process = start_until_line(
                entry["start"], entry["output"], entry["ready"], what, timeout=60, cwd=entry.get("cwd")
            )
            entry["pid"] = process.pid
        else:  # ZooKeeper and brokers are ready when their port answers
            process = spawn(entry["start"], entry.get("output"), cwd=entry.get("cwd"))
            entry["pid"] = process.pid
            topology.save()  # record the pid at once: a later failure must not hide a running process
            wait_listening(
                entry.get("host", HOST), entry["port"], what, process=process, output_file=entry.get("output")
            )
        topology.save()
    topology.save()
    return topology


def _describe(entry: dict[str, Any]) -> str:
    # A broker's marker is DIR/<cluster>/broker-<id>/broker-<id>.properties.
    return entry.get("name") or f"{Path(entry['marker']).parent.parent.name} broker {entry['id']}"


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
        if pid is None or not process_alive(pid, entry["marker"]):
            continue
        progress(f"stopping {_describe(entry)} (pid {pid})")
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
                    f"{name} broker {broker['id']} {broker['host']}:{broker['port']} "
                    f"metrics {broker['host']}:{broker.get('metrics_port', '-')}",
                    broker["pid"],
                    process_alive(broker["pid"], broker["marker"]),
                )
            )
    for mirror in topology.mirrors:
        rows.append(
            (
                f"{mirror['name']} group {mirror['group']} metrics {mirror['host']}:{mirror['metrics_port']}",
                mirror["pid"],
                process_alive(mirror["pid"], mirror["marker"]),
            )
        )
    if "console" in topology.data:
        entry = topology.data["console"]
        rows.append((f"console {entry['url']}", entry["pid"], process_alive(entry["pid"], entry["marker"])))
    for auditor in topology.auditors:
        rows.append((auditor["name"], auditor["pid"], process_alive(auditor["pid"], auditor["marker"])))
    for entry in topology.data.get("generators", []):
        rows.append((entry["name"], entry["pid"], process_alive(entry["pid"], entry["marker"])))
    if "schema_registry" in topology.data:
        entry = topology.data["schema_registry"]
        rows.append(
            (f"schema registry {entry['url']}", entry["pid"], process_alive(entry["pid"], entry["marker"]))
        )
    zk = topology.data["zookeeper"]
    rows.append((f"zookeeper {zk['connect']}", zk["pid"], process_alive(zk["pid"], zk["marker"])))
    return rows
