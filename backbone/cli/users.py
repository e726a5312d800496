"""`backbone users add|list|delete`: SCRAM credentials in the cluster's ZooKeeper (/config/users/<user>),
as Kafka's `kafka-configs --zookeeper ... --entity-type users --alter --add-config SCRAM-SHA-512=[...]`
does. Written straight to ZooKeeper, so the first (admin) user can be made before any broker accepts SASL;
brokers read credentials at each authentication, so a change counts at once."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from backbone.cli import UsageError
from backbone.cli.connect import int_at_least

if TYPE_CHECKING:
    from backbone.coordination import ClusterStore

ZOOKEEPER_ENV = "BACKBONE_ZOOKEEPER"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("users", help="add, list and delete SASL/SCRAM users")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    common = zookeeper_options()

    add = actions.add_parser("add", parents=[common], help="add a user or change its password")
    add.add_argument("name", metavar="NAME")
    add.add_argument(
        "--mechanism",
        action="append",
        choices=MECHANISMS,
        help="repeatable (default: both SCRAM-SHA-256 and SCRAM-SHA-512)",
    )
    add.add_argument("--iterations", type=int_at_least(4096), default=4096, help="default 4096")
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password-file", metavar="FILE", help="read the password from FILE's first line")
    source.add_argument("--password", help="the password (visible to other local users; prefer a file)")
    add.set_defaults(handler=add_user)

    listing = actions.add_parser("list", parents=[common], help="users and their mechanisms, one a line")
    listing.set_defaults(handler=list_users)

    delete = actions.add_parser("delete", parents=[common], help="remove a user's credentials")
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("--mechanism", action="append", choices=MECHANISMS, help="default: every mechanism")
    delete.set_defaults(handler=delete_user)


def zookeeper_options() -> argparse.ArgumentParser:
    """The `--zookeeper` option of the commands that write to ZooKeeper directly (users, acls)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--zookeeper",
        metavar="HOST:PORT/CHROOT",
        default=os.environ.get(ZOOKEEPER_ENV),
        help=f"the cluster's zookeeper.connect (default: ${ZOOKEEPER_ENV})",
    )
    return common


def open_store(args: argparse.Namespace) -> ClusterStore:
    from backbone.coordination import ClusterStore

    if not args.zookeeper:
        raise UsageError(
            f"name the cluster's ZooKeeper with --zookeeper HOST:PORT/CHROOT (or ${ZOOKEEPER_ENV})"
        )
    return ClusterStore(args.zookeeper)


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        password = args.password
    elif args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as file:
                password = file.readline().rstrip("\r\n")
        except OSError as exc:
            raise UsageError(f"cannot read --password-file: {exc.strerror or exc}") from None
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise UsageError("the password is empty; give --password-file FILE, --password, or one line on stdin")
    return password


def add_user(args: argparse.Namespace) -> int:
    from backbone.coordination import ScramCredential

    password = _password(args)
    mechanisms = args.mechanism or list(MECHANISMS)
    with open_store(args) as store:
        for mechanism in mechanisms:
            credential = ScramCredential.from_password(mechanism, password, args.iterations)
            store.set_scram_credential(args.name, mechanism, credential)
    print(f"user {args.name}: {', '.join(mechanisms)} set")
    return 0


def list_users(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        for user, mechanisms in store.scram_users().items():
            print(f"{user}\t{','.join(mechanisms)}")
    return 0


def delete_user(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        removed = [m for m in args.mechanism or MECHANISMS if store.delete_scram_credential(args.name, m)]
    if not removed:
        print(f"backbone users: {args.name} has no such credentials", file=sys.stderr)
        return 1
    print(f"user {args.name}: {', '.join(removed)} removed")
    return 0
