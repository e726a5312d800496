"""The console's configuration file: TOML, or a Java properties file (a name ending in `.properties`).

```toml
listeners = "http://127.0.0.1:8080"
sampling.interval.ms = 10000          # how often each cluster is asked for everything the pages show
history.url = "sqlite:///var/console/history.db"   # any SQLAlchemy URL
audit.interval.ms = 60000             # how often the aggregate's audit topic is read
session.secret = "..."                # signs session cookies; random (sessions end on restart) if absent

[[clusters]]
name = "dc1"
bootstrap.servers = "127.0.0.1:9092"
role = "datacenter"                   # or "aggregate"
# A secured cluster: the client settings (docs/security.md) the console connects with, per cluster.
# security.protocol = "SASL_SSL"
# sasl.mechanism = "SCRAM-SHA-512"
# sasl.username = "console"
# sasl.password = "..."               # or sasl.password.file = "/path/to/console.password"
# ssl.cafile = "/path/to/ca.pem"

[[mirrors]]
source = "dc1"
target = "aggregate"
group = "mirror-dc1-aggregate"

[[users]]
name = "alice"
role = "operator"                     # or "viewer"
password.hash = "$argon2id$..."       # `backbone console hash-password`

[[webhooks]]
url = "http://alerts.example/hook"
```

Dotted keys are TOML tables, so `bootstrap.servers = ...` and `[bootstrap] servers = ...` read the same.

The same as properties: a cluster's, user's, mirror's or webhook's settings are prefixed by the list's name
and a label of their own (for clusters and users, the label is the name); whole numbers are numbers.

```properties
listeners=http://127.0.0.1:8080
sampling.interval.ms=10000
clusters.dc1.bootstrap.servers=127.0.0.1:9092
clusters.dc1.role=datacenter
clusters.dc1.security.protocol=SASL_SSL
mirrors.dc1-to-aggregate.source=dc1
mirrors.dc1-to-aggregate.target=aggregate
users.alice.role=operator
users.alice.password.hash=$argon2id$...
webhooks.alerts.url=http://alerts.example/hook
```
"""

from __future__ import annotations

import re
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROLES = ("viewer", "operator")
CLUSTER_ROLES = ("datacenter", "aggregate")
NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
DEFAULT_INTERVAL_MS = 10_000
DEFAULT_HISTORY_URL = "sqlite:///console-history.db"
SECURITY_PARTS = ("security", "sasl", "ssl")  # a cluster's client settings: security.protocol, sasl.*, ssl.*


class ConfigError(ValueError):
    """The configuration file is wrong; the message names the key and what to write instead."""


@dataclass(frozen=True)
class ClusterSettings:
    name: str
    bootstrap_servers: str
    role: str = "datacenter"
    security: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The client security settings the console connects with (security.protocol, sasl.*, ssl.*)."""

    def client_config(self) -> dict[str, Any]:
        """Settings for a client of this cluster: its bootstrap servers and security."""
        return {**self.security, "bootstrap.servers": self.bootstrap_servers}


@dataclass(frozen=True)
class MirrorSettings:
    source: str
    target: str
    group: str


@dataclass(frozen=True)
class UserSettings:
    name: str
    role: str
    password_hash: str


@dataclass(frozen=True)
class ConsoleConfig:
    clusters: tuple[ClusterSettings, ...]
    mirrors: tuple[MirrorSettings, ...] = ()
    users: tuple[UserSettings, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8080
    history_url: str = DEFAULT_HISTORY_URL
    interval_ms: int = DEFAULT_INTERVAL_MS
    session_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    webhooks: tuple[str, ...] = ()
    status_window: int = 10
    """How many samples Burrow-style group evaluation looks back over."""
    audit_topic: str = "__audit"
    audit_interval_ms: int = 60_000
    """How often an aggregate cluster's audit topic is read again (it is read whole)."""

    def cluster(self, name: str) -> ClusterSettings | None:
        return next((c for c in self.clusters if c.name == name), None)

    def client_config(self, cluster: str) -> dict[str, Any]:
        """Client settings (bootstrap servers, security) for a configured cluster; KeyError naming it when
        there is none."""
        found = self.cluster(cluster)
        if found is None:
            raise KeyError(f"no cluster named {cluster!r} in the console's configuration")
        return found.client_config()

    def user(self, name: str) -> UserSettings | None:
        return next((u for u in self.users if u.name == name), None)


def _get(table: dict[str, Any], dotted: str, default: Any = None) -> Any:
    value: Any = table
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value


