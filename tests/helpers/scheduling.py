"""How the suite is spread over pytest-xdist workers (`ops/test -n N`): whole files go to a worker, so their
module fixtures (a cluster, a topology) start once, and the rooms below go whole to one worker each, since
their tests share one session fixture or something on the machine only one of them may hold at a time."""

from __future__ import annotations

# (prefix of a test's node id, the name of the one scope every test under it shares)
KEPT_TOGETHER = (
    # One docker compose topology for the suite, and docker/build must not race itself.
    ("tests/system/", "docker-topology"),
    # One live 3-broker cluster, and the clients' builds share a cache directory.
    ("tests/conformance/", "conformance-cluster"),
    # Spark's JVMs are heavy: two jobs at once on a small machine only make both slow.
    ("tests/integration/spark/", "spark"),
    # `dev up` at the usual ports (9092, 2181, ...), and the walk that holds them all.
    ("tests/integration/test_dev_cluster.py", "usual-ports"),
    ("tests/integration/test_readme_walk.py", "usual-ports"),
)


def scope_of(nodeid: str) -> str:
    """The scope a test is scheduled with: its room's shared scope, else its file."""
    for prefix, scope in KEPT_TOGETHER:
        if nodeid.startswith(prefix):
            return scope
    return nodeid.split("::", 1)[0]


# The longest rooms start first, so that none of them is left to start when the other workers are done.
LONGEST_FIRST = ("tests/system/", "tests/integration/spark/", "tests/conformance/")


def start_rank(nodeid: str) -> int:
    """Where a test's room starts: the longest rooms first, then every other test in pytest's order."""
    ranks = (rank for rank, prefix in enumerate(LONGEST_FIRST) if nodeid.startswith(prefix))
    return next(ranks, len(LONGEST_FIRST))
