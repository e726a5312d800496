"""Our Kafka client: Producer, Consumer and Admin, an asyncio core with a synchronous face."""

from backbone.client.accumulator import RecordFuture
from backbone.client.admin import AsyncAdmin
from backbone.client.admin_groups import GroupDescription, GroupListing, MemberDescription
from backbone.client.admin_replicas import ReplicaInfo
from backbone.client.admin_types import (
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
    OffsetSpec,
    TopicDescription,
)
from backbone.client.cluster import BrokerInfo, PartitionInfo
from backbone.client.consumer import AsyncConsumer
from backbone.client.producer import AsyncProducer
from backbone.client.structs import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordList,
    RecordMetadata,
    TimestampType,
    TopicPartition,
)
from backbone.client.subscription import ConsumerRebalanceListener
from backbone.client.sync import Admin, Consumer, Producer
from backbone.wire.errors import (
    BufferExhaustedError,
    ClientClosedError,
    CommitFailedError,
    ConfigError,
    IllegalStateError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailable,
)
from backbone.wire.reassignment import PartitionReassignment

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "BrokerInfo",
    "BufferExhaustedError",
    "ClientClosedError",
    "ClusterDescription",
    "CommitFailedError",
    "ConfigEntry",
    "ConfigError",
    "ConfigResource",
    "ConfigResourceType",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "GroupDescription",
    "GroupListing",
    "IllegalStateError",
    "KafkaClientError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "MemberDescription",
    "NewTopic",
    "NoBrokersAvailable",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetSpec",
    "PartitionInfo",
    "PartitionReassignment",
    "Producer",
    "RecordFuture",
    "RecordList",
    "RecordMetadata",
    "ReplicaInfo",
    "TimestampType",
    "TopicDescription",
    "TopicPartition",
]
