"""ApiVersions: exactly the APIs and versions the broker's table holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from backbone.broker.network import RequestContext
from backbone.protocol.api import ApiKey

if TYPE_CHECKING:
    from backbone.broker.server import Broker


def register(broker: Broker) -> None:
    table = broker.api_table

    async def handle(context: RequestContext) -> object:
        # The body (client software name and version, v3+) is only informational; validate it decodes.
        context.decode()
        return table.api_versions_response(context.api_version)

    table.register(ApiKey.API_VERSIONS, handle)
