"""The idempotent producer: a retried batch is answered without being written twice, out-of-order
sequences are refused, and the producer state survives a clean restart and a kill -9."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from backbone.protocol.records import RecordBatchBuilder
from tests.helpers.requests import (
    init_producer_id_request,
    latest_offset_request,
    metadata_request,
    produce_request,
)
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

TOPIC = "idempotent"


def batch(producer_id: int, sequence: int, count: int = 3) -> bytes:
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    for i in range(count):
        builder.append(None, b"seq %d" % (sequence + i))
    return builder.build()


def produce(connection: RawConnection, records: bytes) -> tuple[ErrorCode, int]:
    response = connection.request(produce_request(TOPIC, 0, records))
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def log_end(connection: RawConnection) -> int:
    response = connection.request(latest_offset_request(TOPIC, 0))
    return response.topics[0].partitions[0].offset


def wait_for_leader(connection: RawConnection, wait_for) -> None:
    def has_leader() -> bool:
        topic = connection.request(metadata_request(TOPIC)).topics[0]
        return topic.error_code == ErrorCode.none and topic.partitions[0].leader_id >= 0

    wait_for(has_leader, timeout=20, what="a leader for the topic")


@pytest.mark.parametrize("restart", ["sigterm", "sigkill"])
def test_retries_are_not_written_twice_even_after_a_restart(broker, wait_for, restart: str) -> None:
    with RawConnection(broker.bootstrap) as connection:
        wait_for_leader(connection, wait_for)
        producer_id = connection.request(init_producer_id_request()).producer_id
        assert producer_id >= 0
        assert produce(connection, batch(producer_id, 0)) == (ErrorCode.none, 0)
        # The same batch again, as a producer retries after a lost answer: same offset, nothing written.
        assert produce(connection, batch(producer_id, 0)) == (ErrorCode.none, 0)
        assert log_end(connection) == 3
        error, _ = produce(connection, batch(producer_id, 5))
        assert error == ErrorCode.out_of_order_sequence_number
        assert produce(connection, batch(producer_id, 3)) == (ErrorCode.none, 3)
        assert log_end(connection) == 6
    if restart == "sigterm":
        broker.stop()
    else:
        broker.kill()
    broker.start()
    with RawConnection(broker.bootstrap) as connection:
        wait_for_leader(connection, wait_for)
        assert produce(connection, batch(producer_id, 3)) == (ErrorCode.none, 3)
        assert log_end(connection) == 6
        assert produce(connection, batch(producer_id, 6)) == (ErrorCode.none, 6)
        assert log_end(connection) == 9
