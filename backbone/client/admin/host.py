"""What the admin mixins (groups, replicas) use of AsyncAdmin, declared once so a type checker can follow
their calls; AsyncAdmin defines each of these for real."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from backbone.client.cluster import ClusterClient
    from backbone.client.structs import OffsetAndTimestamp, TopicPartition

T = TypeVar("T")


class AdminHost:
    """The base of AsyncAdmin's mixins: the connection, the timeout and the calls they share with it."""

    cluster: ClusterClient
    _timeout_ms: int

    if TYPE_CHECKING:

        async def _retrying(
            self, attempt: Callable[[], Awaitable[T]], what: str, timeout_ms: int | None
        ) -> T: ...

        async def _controller_request(self, api_key: int, encode: Any) -> Any: ...

        async def list_offsets(
            self,
            specs: Mapping[TopicPartition, int | str],
            *,
            read_committed: bool = False,
            timeout_ms: int | None = None,
        ) -> dict[TopicPartition, OffsetAndTimestamp]: ...
