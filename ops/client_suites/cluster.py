"""A throw-away 3-broker Backbone cluster for client conformance runs: a real ZooKeeper and real broker
processes on free loopback ports, in a directory of the caller's choosing, stopped again on exit.

Configured like the cluster the clients' own suites expect (librdkafka's default scenario: topics
auto-created with 4 partitions and 3 replicas). With `sasl_ssl` it is secured as `backbone dev up --secure`
secures its clusters (SASL_SSL listeners, SCRAM-SHA-512, certificates from ops/dev-ca, the super users
`admin` and `broker`), with one more user, `client`, that the clients log in as: no super user, so the
authorizer (when the properties turn it on) decides what it may do.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from backbone.coordination import ClusterStore, ScramCredential, ZooKeeperServer, find_free_port
from backbone.dev import secure
from backbone.dev.processes import BrokerProcess

BROKERS = 3
# Kafka's names; values as in librdkafka's "default" test scenario.
SUITE_PROPERTIES: Mapping[str, str] = {
    "auto.create.topics.enable": "true",
    "num.partitions": "4",
    "default.replication.factor": "3",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "3",
    # group.initial.rebalance.delay.ms stays Kafka's 3 s: librdkafka's group tests count on two
    # consumers that subscribe together being assigned in one rebalance.
}
CLIENT_USER = "client"
CHROOT = "/conformance"


@dataclass(frozen=True)
class ClientLogin:
    """How clients reach a SASL_SSL cluster: as `user` over SCRAM-SHA-512, trusting the CA in `ca_file`."""

    user: str
    password: str
    ca_file: Path
    # The development CA's directory: `ops/dev-ca DIRECTORY NAME` signs client certificates with it.
    ca_directory: Path
    protocol: str = secure.PROTOCOL
    mechanism: str = secure.MECHANISM


@dataclass
class Cluster:
    zookeeper: ZooKeeperServer
    brokers: list[BrokerProcess]
    login: ClientLogin | None = None  # None: PLAINTEXT listeners

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.bootstrap for broker in self.brokers)

    @property
    def zookeeper_connect(self) -> str:
        """The brokers' zookeeper.connect (what `backbone acls` and `backbone users` take)."""
        return self.zookeeper.connect_string + CHROOT

    def dead_brokers(self) -> list[int]:
        return [broker.broker_id for broker in self.brokers if not broker.is_running()]


@contextlib.contextmanager
def running_cluster(
    directory: Path,
    properties: Mapping[str, str] = SUITE_PROPERTIES,
    brokers: int = BROKERS,
    sasl_ssl: bool = False,
) -> Iterator[Cluster]:
    """Start ZooKeeper and `brokers` brokers under `directory`, SASL_SSL ones with `sasl_ssl` (`properties`
    override the secure topology's, e.g. its authorizer settings); stop them all on exit, even on failure."""
    zookeeper = ZooKeeperServer(directory / "zookeeper", find_free_port(), force_sync=False)
    zookeeper.start(timeout=60)
    started: list[BrokerProcess] = []
    try:
        cluster = Cluster(zookeeper, started)
        security = _secure(cluster, directory) if sasl_ssl else None
        for broker_id in range(1, brokers + 1):
            port = find_free_port()
            own = security.broker_properties("127.0.0.1", port) if security else {}
            broker = BrokerProcess(
                broker_id,
                cluster.zookeeper_connect,
                directory / f"broker-{broker_id}",
                port=port,
                properties={**own, **properties},
            )
            started.append(broker)
            broker.start(timeout=60)
        yield cluster
    finally:
        # A second Ctrl-C or SIGTERM must not cut the stopping short and leave processes behind.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            for broker in started:
                broker.stop(timeout=15)
            zookeeper.stop()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _secure(cluster: Cluster, directory: Path) -> secure.DevSecurity:
    """The secure topology's CA, certificate and users in the cluster's chroot, and the client's login."""
    security = secure.prepare(directory)
    secure.add_users(cluster.zookeeper_connect, security)
    password = secrets.token_urlsafe(24)
    with ClusterStore(cluster.zookeeper_connect) as store:
        credential = ScramCredential.from_password(secure.MECHANISM, password)
        store.set_scram_credential(CLIENT_USER, secure.MECHANISM, credential)
    cluster.login = ClientLogin(CLIENT_USER, password, security.ca_file, security.directory)
    return security
