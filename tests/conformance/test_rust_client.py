"""rskafka, a pure-Rust client with its own protocol code, against a live Backbone cluster.

The program (ops/client_suites/rust) is built by cargo from crates.io into a target directory in the cache
(~/.cache/backbone), so only the first run on a machine compiles its crates (some minutes); later runs
reuse them.
"""

from __future__ import annotations

import pytest

from ops.client_suites import rust_client
from tests.conformance.support import Cluster

pytestmark = pytest.mark.conformance


@pytest.mark.timeout(1800)  # a first build compiles ~100 crates
def test_rskafka_creates_produces_consumes_lists_offsets_and_deletes(cluster: Cluster) -> None:
    binary = rust_client.build()
    topic = cluster.topic("rskafka")
    completed = rust_client.run(binary, cluster.bootstrap, topic)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == rust_client.expected_lines(topic)
