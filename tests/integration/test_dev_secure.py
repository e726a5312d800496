"""`backbone dev up --secure` on a private directory and free ports: SASL_SSL (SCRAM-SHA-512) listeners, the
development CA made at start, an admin super user and ACLs on; Debian's kcat and confluent-kafka produce and
consume, a wrong password is refused, and the mirror, audit counters, registry and console all log in."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from registry_support import call
from security_fixtures import read_values

from backbone.client import Producer
from backbone.dev import topology
from backbone.properties import read_properties_file
from backbone.protocol.errors import TopicAuthorizationFailedError
from tests.helpers.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")


def backbone(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "backbone", *args], capture_output=True, text=True, input=stdin, timeout=120
    )


@pytest.fixture(scope="module")
def secure_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[topology.DevTopology]:
    directory = tmp_path_factory.mktemp("secure-dev")
    try:
        yield topology.up(
            directory,
            ("dc1", "aggregate"),
            1,
            progress=lambda _: None,
            preferred_ports=False,
            generate_rate=5.0,
            secure=True,
        )
    finally:
        topology.down(directory, progress=lambda _: None)


def librdkafka_settings(security: dict, password: str | None = None) -> dict[str, str]:
    """The settings kcat and confluent-kafka take, from a cluster's topology.json security entry."""
    return {
        "bootstrap.servers": security["bootstrap"],
        "security.protocol": security["protocol"],
        "sasl.mechanisms": security["mechanism"],
        "sasl.username": security["user"],
        "sasl.password": password or Path(security["password_file"]).read_text().strip(),
        "ssl.ca.location": security["ca_file"],
    }


