"""`backbone dev up|down|status`: the local multi-datacenter backbone."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from backbone.cli.connect import CommandFailed, reports_failures
from backbone.dev import topology
from backbone.dev.processes import StartError

USAGE_AFTER_UP = """
The backbone is up. Each cluster's bootstrap servers, and the mirrors, are in {path}.

  Produce (any Kafka client works; with kcat):
    echo hello | kcat -P -b {bootstrap} -t pageviews
  Consume:
    kcat -C -b {bootstrap} -t pageviews -o beginning -e
  The same with the backbone command (run from this checkout it finds dc1 in {path}):
    echo hello | backbone produce pageviews --bootstrap-server {bootstrap}
    backbone consume pageviews --from-beginning --max-messages 1 --bootstrap-server {bootstrap}
  Completeness of the aggregate (counted by the audit processes):
    backbone audit report --bootstrap-server {aggregate}

  Mirror logs: {directory}/mirrors/*.out, audit counters: {directory}/auditors/*.out
  Status:  backbone dev status --dir {directory}
  Stop:    backbone dev down --dir {directory}
"""

USAGE_AFTER_SECURE_UP = """
The backbone is up, secured: SASL_SSL listeners (SCRAM-SHA-512), ACLs on. Each cluster's bootstrap servers,
CA file, mechanism, user and password file are in {path}; the admin's client settings in {command_config}.

  Produce (with kcat):
    echo hello | kcat -P -b {bootstrap} -t pageviews {kcat}
  Consume:
    kcat -C -b {bootstrap} -t pageviews -o beginning -e {kcat}
  The same with the backbone command (every client command takes --command-config):
    echo hello | backbone produce pageviews --bootstrap-server {bootstrap} --command-config {command_config}
    backbone consume pageviews --from-beginning --max-messages 1 --bootstrap-server {bootstrap} \\
        --command-config {command_config}
  Completeness of the aggregate (counted by the audit processes):
    backbone audit report --bootstrap-server {aggregate} --command-config {command_config}
  More users: backbone users add NAME --zookeeper ZOOKEEPER/CLUSTER; their rights: backbone acls add ...

  Mirror logs: {directory}/mirrors/*.out, audit counters: {directory}/auditors/*.out
  Status:  backbone dev status --dir {directory}
  Stop:    backbone dev down --dir {directory}
"""

BUSY_PORTS = """
*** The usual ports were busy: {busy}.
*** This backbone listens elsewhere (above). Examples that say 127.0.0.1:9092 would reach whatever else
*** listens there: use the addresses printed here. `backbone` commands run from this checkout find them in
*** {path}; elsewhere pass --bootstrap-server or export BACKBONE_BOOTSTRAP={bootstrap}.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("dev", help="a local multi-datacenter backbone on this machine")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    up = actions.add_parser(
        "up", help="start ZooKeeper, the clusters and the mirrors into `aggregate` in the background"
    )
    up.add_argument(
        "--dir", type=Path, default=topology.DEFAULT_DIR, help="state directory (default var/dev)"
    )
    up.add_argument(
        "--clusters",
        default=",".join(topology.DEFAULT_CLUSTERS),
        help="comma-separated cluster names (default dc1,dc2,aggregate)",
    )
    up.add_argument("--brokers", type=int, default=3, help="brokers per cluster (default 3)")
    up.add_argument(
        "--console-interval-ms", type=int, default=5000, help="the console's sampling interval (default 5000)"
    )
    up.add_argument(
        "--generate",
        type=float,
        nargs="?",
        const=50.0,
        default=0.0,
        metavar="RATE",
        help="also run `backbone generate` in each datacenter (RATE events/s, default 50)",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="SASL_SSL listeners (SCRAM-SHA-512), a development CA, an admin super user and ACLs on",
    )
    up.set_defaults(handler=reports_failures(run_up))

    down = actions.add_parser("down", help="stop everything `dev up` started")
    down.add_argument("--dir", type=Path, default=topology.DEFAULT_DIR)
    down.add_argument("--purge", action="store_true", help="also delete the state directory (all data)")
    down.set_defaults(handler=run_down)

    status = actions.add_parser("status", help="show the processes and whether they run")
    status.add_argument("--dir", type=Path, default=topology.DEFAULT_DIR)
    status.set_defaults(handler=run_status)


def run_up(args: argparse.Namespace) -> int:
    from backbone.cli import UsageError

    clusters = tuple(name.strip() for name in args.clusters.split(",") if name.strip())
    if not clusters or args.brokers < 1:
        raise UsageError("give at least one cluster name and --brokers of 1 or more")
    try:
        started = topology.up(
            args.dir,
            clusters,
            args.brokers,
            console_interval_ms=args.console_interval_ms,
            generate_rate=args.generate,
            secure=args.secure,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except StartError as exc:
        raise CommandFailed(str(exc)) from None
    if started.restarted == 0:
        print(f"nothing was started: everything recorded in {started.path} already runs")
    first = next(iter(started.data["clusters"].values()))
    for name, cluster in started.data["clusters"].items():
        print(f"{name:>10}: bootstrap {cluster['bootstrap']}  zookeeper {cluster['zookeeper']}")
    for mirror in started.mirrors:
        print(
            f"{'mirror':>10}: {mirror['source']} -> {mirror['target']}  group {mirror['group']}  "
            f"metrics http://{mirror['host']}:{mirror['metrics_port']}/metrics"
        )
    if "console" in started.data:
        entry = started.data["console"]
        print(f"{'console':>10}: {entry['url']}  user {entry['user']}  password {entry['password']}")
    if "schema_registry" in started.data:
        print(
            f"{'registry':>10}: {started.data['schema_registry']['url']}  (schemas in aggregate's _schemas)"
        )
    bootstrap = first["bootstrap"].split(",")[0]
    aggregate = started.data["clusters"].get("aggregate", first)["bootstrap"].split(",")[0]
    security = first.get("security")
    if security:
        kcat = (
            f"-X security.protocol={security['protocol']} -X sasl.mechanisms={security['mechanism']} "
            f"-X sasl.username={security['user']} -X sasl.password=$(cat {security['password_file']}) "
            f"-X ssl.ca.location={security['ca_file']}"
        )
        print(
            USAGE_AFTER_SECURE_UP.format(
                path=started.path,
                bootstrap=bootstrap,
                aggregate=aggregate,
                directory=args.dir,
                command_config=security["command_config"],
                kcat=kcat,
            )
        )
    else:
        print(
            USAGE_AFTER_UP.format(
                path=started.path, bootstrap=bootstrap, aggregate=aggregate, directory=args.dir
            )
        )
    busy = moved_ports(started.data)
    if busy:
        print(
            BUSY_PORTS.format(busy=", ".join(busy), path=started.path, bootstrap=bootstrap), file=sys.stderr
        )
    return 0


def moved_ports(data: dict) -> list[str]:
    """The usual ports this topology could not have, as `9092 (dc1 broker 1 is on 40123)`."""
    moved = []
    zookeeper = data["zookeeper"]["port"]
    if zookeeper != topology.PREFERRED_ZOOKEEPER_PORT:
        moved.append(f"{topology.PREFERRED_ZOOKEEPER_PORT} (ZooKeeper is on {zookeeper})")
    for index, (name, cluster) in enumerate(data["clusters"].items()):
        for number, broker in enumerate(cluster["brokers"]):
            usual = topology.FIRST_BROKER_PORT + index * topology.PORTS_PER_CLUSTER + number
            if broker["port"] != usual:
                moved.append(f"{usual} ({name} broker {broker['id']} is on {broker['port']})")
    return moved


def run_down(args: argparse.Namespace) -> int:
    stopped = topology.down(args.dir)
    print(f"stopped {stopped} process(es)")
    if args.purge and args.dir.exists():
        shutil.rmtree(args.dir)
        print(f"deleted {args.dir}")
    return 0


def run_status(args: argparse.Namespace) -> int:
    rows = topology.status(args.dir)
    if not rows:
        print(f"nothing recorded in {args.dir}; start with `backbone dev up --dir {args.dir}`")
        return 1
    for what, pid, alive in rows:
        print(f"{'running' if alive else 'stopped':8} pid={pid or '-':<8} {what}")
    return 0 if all(alive for _, _, alive in rows) else 1
