"""Security settings reach every component's clients: the console per cluster, the registry's storage, the
mirror's audit publisher, --command-config on every client-side command, the dev topology's files."""

from __future__ import annotations

import argparse
import json
import stat
import tomllib
from pathlib import Path

import pytest

from backbone.cli import build_parser
from backbone.cli import connect as cli_connect
from backbone.console.config import ConfigError, parse, parse_properties
from backbone.dev import console as dev_console
from backbone.dev import mirrors as dev_mirrors
from backbone.dev.secure import DevSecurity, private_directory, write_properties
from backbone.mirror.config import MirrorConfig
from backbone.properties import read_properties_file
from backbone.schema_registry.server import RegistryConfig

pytestmark = pytest.mark.unit

LOGIN = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "admin",
    "sasl.password": "secret",
    "ssl.cafile": "/ca.pem",
}


def test_a_console_cluster_takes_its_own_client_security(tmp_path: Path) -> None:
    password = tmp_path / "dc1.password"
    password.write_text("from-file\nignored\n", encoding="utf-8")
    config = parse(
        tomllib.loads(
            f"""
[[clusters]]
name = "dc1"
bootstrap.servers = "h:9093"
security.protocol = "SASL_SSL"
sasl.mechanism = "SCRAM-SHA-512"
sasl.username = "console"
sasl.password.file = "{password}"
ssl.cafile = "/ca.pem"

[[clusters]]
name = "dc2"
bootstrap.servers = "h:9092"
"""
        )
    )
    assert config.client_config("dc1") == {
        "bootstrap.servers": "h:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "console",
        "sasl.password": "from-file",
        "ssl.cafile": "/ca.pem",
    }
    assert config.client_config("dc2") == {"bootstrap.servers": "h:9092"}
    as_properties = parse(
        parse_properties(
            "clusters.dc1.bootstrap.servers=h:9093\nclusters.dc1.security.protocol=SASL_SSL\n"
            "clusters.dc1.sasl.username=console\nclusters.dc1.sasl.password=p\n"
        )
    )
    assert as_properties.client_config("dc1")["sasl.username"] == "console"


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"sasl": {"usernme": "x"}}, "did you mean 'sasl.username'"),
        ({"security": {"protocol": "TLS"}}, "security.protocol"),
        ({"sasl": {"password": {"file": "/does/not/exist"}}}, "could not be read"),
    ],
)
def test_wrong_console_cluster_security_says_what_is_wrong(settings: dict, said: str) -> None:
    raw = {"clusters": [{"name": "dc1", "bootstrap": {"servers": "h:1"}, **settings}]}
    with pytest.raises(ConfigError, match=said):
        parse(raw)


def test_the_registry_storage_client_takes_kafkastore_security_settings() -> None:
    config = RegistryConfig.from_properties(
        {"kafkastore.bootstrap.servers": "h:9093", **{f"kafkastore.{k}": v for k, v in LOGIN.items()}}
    )
    assert config.security == LOGIN
    with pytest.raises(Exception, match=r"kafkastore\.sasll"):
        RegistryConfig.from_properties({"kafkastore.bootstrap.servers": "h:1", "kafkastore.sasll.x": "1"})


def test_the_mirror_audit_publisher_takes_its_own_settings_or_the_targets() -> None:
    base = {
        "source.bootstrap.servers": "s:1",
        "target.bootstrap.servers": "t:1",
        "source.alias": "dc1",
        "topics": "a",
        **{f"source.consumer.{k}": v for k, v in LOGIN.items()},
        **{f"target.producer.{k}": v for k, v in {**LOGIN, "sasl.username": "target-user"}.items()},
    }
    config = MirrorConfig.from_properties({**base, "audit.producer.sasl.username": "auditor"})
    assert config.consumer["sasl.username"] == "admin"
    assert config.producer["sasl.username"] == "target-user"
    assert config.audit_producer == {"sasl.username": "auditor"}


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subcommands(sub, (*path, name))
    yield path, parser


def test_every_command_that_connects_to_brokers_takes_command_config() -> None:
    connecting = []
    for path, parser in _subcommands(build_parser()):
        options = {option for action in parser._actions for option in action.option_strings}
        if "--bootstrap-server" in options:
            connecting.append(" ".join(path))
            assert "--command-config" in options, f"backbone {' '.join(path)} lacks --command-config"
    assert {"topics list", "produce", "consume", "audit count", "audit report", "generate"} <= set(connecting)
    assert "health broker" in connecting


