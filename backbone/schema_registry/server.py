"""Running a registry instance: its settings (Confluent's property names where they exist) and the server.

listeners=http://127.0.0.1:8081
kafkastore.bootstrap.servers=127.0.0.1:9292
kafkastore.topic=_schemas                     kafkastore.topic.replication.factor=3
schema.compatibility.level=backward           (the global default until PUT /config changes it)
advertised.url=http://127.0.0.1:8081          (where other instances forward writes; default: listener)
leader.lease.ms=10000                         kafkastore.timeout.ms=10000
kafkastore.security.protocol=SASL_SSL         kafkastore.sasl.mechanism=SCRAM-SHA-512
kafkastore.sasl.username=registry             kafkastore.sasl.password=...
kafkastore.ssl.cafile=ca.pem                  (the storage client's security: our client's settings)
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from backbone.client.config import SECURITY_PREFIXES
from backbone.properties import ConfigError, Property, resolve
from backbone.schema_registry import compatibility
from backbone.schema_registry.app import RegistryApp
from backbone.schema_registry.state import RegistryState
from backbone.schema_registry.store import SchemaLog
from backbone.stopping import stop_on_signals

log = logging.getLogger(__name__)

READY_LINE = "event=schema_registry_started"
_STORE_PREFIX = "kafkastore."
_STORE_SECURITY = tuple(_STORE_PREFIX + prefix for prefix in SECURITY_PREFIXES)
SPECS = {
    p.name: p
    for p in (
        Property("listeners", str, "http://127.0.0.1:8081", doc="http://HOST:PORT to serve on (port 0: any)"),
        Property("kafkastore.bootstrap.servers", str, required=True, doc="the cluster holding the schemas"),
        Property("kafkastore.topic", str, "_schemas", doc="the compacted topic the schemas live in"),
        Property("kafkastore.topic.replication.factor", int, -1, minimum=-1, doc="-1: the broker default"),
        Property(
            "kafkastore.timeout.ms", int, 10_000, minimum=1, doc="how long a store read or write may take"
        ),
        Property("schema.compatibility.level", str, "backward", doc="the default compatibility level"),
        Property(
            "advertised.url", str, "", doc="the URL other instances forward writes to (default: listener)"
        ),
        Property(
            "leader.lease.ms", int, 10_000, minimum=100, doc="how long a write keeps this instance leader"
        ),
    )
}


@dataclass(frozen=True)
class RegistryConfig:
    host: str
    port: int
    bootstrap: str
    topic: str
    replication_factor: int
    timeout_ms: int
    level: str
    advertised_url: str
    lease_ms: int
    security: Mapping[str, Any] = field(default_factory=dict)
    """The storage client's security settings (security.protocol, sasl.*, ssl.*)."""

    @classmethod
    def from_properties(cls, raw: Mapping[str, Any]) -> RegistryConfig:
        values = resolve(SPECS, raw, allow_unknown=lambda key: key.startswith(_STORE_SECURITY))
        security = {
            key[len(_STORE_PREFIX) :]: value for key, value in raw.items() if key.startswith(_STORE_SECURITY)
        }
        listener = urlsplit(values["listeners"].split(",")[0].strip())
        if listener.scheme != "http" or not listener.hostname or listener.port is None:
            raise ConfigError(
                f"listeners={values['listeners']!r}: give http://HOST:PORT, e.g. http://127.0.0.1:8081"
            )
        try:
            level = compatibility.check_level(values["schema.compatibility.level"])
        except Exception:
            raise ConfigError(
                f"schema.compatibility.level={values['schema.compatibility.level']!r} must be one of "
                + ", ".join(compatibility.LEVELS)
            ) from None
        return cls(
            listener.hostname,
            listener.port,
            values["kafkastore.bootstrap.servers"],
            values["kafkastore.topic"],
            values["kafkastore.topic.replication.factor"],
            values["kafkastore.timeout.ms"],
            level,
            values["advertised.url"],
            values["leader.lease.ms"],
            security,
        )


class RegistryServer:
    """One registry instance: loads the schemas topic, then serves HTTP until `stop`."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self.instance = f"{socket.gethostname()}:{os.getpid()}"
        self.runner: web.AppRunner | None = None
        self.store: SchemaLog | None = None
        self.url = ""

    async def start(self) -> str:
        config = self.config
        sock = socket.create_server((config.host, config.port))  # bound first: port 0 picks a free one
        self.url = config.advertised_url or f"http://{config.host}:{sock.getsockname()[1]}"
        self.store = SchemaLog(
            config.bootstrap,
            config.topic,
            config.replication_factor,
            self.instance,
            self.url,
            config.lease_ms,
            config.timeout_ms,
            RegistryState(default_level=config.level),
            config.security,
        )
        await self.store.start()
        self.runner = web.AppRunner(RegistryApp(self.store).build(), access_log=None)
        await self.runner.setup()
        await web.SockSite(self.runner, sock).start()
        log.info("%s url=%s store=%s topic=%s", READY_LINE, self.url, config.bootstrap, config.topic)
        return self.url

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.store is not None:
            await self.store.close()


async def serve(config: RegistryConfig) -> None:
    """Run until SIGTERM or SIGINT."""
    server = RegistryServer(config)
    stop = stop_on_signals()
    try:
        url = await server.start()
        print(f"schema registry serving {url}", flush=True)
        await stop.wait()
    finally:
        await server.stop()
        log.info("event=schema_registry_stopped")