def _text(table: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = _get(table, key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: `{key}` must be a non-empty string")
    return value


def _flatten(table: dict[str, Any], prefix: str) -> dict[str, Any]:
    """TOML's nested tables back into flat Kafka names: {"sasl": {"mechanism": "X"}} -> sasl.mechanism."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _security(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """A cluster's client security settings; `sasl.password.file` is read here (its first line)."""
    security = _flatten({part: raw[part] for part in SECURITY_PARTS if part in raw}, "")
    password_file = security.pop("sasl.password.file", None)
    if password_file is not None:
        if "sasl.password" in security:
            raise ConfigError(f"{where}: give sasl.password or sasl.password.file, not both")
        try:
            security["sasl.password"] = Path(str(password_file)).read_text(encoding="utf-8").splitlines()[0]
        except (OSError, IndexError) as error:
            raise ConfigError(
                f"{where}: sasl.password.file {password_file!r} could not be read: {error}"
            ) from None
    from backbone.client.config import ADMIN_OPTIONS, resolve  # the client loads slowly: only when asked

    try:
        resolve(ADMIN_OPTIONS, "cluster", {**security, "bootstrap.servers": "localhost:9092"}, {})
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None
    return security


def parse(data: dict[str, Any]) -> ConsoleConfig:
    clusters = []
    for index, raw in enumerate(data.get("clusters") or []):
        where = f"clusters[{index}]"
        name = _text(raw, "name", where)
        if not NAME.match(name):
            raise ConfigError(f"{where}: name {name!r} may hold only letters, digits, '.', '_' and '-'")
        role = _text(raw, "role", where, "datacenter")
        if role not in CLUSTER_ROLES:
            raise ConfigError(f"{where}: role {role!r} must be one of {', '.join(CLUSTER_ROLES)}")
        clusters.append(
            ClusterSettings(name, _text(raw, "bootstrap.servers", where), role, _security(raw, where))
        )
    if not clusters:
        raise ConfigError("name at least one cluster: [[clusters]] name = ..., bootstrap.servers = ...")
    names = [c.name for c in clusters]
    if len(set(names)) != len(names):
        raise ConfigError(f"cluster names must be unique: {', '.join(names)}")
    mirrors = []
    for index, raw in enumerate(data.get("mirrors") or []):
        where = f"mirrors[{index}]"
        source, target = _text(raw, "source", where), _text(raw, "target", where)
        for end in (source, target):
            if end not in names:
                raise ConfigError(f"{where}: cluster {end!r} is not among the clusters ({', '.join(names)})")
        mirrors.append(
            MirrorSettings(source, target, _text(raw, "group", where, f"mirror-{source}-{target}"))
        )
    users = []
    for index, raw in enumerate(data.get("users") or []):
        where = f"users[{index}]"
        role = _text(raw, "role", where)
        if role not in ROLES:
            raise ConfigError(f"{where}: role {role!r} must be one of {', '.join(ROLES)}")
        hashed = _text(raw, "password.hash", where)
        if not hashed.startswith("$argon2"):
            raise ConfigError(
                f"{where}: password.hash must be an argon2 hash (`backbone console hash-password`)"
            )
        users.append(UserSettings(_text(raw, "name", where), role, hashed))
    listener = urlparse(_get(data, "listeners", "http://127.0.0.1:8080"))
    if listener.scheme != "http" or not listener.hostname or listener.port is None:
        raise ConfigError("listeners must look like http://HOST:PORT")
    interval = _get(data, "sampling.interval.ms", DEFAULT_INTERVAL_MS)
    if not isinstance(interval, int) or not 100 <= interval <= 3_600_000:
        raise ConfigError("sampling.interval.ms must be a whole number of milliseconds from 100 to 3600000")
    window = _get(data, "status.window.samples", 10)
    if not isinstance(window, int) or not 3 <= window <= 1000:
        raise ConfigError("status.window.samples must be a whole number from 3 to 1000")
    audit_interval = _get(data, "audit.interval.ms", 60_000)
    if not isinstance(audit_interval, int) or audit_interval < 1000:
        raise ConfigError("audit.interval.ms must be a whole number of milliseconds, 1000 or more")
    secret = _get(data, "session.secret")
    webhooks = tuple(_text(w, "url", f"webhooks[{i}]") for i, w in enumerate(data.get("webhooks") or []))
    return ConsoleConfig(
        clusters=tuple(clusters),
        mirrors=tuple(mirrors),
        users=tuple(users),
        host=listener.hostname,
        port=listener.port,
        history_url=_get(data, "history.url", DEFAULT_HISTORY_URL),
        interval_ms=interval,
        session_secret=secret.encode() if isinstance(secret, str) and secret else secrets.token_bytes(32),
        webhooks=webhooks,
        status_window=window,
        audit_topic=_get(data, "audit.topic", "__audit"),
        audit_interval_ms=audit_interval,
    )


LISTS = {"clusters": "name", "users": "name", "mirrors": None, "webhooks": None}  # list: what its label is


def _put(table: dict[str, Any], dotted: str, value: Any, where: str) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: {dotted} sets a key inside a value set on another line")
    if isinstance(table.get(last), dict):
        raise ConfigError(f"{where}: {dotted} is also the start of longer keys")
    table[last] = value


def parse_properties(text: str) -> dict[str, Any]:
    """A properties file as the nested tables `parse` takes (see the module's docstring)."""
    data: dict[str, Any] = {}
    lists: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in LISTS}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        where = f"line {number}"
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise ConfigError(f"{where}: write key=value, not {line!r}")
        key, raw = line[:cut].strip(), line[cut + 1 :].strip()
        value: Any = int(raw) if re.fullmatch(r"-?[0-9]+", raw) else raw
        head, _, rest = key.partition(".")
        if head in LISTS:
            label, _, setting = rest.partition(".")
            if not label or not setting:
                raise ConfigError(f"{where}: write {head}.LABEL.SETTING=value, not {key}")
            label_key = LISTS[head]
            entry = lists[head].setdefault(label, {} if label_key is None else {label_key: label})
            _put(entry, setting, value, where)
        else:
            _put(data, key, value, where)
    for name, entries in lists.items():
        if entries:
            data[name] = list(entries.values())
    return data


def load(path: Path) -> ConsoleConfig:
    try:
        text = path.read_text(encoding="utf-8")
        data = parse_properties(text) if path.suffix == ".properties" else tomllib.loads(text)
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    return parse(data)
