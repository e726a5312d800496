"""Requests as real clients send them, at every version the broker advertises, are answered."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from backbone.protocol.api import SUPPORTED_VERSIONS, ApiKey
from backbone.protocol.codec import request_type
from tests.helpers.entities import entity_of
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration


def test_metadata_for_all_topics_with_spare_bytes_is_answered(broker) -> None:
    # librdkafka 2.x sends Metadata v12 with a null topics array and three spare bytes after it.
    request = entity_of(request_type(ApiKey.METADATA, 12), {"topics": None})
    with RawConnection(broker.bootstrap) as connection:
        answer = connection.request(request, spare=b"\x00\x00\x00")
        assert [int(b.node_id) for b in answer.brokers] == [broker.broker_id]
        # The connection stays open for the next request.
        assert connection.request(request).controller_id >= 0


@pytest.mark.parametrize("version", list(SUPPORTED_VERSIONS[ApiKey.CREATE_TOPICS]))
def test_create_topics_is_answered_at_every_version(broker, version: int) -> None:
    name = f"created-v{version}"
    request = entity_of(
        request_type(ApiKey.CREATE_TOPICS, version),
        {
            "topics": [
                {"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}
            ],
            "timeout": datetime.timedelta(seconds=10),
        },
    )
    with RawConnection(broker.bootstrap) as connection:
        (result,) = connection.request(request).topics
    assert (result.name, result.error_code) == (name, ErrorCode.none)
    if version >= 5:  # KIP-525: the new topic's partitions and configs come back
        assert result.num_partitions == 2
        assert any(c.name == "cleanup.policy" for c in result.configs)
