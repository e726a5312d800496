"""The admin client: `AsyncAdmin` (topics, configs, cluster, consumer groups, replicas and leadership) and
the descriptions it returns; `offset_reset` plans a group's offset reset, `mirror_progress` reads a mirror's
commit metadata."""

from backbone.client.admin.client import AsyncAdmin
from backbone.client.admin.descriptions import (
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
    OffsetSpec,
    TopicDescription,
)
from backbone.client.admin.groups import GroupDescription, GroupListing, MemberDescription
from backbone.client.admin.replicas import ReplicaInfo
from backbone.wire.reassignment import PartitionReassignment

__all__ = [
    "AsyncAdmin",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "OffsetSpec",
    "PartitionReassignment",
    "ReplicaInfo",
    "TopicDescription",
]
