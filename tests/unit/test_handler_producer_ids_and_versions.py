"""InitProducerId built from its producer id allocator alone, and ApiVersions from the API table alone
(no broker, no network, no ZooKeeper)."""

from __future__ import annotations

import pytest
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init_producer_id

from backbone.broker.handlers.api_versions import api_versions_handler
from backbone.broker.handlers.init_producer_id import ProducerIdAllocator, init_producer_id_handler
from backbone.coordination.znodes import ProducerIdBlock
from backbone.protocol.api import ApiKey, ApiTable
from tests.helpers.handler_context import handler_context
from tests.helpers.requests import init_producer_id_request

pytestmark = pytest.mark.unit


class ConsecutiveBlocks:
    """Reserves blocks of `size` ids one after another, as the cluster store's counter in ZooKeeper does."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.reserved: list[ProducerIdBlock] = []

    async def __call__(self) -> ProducerIdBlock:
        first = self.reserved[-1].last + 1 if self.reserved else 0
        self.reserved.append(ProducerIdBlock(1, first, first + self.size - 1))
        return self.reserved[-1]


async def test_producer_ids_are_unique_and_a_new_block_is_reserved_only_when_one_is_used_up() -> None:
    blocks = ConsecutiveBlocks(size=2)
    handle = init_producer_id_handler(ProducerIdAllocator(blocks))
    answers = [await handle(handler_context(init_producer_id_request())) for _ in range(5)]
    assert [(a.error_code, a.producer_id, a.producer_epoch) for a in answers] == [
        (ErrorCode.none, producer_id, 0) for producer_id in range(5)
    ]
    assert [(b.first, b.last) for b in blocks.reserved] == [(0, 1), (2, 3), (4, 5)]


async def test_a_transactional_id_is_refused_without_spending_an_id() -> None:
    blocks = ConsecutiveBlocks(size=10)
    handle = init_producer_id_handler(ProducerIdAllocator(blocks))
    transactional = init_producer_id.InitProducerIdRequest(
        transactional_id="orders",
        transaction_timeout=init_producer_id_request().transaction_timeout,
        producer_id=-1,
        producer_epoch=-1,
    )
    refused = await handle(handler_context(transactional))
    assert (refused.error_code, refused.producer_id) == (ErrorCode.transactional_id_authorization_failed, -1)
    assert blocks.reserved == []


async def test_api_versions_lists_what_the_table_holds_when_asked() -> None:
    table: ApiTable = ApiTable()
    table.register(ApiKey.API_VERSIONS, api_versions_handler(table))
    request = api_versions.ApiVersionsRequest(client_software_name="test", client_software_version="1")
    handle = table.handler(ApiKey.API_VERSIONS, 3)
    before = await handle(handler_context(request))
    assert [int(k.api_key) for k in before.api_keys] == [ApiKey.API_VERSIONS]
    # A later registration is in the next answer: the handler reads the table, not a copy made at start.
    table.register(ApiKey.METADATA, handle)  # any handler: only the table's entry matters here
    after = await handle(handler_context(request))
    assert sorted(int(k.api_key) for k in after.api_keys) == sorted([ApiKey.API_VERSIONS, ApiKey.METADATA])
    metadata = table.versions(ApiKey.METADATA)
    assert metadata is not None
    (row,) = [k for k in after.api_keys if k.api_key == ApiKey.METADATA]
    assert row.max_version == metadata.max
