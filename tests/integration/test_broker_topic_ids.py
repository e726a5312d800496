"""Metadata v10+ carries each topic's id, and a deleted and re-created topic comes back with a new one
(librdkafka 2.x tells a re-created topic by its id, and fails what it queued for the old one)."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from backbone.client import Admin, NewTopic
from backbone.protocol.errors import TopicAlreadyExistsError
from tests.helpers.requests import metadata_request
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

TOPIC = "identified"


def topic_id(bootstrap: str) -> uuid.UUID:
    with RawConnection(bootstrap) as connection:
        (topic,) = connection.request(metadata_request(TOPIC)).topics
    assert topic.error_code == ErrorCode.none
    return topic.topic_id


def test_topic_ids_are_reported_and_new_for_a_recreated_topic(broker, wait_for) -> None:
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 3, 1)])
        first = topic_id(broker.bootstrap)
        assert first != uuid.UUID(int=0)
        admin.delete_topics([TOPIC])
        wait_for(lambda: TOPIC not in admin.list_topics(), timeout=20, what="the topic gone")

        def created() -> bool:
            try:
                admin.create_topics([NewTopic(TOPIC, 1, 1)])
            except TopicAlreadyExistsError:  # marked for deletion until the broker has deleted its data
                return False
            return True

        wait_for(created, timeout=20, what="the topic created again")
        wait_for(
            lambda: topic_id(broker.bootstrap) not in (first, uuid.UUID(int=0)), timeout=20, what="new id"
        )
