"""The mirror, the schema registry and the console on clusters that only speak SASL_SSL (SCRAM-SHA-512).

Each secure cluster here has a single SASL_SSL listener (also the inter-broker one) and its own users, so a
component that connected without credentials, or with the other cluster's, would be refused.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import subprocess
import sys
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mirror_support import GROUP_SETTINGS, MirrorProcess, mirror_args, mirrors
from registry_support import call
from security_fixtures import BROKER_PASSWORD, read_values, secure_properties

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from backbone.client.audit import read_audit_counts
from backbone.coordination import ClusterStore, ScramCredential, find_free_port
from backbone.dev import registry
from backbone.dev.processes import BrokerProcess, start_until_line, stop_child
from backbone.mirror.audit import mirror_tier
from tests.helpers.waiting import wait_until

MECHANISM = "SCRAM-SHA-512"
SOURCE_USER, SOURCE_PASSWORD = "dc1-mirror", "source-secret"
TARGET_USER, TARGET_PASSWORD = "aggregate-mirror", "target-secret"


@contextmanager
def secure_cluster(
    zookeeper, chroot: str, tmp_path: Path, certificates: Path, name: str, user: str, password: str
) -> Iterator[BrokerProcess]:
    """Cluster `name`: one broker whose only listener is SASL_SSL; `user` (and the brokers' own login) may
    log in."""
    connect, directory = f"{zookeeper.connect_string}{chroot}/{name}", tmp_path / name
    with ClusterStore(connect) as store:
        for name, secret in ((user, password), ("broker", BROKER_PASSWORD)):
            store.set_scram_credential(name, MECHANISM, ScramCredential.from_password(MECHANISM, secret))
    port = find_free_port()
    broker = BrokerProcess(
        1,
        connect,
        directory,
        port=port,
        properties={
            **GROUP_SETTINGS,
            **secure_properties(certificates),
            "listeners": f"SASL_SSL://127.0.0.1:{port}",
            "inter.broker.listener.name": "SASL_SSL",
            "zookeeper.session.timeout.ms": 6000,
        },
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop(timeout=15)


def login(certificates: Path, user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.cafile": str(certificates / "ca.pem"),
    }


@pytest.fixture
def source(zookeeper, chroot: str, tmp_path: Path, certificates: Path) -> Iterator[BrokerProcess]:
    with secure_cluster(
        zookeeper, chroot, tmp_path, certificates, "dc1", SOURCE_USER, SOURCE_PASSWORD
    ) as broker:
        yield broker


@pytest.fixture
def target(zookeeper, chroot: str, tmp_path: Path, certificates: Path) -> Iterator[BrokerProcess]:
    with secure_cluster(
        zookeeper, chroot, tmp_path, certificates, "aggregate", TARGET_USER, TARGET_PASSWORD
    ) as broker:
        yield broker


def end_total(bootstrap: str, topic: str, config: dict[str, str]) -> int:
    with Consumer({**config, "bootstrap.servers": bootstrap}) as consumer:
        if topic not in consumer.topics():
            return 0
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        return sum(consumer.end_offsets(partitions).values())


def test_mirror_copies_between_two_sasl_ssl_clusters_with_separate_logins(
    source: BrokerProcess, target: BrokerProcess, certificates: Path, tmp_path: Path
) -> None:
    source_login = login(certificates, SOURCE_USER, SOURCE_PASSWORD)
    target_login = login(certificates, TARGET_USER, TARGET_PASSWORD)
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    with Admin({**source_login, "bootstrap.servers": source.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 3, 1)])
    sent = [b"record-%d" % i for i in range(2000)]
    with Producer({**source_login, "bootstrap.servers": source.bootstrap, "acks": "all"}) as producer:
        for value in sent:
            producer.send(topic, value)
        producer.flush(60)
    # Each side's login in the mirror's file; each user exists in one cluster only, so swapping or
    # sharing them would be refused.
    config = tmp_path / "mirror.properties"
    config.write_text(
        "".join(f"source.consumer.{k}={v}\n" for k, v in source_login.items())
        + "".join(f"target.producer.{k}={v}\n" for k, v in target_login.items()),
        encoding="utf-8",
    )
    with mirrors() as started:
        mirror = MirrorProcess(
            tmp_path / "mirror.out",
            *mirror_args(
                source.bootstrap,
                target.bootstrap,
                "--topics",
                topic,
                "--config",
                str(config),
                "--property",
                f"audit.bootstrap.servers={target.bootstrap}",
                "--property",
                "audit.interval.ms=500",
            ),
        ).start()
        started.append(mirror)
        wait_until(
            lambda: end_total(target.bootstrap, topic, target_login) >= len(sent),
            120,
            0.5,
            what=f"the mirror copied every record (its output: {mirror.output()[-2000:]})",
        )
        copied = read_values(target.bootstrap, topic, target_login)
        assert sorted(copied) == sorted(sent), "every record arrived, none twice"

        # Its audit counts went to the target with the target's login (the default for audit.producer.*).
        def audited() -> int:
            try:
                counts, _ = read_audit_counts(target.bootstrap, client_config=target_login, timeout_s=20)
            except LookupError:
                return 0
            return sum(
                c.count for c in counts if c.tier == mirror_tier("dc1", "aggregate") and c.topic == topic
            )

        wait_until(lambda: audited() == len(sent), 60, 0.5, what="the mirror's audit counts in the target")
        assert mirror.terminate() == 0, mirror.output()[-3000:]
    assert "authentication_failed" not in source.output() + target.output()


def test_schema_registry_stores_its_schemas_in_a_sasl_ssl_cluster(
    target: BrokerProcess, certificates: Path, tmp_path: Path
) -> None:
    target_login = login(certificates, TARGET_USER, TARGET_PASSWORD)
    port = find_free_port()
    config = tmp_path / "registry.properties"
    config.write_text(
        f"listeners=http://127.0.0.1:{port}\nkafkastore.bootstrap.servers={target.bootstrap}\n"
        + "".join(f"kafkastore.{k}={v}\n" for k, v in target_login.items()),
        encoding="utf-8",
    )

    def run_registry() -> subprocess.Popen[bytes]:
        return start_until_line(
            registry.command(config),
            tmp_path / "registry.out",
            registry.READY_LINE,
            "schema registry",
            timeout=registry.READY_TIMEOUT_S,
        )

    url = f"http://127.0.0.1:{port}"
    schema = {"type": "record", "name": "PageView", "fields": [{"name": "page", "type": "string"}]}
    process = run_registry()
    try:
        status, answer = call(
            "POST", f"{url}/subjects/pageviews-value/versions", {"schema": json.dumps(schema)}
        )
        assert status == 200 and answer == {"id": 1}
    finally:
        stop_child(process, timeout=15)
    assert end_total(target.bootstrap, "_schemas", target_login) > 0, "the schema is in the secure cluster"
    # A new instance reads it back from the secure cluster.
    process = run_registry()
    try:
        assert call("GET", f"{url}/subjects")[1] == ["pageviews-value"]
    finally:
        stop_child(process, timeout=15)


def test_console_shows_a_sasl_ssl_cluster(target: BrokerProcess, certificates: Path, tmp_path: Path) -> None:
    from backbone.console.auth import hash_password

    password_file = tmp_path / "console.password"
    password_file.write_text(TARGET_PASSWORD + "\n", encoding="utf-8")
    port = find_free_port()
    config = tmp_path / "console.toml"
    config.write_text(
        f"""listeners = "http://127.0.0.1:{port}"
sampling.interval.ms = 500
history.url = "sqlite:///{tmp_path / "history.db"}"

[[clusters]]
name = "aggregate"
bootstrap.servers = "{target.bootstrap}"
role = "aggregate"
security.protocol = "SASL_SSL"
sasl.mechanism = "{MECHANISM}"
sasl.username = "{TARGET_USER}"
sasl.password.file = "{password_file}"
ssl.cafile = "{certificates / "ca.pem"}"

[[users]]
name = "viewer"
role = "viewer"
password.hash = "{hash_password("viewer-secret")}"
""",
        encoding="utf-8",
    )
    process = start_until_line(
        [sys.executable, "-m", "backbone", "console", "--config", str(config)],
        tmp_path / "console.out",
        "event=console_started",
        "console",
        timeout=60,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        with browser.open(url + "login", timeout=10) as page:
            token = re.search(r'name="csrf_token" value="([^"]+)"', page.read().decode()).group(1)
        form = {"user": "viewer", "password": "viewer-secret", "csrf_token": token}
        browser.open(url + "login", data=urllib.parse.urlencode(form).encode(), timeout=10).close()

        def cluster() -> dict:
            with browser.open(url + "api/clusters/aggregate", timeout=10) as page:
                return json.loads(page.read())

        wait_until(
            lambda: cluster()["brokers_up"] == 1, 60, 0.5, what="the console sampled the secure cluster"
        )
        shown = cluster()
        assert shown["error"] is None and shown["controller"] == 1
        assert [b["port"] for b in shown["broker_list"]] == [target.port]
    finally:
        stop_child(process, timeout=15)
    assert "authentication_failed" not in target.output()
