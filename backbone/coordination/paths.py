"""Every ZooKeeper path Backbone uses: Kafka's well-known layout, relative to the cluster's chroot.

This is the one module that spells paths; everything else calls these functions. Names that become a
path segment are checked here, so a topic called `a/b` can never address some other node.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from backbone.protocol.errors import InvalidTopicError

# -- roots ----------------------------------------------------------------------------------------

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
BROKER_SEQUENCE_ID = "/brokers/seqid"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
# Ours, not Kafka's (whose brokers ask by RPC): an ephemeral child per broker in controlled shutdown.
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONSUMERS = "/consumers"
# Kafka keeps literal-pattern ACLs under /kafka-acl/<ResourceType>/<name> and announces changes under
# /kafka-acl-changes; operators and Kafka's own tools know these names, so we keep them.
ACLS = "/kafka-acl"
ACL_CHANGES = "/kafka-acl-changes"

# Sequential-node name prefixes (ZooKeeper appends a 10-digit counter).
CONFIG_CHANGE_PREFIX = "config_change_"
ISR_CHANGE_PREFIX = "isr_change_"
ACL_CHANGE_PREFIX = "acl_changes_"

# Kafka's ConfigType values: the children of /config.
CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")
DEFAULT_BROKER_CONFIG = "<default>"

# What a broker creates at startup, as Kafka's ZkData.PersistentZkPaths does.
PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS,
    BROKER_IDS,
    TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQUENCE_ID,
    ISR_CHANGE_NOTIFICATION,
    PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
    CLUSTER,
    *(f"{CONFIG}/{entity}" for entity in CONFIG_ENTITY_TYPES),
)

# -- names ----------------------------------------------------------------------------------------

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(topic: str) -> None:
    """Kafka's rules for topic names (org.apache.kafka.common.internals.Topic.validate)."""
    if not topic:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if topic in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {topic}"
        )
    if not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidTopicError(
            f'Topic name "{topic}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def _segment(name: str) -> str:
    """A name used as one path segment: nothing that could climb or split the path."""
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise ValueError(f"{name!r} cannot be used as a ZooKeeper path segment")
    return name


def _topic_segment(topic: str) -> str:
    # Looking up an invalid name answers INVALID_TOPIC_EXCEPTION, as Kafka's metadata handler does.
    try:
        return _segment(topic)
    except ValueError as error:
        raise InvalidTopicError(str(error)) from error


def _child(parent: str, name: str) -> str:
    return f"{parent}/{name}"


def parent_of(path: str) -> str:
    parent = path.rsplit("/", 1)[0]
    return parent or "/"


def join_chroot(chroot: str, path: str) -> str:
    """An absolute path under a chroot (`/dc1` + `/brokers` -> `/dc1/brokers`)."""
    return path if not chroot or chroot == "/" else chroot.rstrip("/") + path


# -- brokers --------------------------------------------------------------------------------------


def broker_path(broker_id: int) -> str:
    return _child(BROKER_IDS, str(int(broker_id)))


# -- topics and partitions ------------------------------------------------------------------------


def controlled_shutdown_path(broker_id: int) -> str:
    return _child(CONTROLLED_SHUTDOWN, str(int(broker_id)))


def topic_path(topic: str) -> str:
    return _child(TOPICS, _topic_segment(topic))


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return _child(topic_partitions_path(topic), str(int(partition)))


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def delete_topic_path(topic: str) -> str:
    return _child(DELETE_TOPICS, _topic_segment(topic))


# -- configs --------------------------------------------------------------------------------------


def config_entity_type_path(entity_type: str) -> str:
    if entity_type not in CONFIG_ENTITY_TYPES:
        raise ValueError(
            f"unknown config entity type {entity_type!r}; one of {', '.join(CONFIG_ENTITY_TYPES)}"
        )
    return _child(CONFIG, entity_type)


def config_entity_path(entity_type: str, entity_name: str) -> str:
    return _child(config_entity_type_path(entity_type), _segment(entity_name))


def topic_config_path(topic: str) -> str:
    return config_entity_path("topics", _topic_segment(topic))


def broker_config_name(broker_id: int | None) -> str:
    """`<default>` for the cluster-wide default, else the broker id."""
    return DEFAULT_BROKER_CONFIG if broker_id is None else str(int(broker_id))


def broker_config_path(broker_id: int | None) -> str:
    return config_entity_path("brokers", broker_config_name(broker_id))


def config_change_prefix_path() -> str:
    """Create a sequential node here; ZooKeeper appends the counter."""
    return _child(CONFIG_CHANGES, CONFIG_CHANGE_PREFIX)


def config_change_path(node_name: str) -> str:
    return _child(CONFIG_CHANGES, _segment(node_name))


def sanitize_entity_name(name: str) -> str:
    """A user or client id as a path segment, as Kafka's Sanitizer writes it (URL-encoded, `*` and `~` too),
    so any name fits in one segment and Kafka's tools find what we write."""
    return quote(name, safe="").replace("~", "%7E")


def desanitize_entity_name(segment: str) -> str:
    return unquote(segment)


def quota_entity_path(user: str | None, client_id: str | None) -> str:
    """The config node of a quota entity below /config: `users/<u>`, `clients/<c>` or
    `users/<u>/clients/<c>`, each name sanitized or `<default>` (segments given here are already
    sanitized)."""
    if user is None and client_id is None:
        raise ValueError("a quota entity names a user, a client id or both")
    parts = []
    if user is not None:
        parts.append(f"users/{_segment(user)}")
    if client_id is not None:
        parts.append(f"clients/{_segment(client_id)}")
    return "/".join(parts)


def entity_path(entity_type: str, entity_name: str) -> str:
    """The `entity_path` a config change notification carries: `topics/foo`, `brokers/<default>`."""
    return config_entity_path(entity_type, entity_name).removeprefix(CONFIG + "/")


# -- notifications --------------------------------------------------------------------------------


def isr_change_prefix_path() -> str:
    return _child(ISR_CHANGE_NOTIFICATION, ISR_CHANGE_PREFIX)


def isr_change_path(node_name: str) -> str:
    return _child(ISR_CHANGE_NOTIFICATION, _segment(node_name))


def sequence_number(node_name: str, prefix: str) -> int:
    """The counter ZooKeeper appended to a sequential node (`config_change_0000000007` -> 7)."""
    if not node_name.startswith(prefix) or not node_name[len(prefix) :].isdigit():
        raise ValueError(f"{node_name!r} is not a sequential node named {prefix}<counter>")
    return int(node_name[len(prefix) :])


# -- ACLs -----------------------------------------------------------------------------------------


# Kafka keeps prefixed-pattern ACLs (and announces their changes) under these "extended" roots.
ACLS_EXTENDED_PREFIXED = "/kafka-acl-extended/prefixed"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"


def acl_resource_type_path(resource_type: str, pattern_type: str = "LITERAL") -> str:
    root = ACLS if pattern_type == "LITERAL" else ACLS_EXTENDED_PREFIXED
    return _child(root, _segment(resource_type))


def acl_path(resource_type: str, resource_name: str, pattern_type: str = "LITERAL") -> str:
    return _child(acl_resource_type_path(resource_type, pattern_type), _segment(resource_name))


def acl_change_prefix_path(pattern_type: str = "LITERAL") -> str:
    return _child(ACL_CHANGES if pattern_type == "LITERAL" else ACL_EXTENDED_CHANGES, ACL_CHANGE_PREFIX)
