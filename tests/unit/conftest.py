"""Fixtures shared by unit tests: in-process fake clusters and logs in a temporary directory.

A module asks the fake cluster for topics with `pytest.mark.fake_topic(name, partitions)` (at module or
test level); `fake` and `threaded_fake` create each such topic before the test starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.helpers.batches import LogFactory
from tests.helpers.fake_cluster import FakeCluster, ThreadedFakeCluster

FAKE_BROKERS = 2


def requested_topics(request: pytest.FixtureRequest) -> list[tuple[str, int]]:
    """The (name, partitions) of every `fake_topic` marker on the test, nearest first."""
    return [(marker.args[0], marker.args[1]) for marker in request.node.iter_markers("fake_topic")]


@pytest.fixture
async def fake(request: pytest.FixtureRequest) -> AsyncIterator[FakeCluster]:
    """A fake cluster of two brokers on loopback, serving the Kafka protocol from memory."""
    async with FakeCluster(FAKE_BROKERS) as cluster:
        for name, partitions in requested_topics(request):
            cluster.create_topic(name, partitions)
        yield cluster


@pytest.fixture
def threaded_fake(request: pytest.FixtureRequest) -> Iterator[ThreadedFakeCluster]:
    """The same fake cluster on its own loop thread, for the blocking clients."""
    with ThreadedFakeCluster(brokers=FAKE_BROKERS) as cluster:
        for name, partitions in requested_topics(request):
            cluster.call(cluster.cluster.create_topic, name, partitions)
        yield cluster


@pytest.fixture
def make_log(tmp_path: Path) -> Iterator[LogFactory]:
    """Opens logs under the test's temporary directory and closes them all after the test."""
    with LogFactory(tmp_path) as factory:
        yield factory
