"""The blocking Producer, Consumer and Admin, each on its own loop thread, against a threaded fake cluster."""

from __future__ import annotations

import threading

import pytest

from backbone.client import (
    Admin,
    BufferExhaustedError,
    ClientClosedError,
    ConfigError,
    Consumer,
    KafkaTimeoutError,
    NewTopic,
    Producer,
    RecordMetadata,
    TopicPartition,
)
from tests.helpers.fake_cluster import ThreadedFakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.fake_topic("t", 2)]


def test_produce_then_consume_blocking(threaded_fake: ThreadedFakeCluster) -> None:
    callbacks: list[tuple[object, object]] = []
    with Producer(bootstrap_servers=threaded_fake.bootstrap, linger_ms=2) as producer:
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
        bootstrap_servers=threaded_fake.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50
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


def test_sends_from_many_threads(threaded_fake: ThreadedFakeCluster) -> None:
    with Producer(bootstrap_servers=threaded_fake.bootstrap) as producer:
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


def test_send_blocks_on_a_full_buffer_then_raises(threaded_fake: ThreadedFakeCluster) -> None:
    threaded_fake.call(lambda: threaded_fake.cluster.create_topic("orphan", 1, leaders=[9]))
    with Producer(
        bootstrap_servers=threaded_fake.bootstrap, buffer_memory=1000, max_block_ms=100
    ) as producer:
        with pytest.raises(BufferExhaustedError):
            for _ in range(50):  # bounded: the buffer fills after a few
                producer.send("orphan", b"x" * 100)
        producer.close(timeout=0.1)


def test_a_callback_that_would_wait_for_memory_is_refused_rather_than_hung(
    threaded_fake: ThreadedFakeCluster,
) -> None:
    # Callbacks run on the loop's thread, which frees memory: waiting there for memory could never end.
    threaded_fake.call(lambda: threaded_fake.cluster.create_topic("orphan", 1, leaders=[9]))
    refused = threading.Event()

    def fill_the_buffer(_metadata: object, _error: object) -> None:
        try:
            for _ in range(50):  # bounded: the buffer fills after a few
                producer.send("orphan", b"x" * 100)
        except RuntimeError:
            refused.set()

    with Producer(
        bootstrap_servers=threaded_fake.bootstrap, buffer_memory=1000, max_block_ms=30_000
    ) as producer:
        producer.send("t", b"v", partition=0, callback=fill_the_buffer)
        assert refused.wait(10), "refused at once, not after max.block.ms"
        producer.close(timeout=0.1)


def test_sends_wait_for_memory_then_proceed(threaded_fake: ThreadedFakeCluster) -> None:
    # buffer.memory holds a few records; linger.ms would keep batches for 10 s: the waiting sends must
    # both make batches go and get the memory their answers free.
    options = {"buffer.memory": 2000, "linger.ms": 10_000, "max.block.ms": 5000}
    with Producer(options, bootstrap_servers=threaded_fake.bootstrap) as producer:
        futures = [producer.send("t", b"%03d" % i + b"x" * 97, partition=1) for i in range(60)]
        assert sum(f.done() for f in futures) >= 60 - 2000 // 100, "only what fits in memory waits"
        producer.flush(timeout=10)  # the last batch would linger
        assert [f.get(timeout=0).offset for f in futures] == list(range(60))
        assert producer.metrics()["buffer_available_bytes"] == 2000


def test_record_futures_callbacks_and_errbacks(threaded_fake: ThreadedFakeCluster) -> None:
    threaded_fake.call(lambda: threaded_fake.cluster.create_topic("orphan", 1, leaders=[9]))
    calls: list[tuple[str, object]] = []
    options = {"linger.ms": 1000, "delivery.timeout.ms": 1100, "request.timeout.ms": 100}
    with Producer(options, bootstrap_servers=threaded_fake.bootstrap) as producer:
        ok = producer.send("t", b"v", partition=0, callback=lambda md, exc: calls.append(("cb", exc)))
        ok.add_callback(lambda tag, md: calls.append((tag, md.offset)), "ok")
        ok.add_errback(lambda tag, exc: calls.append((tag, exc)), "not called")
        with pytest.raises(KafkaTimeoutError, match=r"not acknowledged within 0\.01 s"):
            ok.get(timeout=0.01)  # lingering: nothing was sent yet
        producer.flush(timeout=10)
        assert ok.succeeded() and ok.get(0) == RecordMetadata("t", 0, 0, ok.get(0).timestamp)
        lost = producer.send("orphan", b"v")
        lost.add_errback(lambda exc: calls.append(("errback", type(exc).__name__)))
        assert isinstance(lost.exception(timeout=10), KafkaTimeoutError)
        assert lost.failed()
    assert calls == [("cb", None), ("ok", 0), ("errback", "KafkaTimeoutError")]


def test_serializers_and_keys_through_the_blocking_send(threaded_fake: ThreadedFakeCluster) -> None:
    options = {"key.serializer": str.encode, "value.serializer": lambda v: repr(v).encode()}
    with Producer(options, bootstrap_servers=threaded_fake.bootstrap) as producer:
        future = producer.send("t", {"n": 1}, key="user-7", partition=1, timestamp_ms=42)
        assert future.get(timeout=10) == RecordMetadata("t", 1, 0, 42)
    assert threaded_fake.call(lambda: threaded_fake.cluster.values("t", 1)) == [b"{'n': 1}"]


def test_admin_blocking(threaded_fake: ThreadedFakeCluster) -> None:
    with Admin(bootstrap_servers=threaded_fake.bootstrap) as admin:
        admin.create_topics([NewTopic("made", 3)])
        assert "made" in admin.list_topics()
        assert len(admin.describe_topics(["made"])["made"].partitions) == 3
        assert admin.describe_cluster().controller_id == 0


def test_closed_clients_refuse_work(threaded_fake: ThreadedFakeCluster) -> None:
    producer = Producer(bootstrap_servers=threaded_fake.bootstrap)
    producer.close()
    producer.close()  # twice is fine
    with pytest.raises(ClientClosedError):
        producer.send("t", b"v")


def test_bad_configuration_fails_in_the_constructor() -> None:
    with pytest.raises(ConfigError, match="unknown consumer property 'acks'"):
        Consumer(acks=1)
    assert not [t for t in threading.enumerate() if t.name == "backbone-consumer"], "no thread left behind"