def test_commands_find_a_secure_dev_topologys_client_settings(tmp_path: Path, monkeypatch) -> None:
    topology = tmp_path / "var" / "dev" / "topology.json"
    topology.parent.mkdir(parents=True)
    security = {"bootstrap": "127.0.0.1:40001", "command_config": str(tmp_path / "client.properties")}
    topology.write_text(
        json.dumps({"clusters": {"dc1": {"bootstrap": "127.0.0.1:40001", "security": security}}}),
        encoding="utf-8",
    )
    write_properties(tmp_path / "client.properties", LOGIN)
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(bootstrap_server="127.0.0.1:40001", request_timeout_ms=100, command_config=None)
    assert cli_connect.client_config(args)["sasl.username"] == "admin"
    elsewhere = argparse.Namespace(
        bootstrap_server="10.0.0.1:9092", request_timeout_ms=100, command_config=None
    )
    assert "sasl.username" not in cli_connect.client_config(elsewhere)


def _dev_security(tmp_path: Path) -> DevSecurity:
    security = DevSecurity(tmp_path / "secure")
    private_directory(security.directory)
    security.admin_password_file.write_text("admin-secret\n", encoding="utf-8")
    security.broker_password_file.write_text("broker-secret\n", encoding="utf-8")
    return security


def test_dev_secure_files_hold_the_logins_and_only_their_owner_reads_them(tmp_path: Path) -> None:
    security = _dev_security(tmp_path)
    assert security.client_settings()["sasl.password"] == "admin-secret"
    broker = security.broker_properties("127.0.0.1", 9093)
    assert broker["listeners"] == "SASL_SSL://127.0.0.1:9093"
    assert 'username="broker" password="broker-secret"' in broker["sasl.jaas.config"]
    assert broker["allow.everyone.if.no.acl.found"] == "false"
    path = write_properties(tmp_path / "x.properties", security.client_settings())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_properties_file(path)["sasl.username"] == "admin"


def test_dev_mirror_and_console_get_the_admin_login(tmp_path: Path) -> None:
    security = _dev_security(tmp_path)
    clusters = {"dc1": {"bootstrap": "127.0.0.1:1"}, "aggregate": {"bootstrap": "127.0.0.1:2"}}
    console_file = dev_console.write_config(
        tmp_path / "console", clusters, [], 8080, "127.0.0.1", 1000, {}, security
    )
    text = console_file.read_text()
    assert "admin-secret" not in text, "the password stays in its file"
    assert parse(tomllib.loads(text)).client_config("dc1")["sasl.password"] == "admin-secret"
    command = dev_mirrors.command("dc1", "aggregate", "a:1", "b:2", 9400, config=tmp_path / "m.properties")
    assert command[-2:] == ["--config", str(tmp_path / "m.properties")]
    assert " ".join(command).count(dev_mirrors.marker("a:1", "b:2")) == 1, "the marker still finds it"


def test_dev_up_secure_prints_how_to_log_in(tmp_path: Path, monkeypatch, capsys) -> None:
    from backbone.dev import topology

    security = {
        "protocol": "SASL_SSL",
        "bootstrap": "127.0.0.1:9092",
        "ca_file": "/d/secure/ca.pem",
        "mechanism": "SCRAM-SHA-512",
        "user": "admin",
        "password_file": "/d/secure/admin.password",
        "command_config": "/d/secure/client.properties",
    }
    broker = {"id": 1, "host": "127.0.0.1", "port": 9092}
    data = {
        "zookeeper": {"port": 2181},
        "clusters": {
            "dc1": {
                "bootstrap": "127.0.0.1:9092",
                "zookeeper": "z/dc1",
                "brokers": [broker],
                "security": security,
            }
        },
        "mirrors": [],
    }
    asked = {}

    def fake_up(*args, **kwargs):
        asked.update(kwargs)
        return topology.DevTopology(tmp_path, data)

    monkeypatch.setattr(topology, "up", fake_up)
    args = build_parser().parse_args(["dev", "up", "--dir", str(tmp_path), "--secure"])
    assert args.handler(args) == 0
    assert asked["secure"] is True
    printed = capsys.readouterr().out
    assert "-X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=admin" in printed
    assert "$(cat /d/secure/admin.password)" in printed and "ssl.ca.location=/d/secure/ca.pem" in printed
    assert "--command-config /d/secure/client.properties" in printed
