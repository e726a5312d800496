"""kio request entities the broker tests send often."""

from __future__ import annotations

import datetime

from kio.schema.init_producer_id.v4 import request as init_producer_id
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.metadata.v12 import request as metadata
from kio.schema.produce.v9 import request as produce
from kio.static.primitive import i32Timedelta


def millis(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def produce_request(topic: str, partition: int, records: bytes, acks: int = -1) -> produce.ProduceRequest:
    return produce_request_for(topic, {partition: records}, acks)


def produce_request_for(topic: str, records: dict[int, bytes], acks: int = -1) -> produce.ProduceRequest:
    """One Produce request with a record set for each of the topic's partitions named in `records`."""
    return produce.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=millis(10_000),
        topic_data=(
            produce.TopicProduceData(
                name=topic,
                partition_data=tuple(
                    produce.PartitionProduceData(index=index, records=batch)
                    for index, batch in records.items()
                ),
            ),
        ),
    )


def latest_offset_request(topic: str, partition: int, timestamp: int = -1) -> list_offsets.ListOffsetsRequest:
    return list_offsets.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            list_offsets.ListOffsetsTopic(
                name=topic,
                partitions=(
                    list_offsets.ListOffsetsPartition(partition_index=partition, timestamp=timestamp),
                ),
            ),
        ),
    )


def metadata_request(*topics: str) -> metadata.MetadataRequest:
    return metadata.MetadataRequest(
        topics=tuple(metadata.MetadataRequestTopic(topic_id=None, name=t) for t in topics),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )


def init_producer_id_request() -> init_producer_id.InitProducerIdRequest:
    return init_producer_id.InitProducerIdRequest(
        transactional_id=None, transaction_timeout=millis(60_000), producer_id=-1, producer_epoch=-1
    )
