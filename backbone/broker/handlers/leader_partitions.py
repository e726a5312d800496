"""The handlers of requests that ask each partition's leader one thing, topic by topic (ListOffsets,
OffsetForLeaderEpoch, DeleteRecords): each partition answers on its own, with its fields or, when the work
raised, the failure's fields and the error code."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from backbone.broker.handlers.common import build, error_code_of, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.protocol.api import ApiKey

# work(request, topic name, partition index, the partition as asked) -> the answer's fields
Work = Callable[[Any, str, int, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Shape:
    """Where an API's response keeps its answers: kio's class names and the fields naming each item."""

    response: str
    topic_result: str
    partition_result: str
    topic_field: str = "name"  # of the request's topics and the response's topic results alike
    partition_field: str = "partition_index"


def leader_partitions_handler(api_key: ApiKey, shape: Shape, work: Work, failed: dict[str, Any]) -> Handler:
    async def handle(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(api_key, context.api_version)
        topic_result, partition_result = (
            getattr(module, shape.topic_result),
            getattr(module, shape.partition_result),
        )
        topics = []
        for topic in request.topics:
            name = getattr(topic, shape.topic_field)
            answers = []
            for asked in topic.partitions:
                index = getattr(asked, shape.partition_field)
                try:
                    fields, error = await work(request, name, index, asked), ErrorCode.none
                except Exception as exc:
                    fields, error = failed, error_code_of(exc)
                answers.append(
                    build(partition_result, error_code=error, **{shape.partition_field: index}, **fields)
                )
            topics.append(build(topic_result, **{shape.topic_field: name}, partitions=tuple(answers)))
        return build(getattr(module, shape.response), throttle_time=throttle(), topics=tuple(topics))

    return handle
