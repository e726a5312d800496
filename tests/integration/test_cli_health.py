"""`backbone health broker`, the containers' health check: healthy only when the broker answers Metadata
and lists itself as registered."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cli_support import run

from backbone.coordination import find_free_port

pytestmark = pytest.mark.integration


def test_a_registered_broker_is_healthy_and_another_id_is_not(broker) -> None:
    done = run("health", "broker", "--bootstrap-server", broker.bootstrap, "--broker-id", "1")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().startswith("broker 1 healthy: registered, controller 1")

    done = run("health", "broker", "--bootstrap-server", broker.bootstrap, "--broker-id", "7")
    assert done.returncode == 1
    assert done.stderr.decode() == (
        f"backbone health: {broker.bootstrap} answers, but broker 7 is not registered (yet): "
        "registered brokers [1]\n"
    )


def test_nothing_listening_is_unhealthy() -> None:
    address = f"127.0.0.1:{find_free_port()}"
    done = run("health", "broker", "--bootstrap-server", address, "--broker-id", "1", "--timeout-ms", "1000")
    assert done.returncode == 1
    assert done.stderr.decode().startswith("backbone health: ")


def test_the_containers_short_form_checks_the_same(broker) -> None:
    check = ["broker", "--bootstrap-server", broker.bootstrap, "--broker-id", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "backbone.cli.health", *check],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().startswith("broker 1 healthy: registered, controller 1")
