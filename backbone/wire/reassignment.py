"""A partition reassignment in progress (KIP-455) as Kafka states it: all replicas (target first), those
being added and those being removed. The controller records it in the topic's znode and answers
ListPartitionReassignments with it; the admin client hands the same shape to its callers."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PartitionReassignment"]


class PartitionReassignment(NamedTuple):
    """A reassignment in progress: all replicas (target first), those being added and being removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replicas a cancellation goes back to."""
        return tuple(r for r in self.replicas if r not in self.adding)
