"""`backbone broker start` and `backbone zookeeper start`: run one server in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from backbone.properties import ConfigError, parse_overrides, read_properties_file

if TYPE_CHECKING:
    from backbone.broker.config import BrokerConfig
    from backbone.broker.server import Broker


def register(subparsers: argparse._SubParsersAction) -> None:
    broker = subparsers.add_parser("broker", help="run a broker")
    broker_commands = broker.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = broker_commands.add_parser("start", help="start a broker in the foreground (SIGTERM stops it)")
    start.add_argument("--config", required=True, help="a .properties or .toml file with Kafka's key names")
    start.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="set a property (repeatable)"
    )
    start.set_defaults(handler=start_broker)

    zookeeper = subparsers.add_parser("zookeeper", help="run a ZooKeeper server (Debian's package)")
    zk_commands = zookeeper.add_subparsers(dest="action", metavar="ACTION", required=True)
    zk_start = zk_commands.add_parser("start", help="start ZooKeeper in the foreground (SIGTERM stops it)")
    zk_start.add_argument("--dir", required=True, type=Path, help="data and log directory")
    zk_start.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    zk_start.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    zk_start.set_defaults(handler=start_zookeeper)


def load_broker_config(path: str, overrides: list[str]) -> BrokerConfig:

    from backbone.broker.config import BrokerConfig

    raw = read_properties_file(path)
    raw.update(parse_overrides(overrides))
    return BrokerConfig(raw)


def start_broker(args: argparse.Namespace) -> int:
    from backbone.broker.server import run_broker
    from backbone.log.meta_properties import InconsistentBrokerIdError, InconsistentClusterIdError

    try:
        config = load_broker_config(args.config, args.override)
    except ConfigError as exc:
        print(f"backbone broker start: configuration error: {exc}", file=sys.stderr)
        return 2

    def ready(broker: Broker) -> None:
        ports = ", ".join(f"{x.name}://{x.endpoint.host}:{x.port}" for x in broker.listeners)
        print(f"broker {broker.broker_id} ready on {ports}", flush=True)

    try:
        asyncio.run(run_broker(config, ready))
    except (InconsistentClusterIdError, InconsistentBrokerIdError) as exc:
        logging.getLogger("backbone.broker").error(
            "event=broker_refused reason=%s message=%r", type(exc).__name__, str(exc)
        )
        print(f"backbone broker start: {exc}", file=sys.stderr)
        return 1
    return 0


def start_zookeeper(args: argparse.Namespace) -> int:
    from backbone.coordination import ZooKeeperServer

    server = ZooKeeperServer(args.dir, args.port, host=args.host)
    stop: dict[str, int | None] = {"signal": None}

    def on_signal(signum: int, frame: object) -> None:
        stop["signal"] = signum

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    print(f"zookeeper ready on {server.connect_string} (pid {server.pid})", flush=True)
    try:
        while stop["signal"] is None and server.is_running():
            server.wait(timeout=0.5)
    finally:
        server.stop()
    return 0
