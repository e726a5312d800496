"""A broker's log directories record its cluster id (meta.properties); a broker whose ZooKeeper holds another
cluster refuses to start, and one whose ZooKeeper is replaced by another cluster's stops, exiting non-zero."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from backbone.coordination import ClusterStore, ZooKeeperServer, find_free_port
from backbone.coordination.zookeeper_server import four_letter_word
from backbone.dev.processes import BrokerProcess, BrokerStartError
from backbone.properties import parse_properties

pytestmark = pytest.mark.integration


def meta(broker: BrokerProcess) -> dict[str, str]:
    return parse_properties((broker.directory / "logs" / "meta.properties").read_text())


def zxid(port: int) -> int:
    """The last transaction id a ZooKeeper server has seen (the Zxid line of its `srvr` answer)."""
    answer = four_letter_word("127.0.0.1", port, "srvr")
    return int(next(line for line in answer.splitlines() if line.startswith("Zxid:")).split()[1], 16)


def cluster_id_of(connect: str) -> str:
    store = ClusterStore(connect)
    store.start()
    try:
        return store.get_or_create_cluster_id()
    finally:
        store.close()


def test_a_broker_refuses_to_start_on_another_clusters_zookeeper(zookeeper, chroot, tmp_path) -> None:
    home = zookeeper.connect_string + chroot
    broker = BrokerProcess(1, home, tmp_path / "broker")
    broker.start()
    broker.stop(timeout=15)
    assert meta(broker) == {"cluster.id": cluster_id_of(home), "version": "0", "broker.id": "1"}

    other = zookeeper.connect_string + chroot + "-other"
    other_id = cluster_id_of(other)
    moved = BrokerProcess(1, other, tmp_path / "broker")
    with pytest.raises(BrokerStartError) as raised:
        moved.start()
    assert "exited with code 1" in str(raised.value)
    output = moved.output()
    assert "event=broker_refused reason=InconsistentClusterIdError" in output
    assert f"The Cluster ID {other_id} doesn't match stored clusterId {meta(broker)['cluster.id']}" in output


def test_a_broker_whose_zookeeper_now_serves_another_cluster_stops(tmp_path) -> None:
    port = find_free_port()
    first = ZooKeeperServer(tmp_path / "zk-first", port, tick_time_ms=200, force_sync=False)
    second = ZooKeeperServer(tmp_path / "zk-second", port, tick_time_ms=200, force_sync=False)
    connect = f"127.0.0.1:{port}/dc"
    broker = BrokerProcess(1, connect, tmp_path / "broker", properties={"zookeeper.session.timeout.ms": 4000})
    first.start(timeout=60)
    try:
        broker.start()
        seen = zxid(port)
        first.stop()
        # A new ZooKeeper on the same address and chroot, for another cluster. ZooKeeper refuses clients
        # that have seen a newer transaction than its own, so it gets as far as the first had got.
        second.start(timeout=60)
        other_id = cluster_id_of(connect)
        client = KazooClient(f"127.0.0.1:{port}")
        client.start()
        try:
            while zxid(port) <= seen:
                client.create("/other-cluster-write-", b"", sequence=True)
        finally:
            client.stop()
            client.close()
        assert other_id != meta(broker)["cluster.id"]
        assert broker.process is not None
        assert broker.process.wait(timeout=60) == 1
        assert "event=inconsistent_cluster_id" in broker.output()
        store = ClusterStore(connect)
        store.start()
        try:
            assert store.broker_ids() == []  # it never registered in the other cluster
        finally:
            store.close()
    finally:
        broker.stop(timeout=15)
        first.stop()
        second.stop()
