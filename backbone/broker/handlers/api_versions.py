"""ApiVersions: exactly the APIs and versions the broker's table holds."""

from __future__ import annotations

from backbone.broker.network import Handler, RequestContext
from backbone.protocol.api import ApiTable


def api_versions_handler(table: ApiTable) -> Handler:
    """Answers with the versions `table` holds when asked, so APIs registered later are included."""

    async def handle(context: RequestContext) -> object:
        # The body (client software name and version, v3+) is only informational; validate it decodes.
        context.decode()
        return table.api_versions_response(context.api_version)

    return handle
