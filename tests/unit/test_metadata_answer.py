"""The Metadata answer for a topic whose partitions are not all led: errors per partition, as Kafka."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from backbone.broker.handlers.common import response_module
from backbone.broker.handlers.metadata import _topic
from backbone.coordination.znodes import PartitionState, TopicAssignment
from backbone.protocol.api import ApiKey

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("version", [1, 12])
def test_a_partition_without_state_or_leader_errs_alone(version: int) -> None:
    cache: Any = SimpleNamespace(  # the three attributes the answer reads
        topics={"t": TopicAssignment("t", {0: (1, 2), 1: (2, 1), 2: (1, 2)})},
        # Partition 0 is led; 1 has no state yet (just created); 2's leader is gone.
        states={("t", 0): PartitionState(1, 3, (1, 2), 1), ("t", 2): PartitionState(7, 2, (7,), 1)},
        brokers={1: None, 2: None},
    )
    module = response_module(ApiKey.METADATA, version)

    topic = _topic(cache, set(), module, "t", pending=False)

    assert topic.error_code == ErrorCode.none
    assert [(p.partition_index, p.error_code, p.leader_id) for p in topic.partitions] == [
        (0, ErrorCode.none, 1),
        (1, ErrorCode.leader_not_available, -1),
        (2, ErrorCode.leader_not_available, -1),
    ]
