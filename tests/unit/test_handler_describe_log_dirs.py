"""DescribeLogDirs against a real replica manager over a log directory (no broker, no network): each hosted
partition under its directory with its size, and only the partitions asked for."""

from __future__ import annotations

import pytest
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs

from backbone.broker.handlers.describe_log_dirs import describe_log_dirs_handler
from tests.helpers.batches import build_batch
from tests.helpers.broker_pieces import BROKER_ID, BrokerPieces, pieces_fixture
from tests.helpers.handler_context import handler_context

pytestmark = pytest.mark.unit

pieces = pieces_fixture()


async def describe(pieces: BrokerPieces, topics: tuple | None = None):
    handle = describe_log_dirs_handler(pieces.replicas, pieces.config.log_dirs)
    answer = await handle(handler_context(describe_log_dirs.DescribeLogDirsRequest(topics=topics)))
    (log_dir,) = answer.results
    return log_dir, {(t.name, p.partition_index): p for t in log_dir.topics for p in t.partitions}


async def test_each_hosted_partition_is_listed_under_its_directory_with_its_size(pieces) -> None:
    led = pieces.lead("t", 0, (BROKER_ID,))
    led.append_as_leader(memoryview(build_batch(3)))
    pieces.lead("t", 1, (BROKER_ID,))
    log_dir, partitions = await describe(pieces)
    assert log_dir.log_dir == pieces.config.log_dirs[0]
    assert set(partitions) == {("t", 0), ("t", 1)}
    assert partitions[("t", 0)].partition_size == led.log.size_in_bytes > 0
    assert partitions[("t", 1)].partition_size == 0
    assert log_dir.total_bytes > 0


async def test_only_the_asked_partitions_are_described(pieces) -> None:
    pieces.lead("t", 0, (BROKER_ID,))
    pieces.lead("t", 1, (BROKER_ID,))
    asked = (describe_log_dirs.DescribableLogDirTopic(topic="t", partitions=(1,)),)
    _, partitions = await describe(pieces, asked)
    assert set(partitions) == {("t", 1)}
