"""The docker compose topology of docker/compose.yml under test, driven from the host.

`ComposeTopology` brings the topology up under a compose project name of its own (so it never meets
another run's containers), with free host ports for the brokers' published listeners, waits until every
container with a health check is healthy, and removes every container, network and volume of its project
when closed. `Traffic` produces numbered records (acks=all, audited) in the background while a test breaks
something, bounded in count and time, and remembers where each acknowledged record landed.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import docker
import docker.errors
import pytest
import requests

from backbone.client import Consumer, KafkaClientError, Producer, TopicPartition
from backbone.coordination import find_free_port
from backbone.mirror import provenance

DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
CLUSTERS = ("dc1", "dc2", "aggregate")
BROKER_IDS = (1, 2, 3)
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
# Faster than the defaults of docker/.env, so that faults show and heal within a test's time.
TEST_SETTINGS = {
    "BACKBONE_AUDIT_INTERVAL_MS": "2000",
    "BACKBONE_ZOOKEEPER_SESSION_TIMEOUT_MS": "6000",
    "BACKBONE_REPLICA_LAG_TIME_MAX_MS": "6000",
    "BACKBONE_CONSOLE_INTERVAL_MS": "2000",
}
CONSOLE_USER, CONSOLE_PASSWORD = "operator", "system-test-password"
SPARK = ("--profile", "spark")  # compose's option for the Spark services (left out unless named)


def docker_engine() -> docker.DockerClient:
    """A client of the local Docker engine; skips the test (saying why) when no engine answers."""
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except (docker.errors.DockerException, requests.RequestException, OSError) as error:
        reason = f"no Docker engine is reachable ({error}); system tests need one (apt-get install docker.io)"
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    return client


def build_images() -> dict[str, str]:
    """Run docker/build (it reuses unchanged images) and return the tags it built, by variable name."""
    started = time.monotonic()
    subprocess.run([str(DOCKER_DIR / "build")], check=True, timeout=1200)
    print(f"docker/build took {time.monotonic() - started:.1f} s", file=sys.stderr)
    tags = {}
    for line in (DOCKER_DIR / ".images").read_text().splitlines():
        key, _, value = line.partition("=")
        tags[key] = value
    return tags


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 1.0) -> None:
    """Poll `condition` until it is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class ComposeTopology:
    def __init__(self, client: docker.DockerClient, images: dict[str, str]) -> None:
        self.client = client
        # Compose keeps lowercase letters and digits of a project name; this one is ours alone.
        self.project = f"backbonesys{os.getpid()}{secrets.token_hex(3)}"
        self.ports = {
            f"{cluster.upper()}_BROKER_{broker}_PORT": find_free_port()
            for cluster in CLUSTERS
            for broker in BROKER_IDS
        }
        self.console_port, self.registry_port = find_free_port(), find_free_port()
        self.spark_master_ui_port = find_free_port()
        self.env = {
            **os.environ,
            **images,
            **TEST_SETTINGS,
            **{key: str(port) for key, port in self.ports.items()},
            "CONSOLE_PORT": str(self.console_port),
            "SCHEMA_REGISTRY_PORT": str(self.registry_port),
            "SPARK_MASTER_UI_PORT": str(self.spark_master_ui_port),
            "BACKBONE_CONSOLE_USER": CONSOLE_USER,
            "BACKBONE_CONSOLE_PASSWORD": CONSOLE_PASSWORD,
            "BACKBONE_PROJECT": self.project,
        }

    # -- compose -----------------------------------------------------------------------------------

    def compose(self, *args: str, timeout: float = 600) -> None:
        subprocess.run([str(DOCKER_DIR / "compose"), *args], env=self.env, check=True, timeout=timeout)

    def compose_in_background(self, *args: str, output: Path) -> subprocess.Popen:
        """A compose command left running (e.g. a one-off `run`), its output written to `output`."""
        with output.open("ab") as log:
            return subprocess.Popen(
                [str(DOCKER_DIR / "compose"), *args], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def up(self, *services: str, options: tuple[str, ...] = ()) -> None:
        """`compose up -d` of the services (default: all), waiting until they are healthy."""
        try:
            self.compose(*options, "up", "-d", *services)
        except subprocess.CalledProcessError:
            # docker-compose v1 gives up on a dependency it finds unhealthy, even one that restarts after a
            # failed start (on a busy machine the schema registry's first read of its topic can time out):
            # once what it started is healthy, the rest is started.
            print("compose up stopped at an unhealthy dependency: waiting, then up again", file=sys.stderr)
            self.wait_healthy(*services)
            self.compose(*options, "up", "-d", *services)
        self.wait_healthy(*services)

    def close(self, logs_dir: Path) -> None:
        """Keep every container's log in `logs_dir`, then remove everything of this project, even after a
        failed `up`, and make sure nothing is left."""
        logs_dir.mkdir(parents=True, exist_ok=True)
        for container in self.containers():
            (logs_dir / f"{container.labels[SERVICE_LABEL]}.log").write_bytes(container.logs())
        print(f"container logs of {self.project} in {logs_dir}", file=sys.stderr)
        try:
            # With the Spark profile: its services (if a test started them) go too.
            self.compose(*SPARK, "down", "--volumes", "--remove-orphans", "--timeout", "10", timeout=300)
        finally:
            label = {"label": f"{PROJECT_LABEL}={self.project}"}
            for container in self.client.containers.list(all=True, filters=label):
                container.remove(force=True, v=True)
            for network in self.client.networks.list(filters=label):
                network.remove()
            for volume in self.client.volumes.list(filters=label):
                volume.remove(force=True)

    def containers(self) -> list:
        return self.client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"})

    def container(self, service: str):
        found = self.client.containers.list(
            all=True, filters={"label": [f"{PROJECT_LABEL}={self.project}", f"{SERVICE_LABEL}={service}"]}
        )
        assert len(found) == 1, f"expected one container of service {service}, found {len(found)}"
        return found[0]

    def network(self, name: str):
        return self.client.networks.get(f"{self.project}_{name}")

    def unhealthy(self, services: Iterable[str] | None = None) -> list[str]:
        """Services (default: all) not running, or whose health check does not pass (yet)."""
        wanted = None if services is None else set(services)
        waiting = []
        for container in self.containers():
            if wanted is not None and container.labels[SERVICE_LABEL] not in wanted:
                continue
            state = container.attrs["State"]
            health = state.get("Health", {}).get("Status")
            if state["Status"] != "running" or health not in (None, "healthy"):
                waiting.append(f"{container.labels[SERVICE_LABEL]}={health or state['Status']}")
        return waiting

    def wait_healthy(self, *services: str, timeout: float = 300) -> None:
        """Wait until the named services (default: all) run and pass their health checks."""
        chosen = services or None
        wait_for(lambda: not self.unhealthy(chosen), timeout, f"healthy {services or 'containers'}", 2)

    def logs(self, service: str, lines: int = 40) -> str:
        return self.container(service).logs(tail=lines).decode(errors="replace")

    # -- the host's view ---------------------------------------------------------------------------

    def bootstrap(self, cluster: str) -> str:
        return ",".join(f"127.0.0.1:{self.ports[f'{cluster.upper()}_BROKER_{b}_PORT']}" for b in BROKER_IDS)

    def brokers(self, cluster: str) -> list[str]:
        return [f"{cluster}-broker-{b}" for b in BROKER_IDS]

    def console(self) -> ConsoleSession:
        return ConsoleSession(f"http://127.0.0.1:{self.console_port}", CONSOLE_USER, CONSOLE_PASSWORD)

    # -- faults ------------------------------------------------------------------------------------

    def disconnect(self, service: str, network: str) -> None:
        self.network(network).disconnect(self.container(service))

    def connect(self, service: str, network: str) -> None:
        # Compose gave the container its service name as alias on its networks; a reconnect must too.
        self.network(network).connect(self.container(service), aliases=[service])


class Traffic:
    """Sends values "<tag>:<n>" (key n) to `topic` with acks=all from an audited producer, at most `rate`
    per second, until stopped or `limit` records. Every acknowledgement is kept: n -> (partition, offset)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        audit_to: str,
        *,
        tag: str,
        rate: float = 200.0,
        limit: int = 120_000,
        max_seconds: float = 600.0,
    ) -> None:
        self.topic = topic
        self.tag = tag
        self.rate = rate
        self.limit = limit
        self.max_seconds = max_seconds
        self.acknowledged: dict[int, tuple[int, int]] = {}
        self.failed = 0
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = Producer(
            bootstrap_servers=bootstrap,
            acks="all",
            linger_ms=5,
            retry_backoff_ms=100,
            request_timeout_ms=10_000,
            audit_enable=True,
            audit_bootstrap_servers=audit_to,
            audit_interval_ms=1000,
        )
        self._thread = threading.Thread(target=self._run, name=f"traffic-{tag}", daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def value(self, number: int) -> bytes:
        return f"{self.tag}:{number}".encode()

    def _run(self) -> None:
        started = time.monotonic()
        for number in range(self.limit):
            if self._stop.is_set() or time.monotonic() - started > self.max_seconds:
                break
            delay = started + number / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._producer.send(
                self.topic, value=self.value(number), key=str(number).encode(), callback=self._answer(number)
            )

    def _answer(self, number: int):
        def record(metadata, error) -> None:
            with self.lock:
                if error is None:
                    self.acknowledged[number] = (metadata.partition, metadata.offset)
                else:
                    self.failed += 1

        return record

    @property
    def acked(self) -> int:
        with self.lock:
            return len(self.acknowledged)

    def wait_for_more(self, than: int, timeout: float = 60) -> None:
        wait_for(lambda: self.acked > than, timeout, f"{self.tag}: acknowledgements beyond {than}", 0.1)

    def stop(self) -> None:
        """Stop sending, wait for every answer, and publish the producer's last audit counts."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=60)
        try:
            self._producer.flush(timeout=120)
        finally:
            self._producer.close(timeout=60)


def records_in(bootstrap: str, topic: str) -> int:
    """The sum of the topic's end offsets; 0 while it does not exist or the cluster does not answer."""
    try:
        with Consumer(bootstrap_servers=bootstrap, request_timeout_ms=10_000) as consumer:
            if topic not in consumer.topics():
                return 0
            partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
            return sum(consumer.end_offsets(partitions).values())
    except KafkaClientError:
        return 0


def read_topic(bootstrap: str, topic: str, timeout_s: float = 120.0) -> list:
    """Every record of `topic` from the beginning up to the end offsets seen at the start."""
    with Consumer(bootstrap_servers=bootstrap, request_timeout_ms=15_000) as consumer:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        assert partitions, f"topic {topic} has no partitions at {bootstrap}"
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)  # retried while leaders settle after a fault
        consumer.seek_to_beginning(*partitions)
        records: list = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, f"reading {topic} at {bootstrap} took over {timeout_s} s"
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        return records