def kcat(settings: dict[str, str], *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    found = shutil.which("kcat")
    assert found is not None, "kcat is installed by ops/setup"
    options = [f"-X{k}={v}" for k, v in settings.items() if k != "bootstrap.servers"]
    return subprocess.run(
        [found, "-b", settings["bootstrap.servers"], *options, *args],
        input=stdin,
        capture_output=True,
        timeout=60,
    )


def test_topology_names_each_clusters_security_and_brokers_refuse_what_no_acl_allows(
    secure_dev: topology.DevTopology,
) -> None:
    data = json.loads(secure_dev.path.read_text())
    assert data["secure"] is True
    for name, cluster in data["clusters"].items():
        security = cluster["security"]
        assert security["bootstrap"] == cluster["bootstrap"]
        assert (security["protocol"], security["mechanism"], security["user"]) == (
            "SASL_SSL",
            "SCRAM-SHA-512",
            "admin",
        )
        assert Path(security["ca_file"]).read_text().startswith("-----BEGIN CERTIFICATE-----")
        password_file = Path(security["password_file"])
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600, "the password is its owner's alone"
        for broker in cluster["brokers"]:
            properties = read_properties_file(broker["marker"])
            assert properties["listeners"] == f"SASL_SSL://127.0.0.1:{broker['port']}", name
            assert properties["inter.broker.listener.name"] == "SASL_SSL"
            assert properties["allow.everyone.if.no.acl.found"] == "false"
            assert "User:admin" in properties["super.users"].split(";")
    client = read_properties_file(data["clusters"]["dc1"]["security"]["command_config"])
    assert client["sasl.username"] == "admin" and client["security.protocol"] == "SASL_SSL"


def test_kcat_and_confluent_kafka_produce_and_consume_and_a_wrong_password_is_refused(
    secure_dev: topology.DevTopology,
) -> None:
    security = secure_dev.data["clusters"]["dc1"]["security"]
    settings = librdkafka_settings(security)
    produced = kcat(settings, "-P", "-t", "secure-kcat", stdin=b"k1\nk2\nk3\n")
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = kcat(settings, "-C", "-t", "secure-kcat", "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout.split() == [b"k1", b"k2", b"k3"]

    producer = confluent_kafka.Producer(settings)
    for i in range(5):
        producer.produce("secure-confluent", b"c%d" % i)
    assert producer.flush(30) == 0
    del producer  # librdkafka closes its connections when the client goes
    consumer = confluent_kafka.Consumer(
        {**settings, "group.id": "secure-confluent-readers", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe(["secure-confluent"])
        received: list[bytes] = []

        def read_some() -> bool:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                received.append(message.value())
            return len(received) == 5

        wait_until(read_some, 60, 0, what="confluent-kafka consumed the five records")
        assert received == [b"c%d" % i for i in range(5)]
    finally:
        consumer.close()

    wrong = librdkafka_settings(security, password="not-the-password")
    refused = kcat(wrong, "-L", "-m", "5")
    assert refused.returncode != 0 and b"Authentication failed" in refused.stderr
    errors: list = []
    admin = confluent_admin.AdminClient({**wrong, "error_cb": errors.append})
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=5)

    def authentication_error_reported() -> bool:
        admin.poll(0.5)  # serves error_cb
        return any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors)

    wait_until(authentication_error_reported, 30, 0, what="confluent-kafka reports the refused login")


def test_a_new_user_logs_in_but_may_do_only_what_acls_allow(secure_dev: topology.DevTopology) -> None:
    cluster = secure_dev.data["clusters"]["dc1"]
    added = backbone("users", "add", "bob", "--zookeeper", cluster["zookeeper"], stdin="bob-secret\n")
    assert added.returncode == 0, added.stderr
    bob = {
        "bootstrap.servers": cluster["bootstrap"],
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob",
        "sasl.password": "bob-secret",
        "ssl.cafile": cluster["security"]["ca_file"],
        "max.block.ms": 10_000,
    }
    with Producer(bob) as producer, pytest.raises(TopicAuthorizationFailedError):
        producer.send("secure-kcat", b"from bob").get(timeout=30)
    granted = backbone(
        "acls",
        "add",
        "--zookeeper",
        cluster["zookeeper"],
        "--allow-principal",
        "User:bob",
        "--operation",
        "Write",
        "--topic",
        "secure-kcat",
    )
    assert granted.returncode == 0, granted.stderr

    def bob_may_write() -> bool:
        with Producer(bob) as producer:
            try:
                producer.send("secure-kcat", b"from bob").get(timeout=30)
            except TopicAuthorizationFailedError:
                return False
        return True

    wait_until(bob_may_write, 60, 0.5, what="the new ACL lets bob write")


def test_mirror_audit_registry_and_console_work_on_the_secure_topology(
    secure_dev: topology.DevTopology,
) -> None:
    clusters = secure_dev.data["clusters"]
    command_config = clusters["dc1"]["security"]["command_config"]
    admin = dict(read_properties_file(command_config))
    sent = [b"m%d" % i for i in range(100)]
    with Producer({**admin, "bootstrap.servers": clusters["dc1"]["bootstrap"], "acks": "all"}) as producer:
        for value in sent:
            producer.send("secure-mirrored", value)
        producer.flush(30)
    aggregate = clusters["aggregate"]["bootstrap"]
    wait_until(
        lambda: len(read_values(aggregate, "secure-mirrored", admin)) == len(sent),
        120,
        0.5,
        what="the mirror copied the records into the aggregate",
    )
    assert sorted(read_values(aggregate, "secure-mirrored", admin)) == sorted(sent)

    def report() -> subprocess.CompletedProcess[str]:
        return backbone(
            "audit",
            "report",
            "--bootstrap-server",
            aggregate,
            "--command-config",
            command_config,
            "--baseline-tier",
            "dc1",
            "--topic",
            "secure-mirrored",
        )

    wait_until(lambda: report().returncode == 0, 120, 1, what="the audit report finds the aggregate complete")
    assert "verdict: complete" in report().stdout

    url = secure_dev.data["schema_registry"]["url"]
    schema = {"type": "record", "name": "Click", "fields": [{"name": "page", "type": "string"}]}
    status, _ = call("POST", f"{url}/subjects/clicks-value/versions", {"schema": json.dumps(schema)})
    assert status == 200
    assert "clicks-value" in call("GET", f"{url}/subjects")[1]

    console = secure_dev.data["console"]
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    with browser.open(console["url"] + "login", timeout=10) as page:
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.read().decode()).group(1)
    form = {"user": console["user"], "password": console["password"], "csrf_token": token}
    browser.open(console["url"] + "login", data=urllib.parse.urlencode(form).encode(), timeout=10).close()

    def sampled(name: str) -> dict:
        with browser.open(f"{console['url']}api/clusters/{name}", timeout=10) as page:
            return json.loads(page.read())

    for name in clusters:
        wait_until(lambda n=name: sampled(n)["brokers_up"] == 1, 60, 0.5, what=f"the console shows {name}")
        assert sampled(name)["error"] is None

    # The generator produced Avro events into dc1 (its schemas in the registry), mirrored to the aggregate.
    wait_until(
        lambda: len(read_values(aggregate, "page_views", admin)) > 0, 120, 1, what="generated events mirrored"
    )
    assert "page_views-value" in call("GET", f"{url}/subjects")[1]

    status = backbone("dev", "status", "--dir", str(secure_dev.directory))
    # 2 brokers, 1 mirror, 2 audit counters, the registry, the generator, ZooKeeper and the console
    assert status.returncode == 0 and status.stdout.count("running") == 9, status.stdout


def test_up_restarts_what_died_and_refuses_to_turn_a_secure_directory_plaintext(
    secure_dev: topology.DevTopology,
) -> None:
    directory = secure_dev.directory
    with pytest.raises(ValueError, match="secure"):
        topology.up(directory, ("dc1", "aggregate"), 1, progress=lambda _: None, generate_rate=5.0)
    mirror = secure_dev.mirrors[0]
    os.kill(mirror["pid"], signal.SIGKILL)
    wait_until(
        lambda: not topology.process_alive(mirror["pid"], mirror["marker"]), 30, what="the mirror died"
    )
    again = topology.up(
        directory, ("dc1", "aggregate"), 1, progress=lambda _: None, generate_rate=5.0, secure=True
    )
    assert again.restarted == 1
    restarted = again.mirrors[0]
    assert topology.process_alive(restarted["pid"], restarted["marker"])
    clusters = again.data["clusters"]
    admin = dict(read_properties_file(clusters["dc1"]["security"]["command_config"]))
    with Producer({**admin, "bootstrap.servers": clusters["dc1"]["bootstrap"], "acks": "all"}) as producer:
        producer.send("secure-after-restart", b"again").get(timeout=30)
    wait_until(
        lambda: read_values(clusters["aggregate"]["bootstrap"], "secure-after-restart", admin) == [b"again"],
        120,
        0.5,
        what="the restarted mirror copies with its recorded login",
    )
