"""The three brokers of ops/bench/seed_comparison.py, each a local process with its data in a given directory.

- `backbone_broker`: ZooKeeper and one Backbone broker, as `backbone dev` and the other benchmarks start
  them, flushing the log to disk every 10,000 messages (the seed's Kafka setting), otherwise left to the OS.
- `rabbitmq_broker`: Debian's RabbitMQ server program run directly (not the system service) with a private
  config, node name, Erlang cookie, port mapper (epmd) and data directory; listening on loopback only.
- `activemq_broker`: Debian's ActiveMQ jar run directly with a private xbean config: a STOMP listener on
  loopback, KahaDB persistence syncing its journal to disk once a second rather than on every write (the seed
  configured every broker to flush asynchronously).

Each is a context manager that yields the address to connect to and stops every process it started when the
block ends, however it ends. Nothing here installs anything: `ops/bench/install-brokers` does.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from local_cluster import START_TIMEOUT, one_broker

from backbone.coordination import find_free_port
from backbone.dev.processes import BrokerProcess, stop_child, wait_listening

HOST = "127.0.0.1"
RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
ACTIVEMQ_HOME = Path("/usr/share/activemq")
EPMD = "epmd"

INSTALL_HINT = "run ops/bench/install-brokers (installs RabbitMQ, ActiveMQ, pika and stomp.py)"


def missing_requirements() -> list[str]:
    """What the comparison needs and this machine lacks, for a message that says how to fix it."""
    missing = []
    if not RABBITMQ_SERVER.exists() or shutil.which(EPMD) is None:
        missing.append("rabbitmq-server (Debian package)")
    if not (ACTIVEMQ_HOME / "bin" / "activemq.jar").exists():
        missing.append("activemq (Debian package)")
    for program in ("java", "kcat"):
        if shutil.which(program) is None:
            missing.append(f"{program} (ops/setup installs it)")
    for module, package in (("pika", "pika"), ("stomp", "stomp.py")):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"{package} (Python package)")
    return missing


@contextlib.contextmanager
def running(command: list[str], output: Path, port: int, what: str, **env: str) -> Iterator[None]:
    """Run `command` (with `env` added to the environment) in a session of its own until the block ends;
    first wait until it listens on `port`.

    Stopping sends SIGTERM (each server shuts down cleanly on it), then SIGKILL to whatever is left of its
    process group, so no helper process (Erlang's port programs, a JVM's children) outlives the run.
    """
    with open(output, "ab") as sink:
        process = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            start_new_session=True,
        )
    try:
        wait_listening(HOST, port, what, process=process, output_file=output, timeout=START_TIMEOUT)
        yield
    finally:
        stop_child(process, timeout=60.0)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


@contextlib.contextmanager
def backbone_broker(directory: Path) -> Iterator[BrokerProcess]:
    """ZooKeeper and one Backbone broker; yields the running broker (its `bootstrap`, its `log.dirs`)."""
    seed_settings = {"log.flush.interval.messages": 10_000}
    with one_broker(directory, seed_settings, chroot="/seed") as broker:
        yield broker


@contextlib.contextmanager
def rabbitmq_broker(directory: Path) -> Iterator[int]:
    """A private RabbitMQ node; yields its AMQP port (user guest, password guest)."""
    directory.mkdir(parents=True)
    amqp_port, dist_port, epmd_port = find_free_port(), find_free_port(), find_free_port()
    cookie = directory / ".erlang.cookie"  # Erlang reads it from $HOME: a private one for a private node
    cookie.write_text(secrets.token_hex(16))
    cookie.chmod(0o400)
    config = directory / "rabbitmq.conf"
    config.write_text(f"listeners.tcp.1 = {HOST}:{amqp_port}\nloopback_users = none\n")
    plugins = directory / "enabled_plugins"
    plugins.write_text("[].\n")
    env = {
        "HOME": str(directory),
        "RABBITMQ_NODENAME": f"seedbench{amqp_port}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": HOST,
        "RABBITMQ_NODE_PORT": str(amqp_port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        "RABBITMQ_CONFIG_FILE": str(config),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
        "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
        "RABBITMQ_LOG_BASE": str(directory / "log"),
        "RABBITMQ_PID_FILE": str(directory / "rabbitmq.pid"),
        "ERL_EPMD_PORT": str(epmd_port),
        "ERL_EPMD_ADDRESS": HOST,
    }
    # Our own port mapper in the foreground: one the node started would daemonize and outlive the run.
    epmd = [EPMD, "-port", str(epmd_port), "-address", HOST]
    with (
        running(epmd, directory / "epmd.out", epmd_port, "epmd"),
        running([str(RABBITMQ_SERVER)], directory / "rabbitmq.out", amqp_port, "RabbitMQ", **env),
    ):
        yield amqp_port


_ACTIVEMQ_CONFIG = """\
<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans
    http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
    http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="seedbench" useJmx="false"
          persistent="true" dataDirectory="{data}">
    <persistenceAdapter>
      <kahaDB directory="{data}/kahadb" journalDiskSyncStrategy="periodic"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://{host}:{port}"/>
    </transportConnectors>
  </broker>
</beans>
"""


@contextlib.contextmanager
def activemq_broker(directory: Path) -> Iterator[int]:
    """A private ActiveMQ broker; yields its STOMP port."""
    conf, data = directory / "conf", directory / "data"
    conf.mkdir(parents=True)
    data.mkdir()
    port = find_free_port()
    config = conf / "activemq.xml"
    config.write_text(_ACTIVEMQ_CONFIG.format(data=data, host=HOST, port=port))
    # The options Debian's /usr/bin/activemq passes on a modern JVM, without its service wrapper.
    command = [
        "java", "-Xms512M", "-Xmx512M",
        "--add-reads=java.xml=java.logging",
        "--add-opens", "java.base/java.lang=ALL-UNNAMED",
        "--add-opens", "java.base/java.util=ALL-UNNAMED",
        "--add-opens", "java.base/java.util.concurrent=ALL-UNNAMED",
        "--add-opens", "java.base/java.net=ALL-UNNAMED",
        f"-Dactivemq.classpath={ACTIVEMQ_HOME}/lib/",
        f"-Dactivemq.home={ACTIVEMQ_HOME}",
        f"-Dactivemq.base={directory}",
        f"-Dactivemq.conf={conf}",
        f"-Dactivemq.data={data}",
        "-jar", str(ACTIVEMQ_HOME / "bin" / "activemq.jar"),
        "start", f"xbean:file:{config}",
    ]  # fmt: skip
    with running(command, directory / "activemq.out", port, "ActiveMQ"):
        yield port
