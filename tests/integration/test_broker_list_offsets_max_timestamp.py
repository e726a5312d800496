"""ListOffsets MAX_TIMESTAMP names the record with the largest timestamp, wherever it sits in its batch."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from backbone.client.producer.batch_builder import CappedBatchBuilder
from backbone.protocol.compression import Codec
from tests.helpers.requests import latest_offset_request, metadata_request, produce_request
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

TOPIC = "stamped"
MAX_TIMESTAMP = -3


def batch_with_timestamps(*timestamps: int) -> bytes:
    builder = CappedBatchBuilder(Codec.NONE, None, 1 << 20)
    for offset, timestamp in enumerate(timestamps):
        assert builder.append(offset, timestamp, None, b"value", []) is not None
    return bytes(builder.build())


def test_max_timestamp_is_the_offset_of_the_record_holding_it(broker, wait_for) -> None:
    # librdkafka's admin test: one batch stamped +100, +400, +250 answers offset 1, not the batch's last.
    base = 10_000_000
    with RawConnection(broker.bootstrap) as connection:

        def leader_known() -> bool:
            topic = connection.request(metadata_request(TOPIC)).topics[0]
            return topic.error_code == ErrorCode.none and topic.partitions[0].leader_id >= 0

        wait_for(leader_known, timeout=20, what="the topic's leader")
        batch = batch_with_timestamps(base + 100, base + 400, base + 250)
        produced = connection.request(produce_request(TOPIC, 0, batch)).responses[0].partition_responses[0]
        assert produced.error_code == ErrorCode.none
        answer = connection.request(latest_offset_request(TOPIC, 0, MAX_TIMESTAMP))
        partition = answer.topics[0].partitions[0]
    assert (partition.error_code, partition.offset, partition.timestamp) == (ErrorCode.none, 1, base + 400)
