"""The blocking Producer, Consumer and Admin, each on its own loop thread, against a threaded fake cluster."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from backbone.client import (
    Admin,
    BufferExhaustedError,
    ClientClosedError,
    ConfigError,
    Consumer,
    NewTopic,
    Producer,
    RecordMetadata,
    TopicPartition,
)
from tests.helpers.fake_cluster import ThreadedFakeCluster

pytestmark = pytest.mark.unit


@pytest.fixture
def fake() -> Iterator[ThreadedFakeCluster]:
    with ThreadedFakeCluster(brokers=2) as cluster:
        cluster.call(cluster.cluster.create_topic, "t", 2)
        yield cluster


def test_produce_then_consume_blocking(fake: ThreadedFakeCluster) -> None:
    callbacks: list[tuple[object, object]] = []
    with Producer(bootstrap_servers=fake.bootstrap, linger_ms=2) as producer:
        futures = [
            producer.send("t", b"v%d" % i, key=b"k%d" % (i % 4), headers=[("n", b"%d" % i)])
            for i in range(100)
        ]
        producer.send("t", b"last", partition=1, callback=lambda md, exc: callbacks.append((md, exc)))
        producer.flush(timeout=10)
        metadata = [f.get(timeout=10) for f in futures]
    assert all(isinstance(m, RecordMetadata) and m.offset >= 0 for m in metadata)
    assert len(callbacks) == 1 and callbacks[0][1] is None
    with Consumer(
        bootstrap_servers=fake.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50
    ) as consumer:
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        seen: dict[bytes, int] = {}
        for _ in range(100):  # bounded
            for records in consumer.poll(timeout_ms=200).values():
                seen.update({r.value: r.offset for r in records})
            if len(seen) == 101:
                break
        assert len(seen) == 101
        for future, value in zip(futures, (b"v%d" % i for i in range(100)), strict=True):
            assert seen[value] == future.get().offset
        assert (
            consumer.position(TopicPartition("t", 1))
            == consumer.end_offsets([TopicPartition("t", 1)])[TopicPartition("t", 1)]
        )


def test_sends_from_many_threads(fake: ThreadedFakeCluster) -> None:
    with Producer(bootstrap_servers=fake.bootstrap) as producer:
        futures: list[object] = []
        lock = threading.Lock()

        def worker(n: int) -> None:
            mine = [producer.send("t", b"%d-%d" % (n, i), partition=0) for i in range(200)]
            with lock:
                futures.extend(mine)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        producer.flush(10)
        offsets = sorted(f.get(0).offset for f in futures)  # type: ignore[attr-defined]
    assert offsets == list(range(800)), "every record got its own offset: nothing lost, nothing doubled"


def test_send_blocks_on_a_full_buffer_then_raises(fake: ThreadedFakeCluster) -> None:
    fake.call(lambda: fake.cluster.create_topic("orphan", 1, leaders=[9]))
    with Producer(bootstrap_servers=fake.bootstrap, buffer_memory=1000, max_block_ms=100) as producer:
        with pytest.raises(BufferExhaustedError):
            for _ in range(50):  # bounded: the buffer fills after a few
                producer.send("orphan", b"x" * 100)
        producer.close(timeout=0.1)


def test_admin_blocking(fake: ThreadedFakeCluster) -> None:
    with Admin(bootstrap_servers=fake.bootstrap) as admin:
        admin.create_topics([NewTopic("made", 3)])
        assert "made" in admin.list_topics()
        assert len(admin.describe_topics(["made"])["made"].partitions) == 3
        assert admin.describe_cluster().controller_id == 0


def test_closed_clients_refuse_work(fake: ThreadedFakeCluster) -> None:
    producer = Producer(bootstrap_servers=fake.bootstrap)
    producer.close()
    producer.close()  # twice is fine
    with pytest.raises(ClientClosedError):
        producer.send("t", b"v")


def test_bad_configuration_fails_in_the_constructor() -> None:
    with pytest.raises(ConfigError, match="unknown consumer property 'acks'"):
        Consumer(acks=1)
    assert not [t for t in threading.enumerate() if t.name == "backbone-consumer"], "no thread left behind"
