"""Our Kafka client: Producer, Consumer and Admin, an asyncio core with a synchronous face.

Grouped by role: `producer/`, `consumer/` (with its group membership), `admin/`, and `audit/` (the
completeness audit's counts, reading and report); `cluster` (metadata), `config`, `structs` and `sync` (the
synchronous faces) serve them all. Connections, codecs and errors are the wire floor's (`backbone.wire`).
Import the public names from here."""

from backbone.client.admin import (
    AsyncAdmin,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    GroupDescription,
    GroupListing,
    MemberDescription,
    NewTopic,
    OffsetSpec,
    PartitionReassignment,
    ReplicaInfo,
    TopicDescription,
)
from backbone.client.cluster import BrokerInfo, PartitionInfo
from backbone.client.consumer import AsyncConsumer, ConsumerRebalanceListener
from backbone.client.producer import AsyncProducer, RecordFuture
from backbone.client.structs import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordList,
    RecordMetadata,
    TimestampType,
    TopicPartition,
)
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
