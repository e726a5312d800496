"""`backbone acls add|list|remove`: ACLs in the cluster's ZooKeeper, as Kafka's
`kafka-acls --authorizer-properties zookeeper.connect=...` manages them (same nodes, same names). Brokers
reload their ACLs when a change is announced, within moments."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from backbone.cli import UsageError
from backbone.cli.users import open_store, zookeeper_options

if TYPE_CHECKING:
    from backbone.coordination import AclBinding, ClusterStore

OPERATIONS = (
    "All",
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("acls", help="add, list and remove ACLs")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    common = zookeeper_options()
    resource = argparse.ArgumentParser(add_help=False)
    resource.add_argument("--topic", action="append", default=[], metavar="NAME")
    resource.add_argument("--group", action="append", default=[], metavar="NAME")
    resource.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    resource.add_argument("--cluster", action="store_true", help="the cluster itself")
    resource.add_argument("--resource-pattern-type", choices=("literal", "prefixed"), default="literal")
    for name, helptext in (("add", "add ACLs"), ("remove", "remove ACLs")):
        action = actions.add_parser(name, parents=[common, resource], help=helptext)
        action.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
        action.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
        action.add_argument("--allow-host", action="append", default=[], metavar="HOST", help="default: *")
        action.add_argument("--deny-host", action="append", default=[], metavar="HOST", help="default: *")
        action.add_argument("--operation", action="append", default=[], choices=OPERATIONS, metavar="OP")
        action.set_defaults(handler=add_acls if name == "add" else remove_acls)
    listing = actions.add_parser("list", parents=[common, resource], help="ACLs, one a line")
    listing.set_defaults(handler=list_acls)


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    found = [("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group]
    found += [("TRANSACTIONAL_ID", t) for t in args.transactional_id]
    if args.cluster:
        found.append(("CLUSTER", "kafka-cluster"))
    return found


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    from backbone.coordination import AclBinding

    resources = _resources(args)
    if not resources:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not args.operation:
        raise UsageError(f"name at least one --operation ({', '.join(OPERATIONS)})")
    grants = [(p, "ALLOW", args.allow_host or ["*"]) for p in args.allow_principal]
    grants += [(p, "DENY", args.deny_host or ["*"]) for p in args.deny_principal]
    if not grants:
        raise UsageError("name --allow-principal User:NAME or --deny-principal User:NAME")
    pattern = args.resource_pattern_type.upper()
    bindings = []
    for kind, name in resources:
        for principal, permission, hosts in grants:
            for host in hosts:
                for operation in args.operation:
                    upper = "".join(f"_{c}" if c.isupper() else c for c in operation).lstrip("_").upper()
                    try:
                        bindings.append(AclBinding(kind, name, pattern, principal, host, upper, permission))
                    except ValueError as exc:
                        raise UsageError(str(exc)) from None
    return bindings


def add_acls(args: argparse.Namespace) -> int:
    return _change_acls(args, "added", lambda store, bindings: store.add_acls(bindings))


def remove_acls(args: argparse.Namespace) -> int:
    return _change_acls(args, "removed", lambda store, bindings: store.remove_acls(bindings))


def _change_acls(
    args: argparse.Namespace, done: str, change: Callable[[ClusterStore, list[AclBinding]], None]
) -> int:
    """Apply `change` to the bindings the arguments name, in one store session; print each as `done`."""
    bindings = _bindings(args)
    with open_store(args) as store:
        change(store, bindings)
    for binding in bindings:
        print(f"{done} {_line(binding)}")
    return 0


def list_acls(args: argparse.Namespace) -> int:
    wanted = set(_resources(args))
    with open_store(args) as store:
        acls = store.acls()
    for binding in sorted(acls, key=lambda b: (b.resource_type, b.name, b.principal, b.operation)):
        if not wanted or (binding.resource_type, binding.name) in wanted:
            print(_line(binding))
    return 0


def _line(binding: AclBinding) -> str:
    return (
        f"{binding.resource_type}:{binding.pattern_type}:{binding.name}\t{binding.principal}\t"
        f"{binding.permission}\t{binding.operation}\thost={binding.host}"
    )
