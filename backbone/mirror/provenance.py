"""The provenance header a mirror adds to every record it copies: where the record was read.

`backbone.provenance: dc1:3:1842` says the record was copied from cluster dc1, partition 3, offset 1842.
A record mirrored twice carries two such headers (one per hop), so a mirror can refuse to copy a record
into a cluster it has already been in (active-active safe), and duplicates can be recognised downstream by
the first hop's (cluster, partition, offset).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

HEADER = "backbone.provenance"


class Provenance(NamedTuple):
    cluster: str
    partition: int
    offset: int

    def encode(self) -> bytes:
        return value_prefix(self.cluster, self.partition) + b"%d" % self.offset

    @classmethod
    def decode(cls, value: bytes) -> Provenance:
        cluster, partition, offset = value.decode().rsplit(":", 2)
        return cls(cluster, int(partition), int(offset))


def value_prefix(cluster: str, partition: int) -> bytes:
    """The header value up to the offset: a copier of one partition builds each value as prefix + offset."""
    return f"{cluster}:{partition}:".encode()


def hops(headers: Iterable[tuple[str, bytes | None]]) -> list[Provenance]:
    """Every provenance header of a record, oldest hop first (malformed ones are ignored)."""
    found = []
    for name, value in headers:
        if name == HEADER and value:
            try:
                found.append(Provenance.decode(value))
            except ValueError:
                continue
    return found


def has_been_in(headers: Iterable[tuple[str, bytes | None]], cluster: str) -> bool:
    """True when the record was read from `cluster` at some hop: copying it there would send it back."""
    return any(hop.cluster == cluster for hop in hops(headers))


def origin(headers: Iterable[tuple[str, bytes | None]]) -> Provenance | None:
    """Where the record was first read by a mirror (None for a record no mirror has copied)."""
    found = hops(headers)
    return found[0] if found else None
