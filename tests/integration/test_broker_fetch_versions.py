"""Fetch at every version the broker advertises serves the records (older versions lack some fields)."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from backbone.protocol.api import SUPPORTED_VERSIONS, ApiKey
from backbone.protocol.codec import request_type
from backbone.protocol.entities import entity_of
from tests.helpers.batches import build_batch
from tests.helpers.requests import metadata_request, produce_request
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

TOPIC = "fetched"


def fetch_request(version: int) -> object:
    # Fetch v4-v8 (rskafka sends v4) have no current_leader_epoch; v9 on carries it (-1: unknown).
    return entity_of(
        request_type(ApiKey.FETCH, version),
        {
            "replica_id": -1,
            "max_wait": datetime.timedelta(milliseconds=100),
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [
                        {
                            "partition": 0,
                            "fetch_offset": 0,
                            "partition_max_bytes": 1 << 20,
                            "current_leader_epoch": -1,
                        }
                    ],
                }
            ],
        },
    )


def test_fetch_serves_records_at_every_version(broker, wait_for) -> None:
    with RawConnection(broker.bootstrap) as connection:

        def leader_known() -> bool:
            topic = connection.request(metadata_request(TOPIC)).topics[0]
            return topic.error_code == ErrorCode.none and topic.partitions[0].leader_id >= 0

        wait_for(leader_known, timeout=20, what="the topic's leader")
        batch = build_batch(3)
        produced = connection.request(produce_request(TOPIC, 0, batch)).responses[0].partition_responses[0]
        assert produced.error_code == ErrorCode.none
        for version in SUPPORTED_VERSIONS[ApiKey.FETCH]:
            answer = connection.request(fetch_request(version))
            (partition,) = answer.responses[0].partitions
            assert (version, partition.error_code) == (version, ErrorCode.none)
            # The broker stamps the partition leader epoch (bytes 12-15); the rest is the batch as sent.
            records = bytes(partition.records)
            assert (version, len(records), records[16:]) == (version, len(batch), batch[16:])
