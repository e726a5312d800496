"""librdkafka's own integration tests, a quick subset, against a live 3-broker Backbone cluster.

The whole suite runs with `ops/conformance.d/librdkafka` (its figures: docs/conformance/librdkafka.json).
librdkafka is built from its pinned source once per machine into ~/.cache/backbone (about 3 minutes);
later runs reuse the build.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.client_suites import librdkafka

pytestmark = pytest.mark.conformance


@pytest.mark.timeout(1800)  # a first run builds librdkafka and its tests
def test_librdkafka_quick_subset_passes(tmp_path: Path) -> None:
    run = librdkafka.run_suite(",".join(librdkafka.QUICK_TESTS), 2, tmp_path, ("default",))
    states = {name: (outcome.state, outcome.reason) for name, outcome in run.outcomes.items()}
    assert {name[:4] for name in states} == set(librdkafka.QUICK_TESTS), states
    assert {name: s for name, s in states.items() if s[0] != "PASSED"} == {}
