"""Which tests share a pytest-xdist worker, and which start first (tests/helpers/scheduling.py)."""

from __future__ import annotations

import pytest

from tests.helpers.scheduling import scope_of, start_rank

pytestmark = pytest.mark.unit


def test_rooms_sharing_one_cluster_or_topology_are_one_scope() -> None:
    system = {scope_of(f"tests/system/{f}::t") for f in ("test_compose_topology.py", "test_compose_spark.py")}
    assert system == {"docker-topology"}
    assert scope_of("tests/conformance/test_confluent_kafka.py::t") == scope_of(
        "tests/conformance/test_python_clients.py::t[x]"
    )
    assert scope_of("tests/integration/test_dev_cluster.py::a") == scope_of(
        "tests/integration/test_readme_walk.py::b"
    )


def test_every_other_test_is_scheduled_with_its_file() -> None:
    assert scope_of("tests/integration/test_mirror.py::test_a[1]") == "tests/integration/test_mirror.py"
    assert scope_of("tests/unit/test_times.py::test_b") == "tests/unit/test_times.py"
    mirror, leadership = "tests/integration/test_mirror.py::x", "tests/integration/test_leadership.py::x"
    assert scope_of(mirror) != scope_of(leadership)


def test_the_longest_rooms_start_first() -> None:
    order = ["tests/unit/test_times.py::a", "tests/conformance/c.py::b", "tests/system/s.py::c"]
    assert sorted(order, key=start_rank) == [order[2], order[1], order[0]]
