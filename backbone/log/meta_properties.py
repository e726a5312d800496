"""`meta.properties` in each log directory: which cluster and broker the directory's data belongs to.

Kafka (ZooKeeper mode) writes `version=0`, `broker.id` and `cluster.id` there on first start and checks
them on every start, so a broker pointed at another cluster's ZooKeeper (a wrong `zookeeper.connect`,
or a new ZooKeeper on the same address) refuses to join it instead of mixing two clusters' data.
The same file, the same keys.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from backbone.log.files import write_atomically
from backbone.properties import parse_properties

__all__ = ["META_PROPERTIES", "InconsistentBrokerIdError", "InconsistentClusterIdError", "LogDirIdentity"]

META_PROPERTIES = "meta.properties"


class InconsistentClusterIdError(RuntimeError):
    """The log directories belong to another cluster than the one in ZooKeeper (Kafka's
    InconsistentClusterIdException); the broker must not start or stay registered."""


class InconsistentBrokerIdError(RuntimeError):
    """The log directories belong to another broker id (Kafka's InconsistentBrokerIdException)."""


class LogDirIdentity:
    """The cluster and broker ids recorded in a broker's log directories."""

    def __init__(self, log_dirs: Sequence[Path | str], broker_id: int) -> None:
        self.log_dirs = [Path(directory) for directory in log_dirs]
        self.broker_id = broker_id

    def stored_cluster_id(self) -> str | None:
        """The cluster id the directories record (None if none does); raises if they disagree, or if
        they record another broker id."""
        found: dict[Path, dict[str, str]] = {}
        for directory in self.log_dirs:
            path = directory / META_PROPERTIES
            if path.exists():
                found[path] = parse_properties(path.read_text(encoding="utf-8"), str(path))
        for path, values in found.items():
            if "broker.id" in values and int(values["broker.id"]) != self.broker_id:
                raise InconsistentBrokerIdError(
                    f"Configured broker.id {self.broker_id} doesn't match stored broker.id "
                    f"{values['broker.id']} in {path}. If you moved your data, make sure your configured "
                    "broker.id matches. If you intend to create a new broker, you should remove all data "
                    "in your data directories (log.dirs)."
                )
        ids = {values["cluster.id"]: path for path, values in found.items() if values.get("cluster.id")}
        if len(ids) > 1:
            listed = ", ".join(f"{cluster_id} in {path}" for cluster_id, path in ids.items())
            raise InconsistentClusterIdError(f"The log directories belong to different clusters: {listed}.")
        return next(iter(ids), None)

    def check(self, zookeeper_cluster_id: str | None, stored: str | None) -> None:
        """Raise InconsistentClusterIdError unless ZooKeeper's cluster id is the one stored (if any)."""
        if stored is not None and zookeeper_cluster_id != stored:
            raise InconsistentClusterIdError(
                f"The Cluster ID {zookeeper_cluster_id} doesn't match stored clusterId {stored} in "
                f"{META_PROPERTIES} of {', '.join(map(str, self.log_dirs))}. The broker is trying to join "
                "the wrong cluster. Configured zookeeper.connect may be wrong."
            )

    def record(self, cluster_id: str) -> None:
        """Write meta.properties into every directory that has none yet."""
        text = (
            f"#\n#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n"
            f"cluster.id={cluster_id}\nversion=0\nbroker.id={self.broker_id}\n"
        )
        for directory in self.log_dirs:
            path = directory / META_PROPERTIES
            if not path.exists():
                directory.mkdir(parents=True, exist_ok=True)
                write_atomically(path, text.encode())
