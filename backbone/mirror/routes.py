"""Where a mirror's source topics go: the target topic of each, made and grown to the source's partition
count, and the source topics followed for growth and re-creation (a new topic id).

`Routes` only talks to the two clusters' admins; what the mirror does with a re-created topic (seek to its
start, forget what was in flight) stays in the mirror.
"""

from __future__ import annotations

import logging
from typing import Any

from backbone.client import AsyncAdmin, KafkaClientError, KafkaError, NewTopic
from backbone.mirror.config import MirrorConfig
from backbone.mirror.state import Route
from backbone.protocol.errors import InvalidPartitionsError, TopicAlreadyExistsError

log = logging.getLogger(__name__)


class Routes:
    def __init__(self, config: MirrorConfig, source_admin: AsyncAdmin, target_admin: AsyncAdmin) -> None:
        self.config = config
        self.source_admin = source_admin
        self.target_admin = target_admin
        self._routes: dict[str, Route] = {}
        self.topic_ids: dict[str, str | None] = {}  # source topic -> the id its commits record

    def known(self, topic: str) -> Route | None:
        """The topic's route, if one was made (no cluster asked)."""
        return self._routes.get(topic)

    def topics(self) -> set[str]:
        return set(self._routes)

    async def route(self, topic: str, partition: int) -> Route:
        route = self._routes.get(topic)
        if route is None or partition >= route.source_partitions:  # new topic, or partitions were added
            route = await self.make(topic)
        return route

    async def make(self, topic: str) -> Route:
        """Create (or grow) the target topic of `topic` and remember the route to it."""
        source = (await self.source_admin.describe_topics([topic]))[topic]
        target_topic = self.config.target_topic(topic)
        count = len(source.partitions)
        try:
            await self.target_admin.create_topics(
                [
                    NewTopic(
                        target_topic, count, self.config.replication_factor, configs=self.config.topic_configs
                    )
                ]
            )
            log.info("event=mirror_topic_created topic=%s partitions=%d", target_topic, count)
        except TopicAlreadyExistsError:
            pass  # made by another mirror, or earlier
        target = len((await self.target_admin.describe_topics([target_topic]))[target_topic].partitions)
        if target < count:  # the source grew: so does the target (never the other way), as MirrorMaker 2
            try:
                await self.target_admin.create_partitions({target_topic: count})
                log.info(
                    "event=mirror_target_partitions_grown topic=%s from=%d to=%d", target_topic, target, count
                )
            except InvalidPartitionsError:
                pass  # another mirror grew it first
            target = count
        self.topic_ids[topic] = source.topic_id
        route = Route(target_topic, count, target, source.topic_id)
        self._routes[topic] = route
        return route

    async def recreated_sources(self, topics: set[str]) -> dict[str, tuple[Route, str | None]]:
        """Follow the routed source topics: a grown one grows its target. Returns the re-created ones (a
        new topic id): topic -> (its old route, its new id); the caller makes their new routes."""
        recreated: dict[str, tuple[Route, str | None]] = {}
        for topic, source in (await self.describe_sources(topics)).items():
            route = self._routes.get(topic)
            if route is None:
                continue
            if (
                None not in (route.source_topic_id, source.topic_id)
                and route.source_topic_id != source.topic_id
            ):
                recreated[topic] = (route, source.topic_id)
            elif len(source.partitions) > route.source_partitions:
                await self.make(topic)
        return recreated

    async def describe_sources(self, topics: set[str]) -> dict[str, Any]:
        """The source topics' descriptions (those found when some fail); empty when none answered."""
        if not topics:
            return {}
        try:
            return await self.source_admin.describe_topics(topics)
        except (KafkaError, KafkaClientError) as error:
            partial = getattr(error, "results", None)  # what a partly failed describe still found
            if not partial:
                log.warning("event=mirror_source_check_failed topics=%d error=%r", len(topics), str(error))
                return {}
            return partial