def lost_in_source(traffic: Traffic, records: Iterable) -> list[int]:
    """Acknowledged numbers whose (partition, offset) does not hold exactly that record in the source
    cluster: lost, or overwritten by another leader's write at the same offset (a split brain)."""
    at = {(r.partition, r.offset): r.value for r in records}
    with traffic.lock:
        acknowledged = dict(traffic.acknowledged)
    return sorted(n for n, place in acknowledged.items() if at.get(place) != traffic.value(n))


def lost_in_aggregate(traffics: Iterable[Traffic], records: Iterable) -> list[str]:
    """Acknowledged values that are not in the aggregate (mirrors keep values; partitions may interleave)."""
    present = {r.value for r in records}
    missing = []
    for traffic in traffics:
        with traffic.lock:
            numbers = list(traffic.acknowledged)
        missing.extend(f"{traffic.tag}:{n}" for n in numbers if traffic.value(n) not in present)
    return missing


def not_copied(source: str, alias: str, aggregate_records: Iterable, topic: str) -> list[str]:
    """The records of `topic` in the source cluster (named `alias` by its mirror) that no record in the
    aggregate names as its origin: 'partition:offset timestamp' each, for a report of what went missing."""
    copied = set()
    for record in aggregate_records:
        first = provenance.origin(record.headers or ())
        if first is not None and first.cluster == alias:
            copied.add((first.partition, first.offset))
    return [
        f"{r.partition}:{r.offset} ts={r.timestamp}"
        for r in read_topic(source, topic)
        if (r.partition, r.offset) not in copied
    ]


def audit_report(aggregate: str, topic: str, *options: str) -> tuple[bool, str]:
    """`backbone audit report` for one topic: whether it says complete, and its text."""
    command = ["audit", "report", "--bootstrap-server", aggregate, "--topic", topic, *options]
    result = subprocess.run(
        [sys.executable, "-m", "backbone", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode == 0, result.stdout + result.stderr


class ConsoleSession:
    """The console's JSON API as its configured user, logged in through its login form (CSRF token and
    session cookie), the way a browser does."""

    def __init__(self, url: str, user: str, password: str) -> None:
        self.url = url
        self.http = requests.Session()
        form = self.http.get(f"{url}/login", timeout=30)
        form.raise_for_status()
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)
        answer = self.http.post(
            f"{url}/login", data={"user": user, "password": password, "csrf_token": token}, timeout=30
        )
        answer.raise_for_status()
        assert answer.url.rstrip("/") == url, f"login as {user} refused: {answer.url}"

    def get(self, path: str):
        answer = self.http.get(f"{self.url}{path}", timeout=30)
        answer.raise_for_status()
        return answer.json()
