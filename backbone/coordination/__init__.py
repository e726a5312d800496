"""Everything about ZooKeeper: the path layout, broker registration, controller election, topics,
partition state, configs, and the launcher for the real ZooKeeper server. The only room that talks
to kazoo; nothing kazoo raises leaves it (see `errors`)."""

from backbone.coordination.acls import AclBinding
from backbone.coordination.assignment import BrokerPlacement, assign_replicas
from backbone.coordination.brokers import ControllerEpoch
from backbone.coordination.configs import ConfigChange
from backbone.coordination.credentials import SCRAM_MECHANISMS, ScramCredential
from backbone.coordination.errors import (
    BrokerAlreadyRegisteredError,
    CoordinationError,
    CoordinationUnavailableError,
    PortInUseError,
    VersionConflictError,
    ZooKeeperNotInstalledError,
    ZooKeeperStartError,
)
from backbone.coordination.session import SessionEvent, Watch
from backbone.coordination.store import ClusterStore
from backbone.coordination.znodes import (
    BrokerRegistration,
    ControllerInfo,
    EndPoint,
    PartitionState,
    TopicAssignment,
)
from backbone.coordination.zookeeper_server import ZooKeeperServer, find_free_port, port_is_free

__all__ = [
    "SCRAM_MECHANISMS",
    "AclBinding",
    "BrokerAlreadyRegisteredError",
    "BrokerPlacement",
    "BrokerRegistration",
    "ClusterStore",
    "ConfigChange",
    "ControllerEpoch",
    "ControllerInfo",
    "CoordinationError",
    "CoordinationUnavailableError",
    "EndPoint",
    "PartitionState",
    "PortInUseError",
    "ScramCredential",
    "SessionEvent",
    "TopicAssignment",
    "VersionConflictError",
    "Watch",
    "ZooKeeperNotInstalledError",
    "ZooKeeperServer",
    "ZooKeeperStartError",
    "assign_replicas",
    "find_free_port",
    "port_is_free",
]
