"""``spark-mq users add|remove|list``: the SCRAM users brokers authenticate (Kafka's
``kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-512=[password=...]'``).

    spark-mq users add alice --bootstrap-server HOST:PORT            (asks for the password)
    spark-mq users add alice --password-file secret.txt --mechanism SCRAM-SHA-256 --path DIR
    spark-mq users remove alice --bootstrap-server HOST:PORT
    spark-mq users list --path DIR

Both ways go through the admin API (AlterUserScramCredentials / DescribeUserScramCredentials):
the password is salted here and never sent to the broker; a cluster's brokers keep the
credential in ZooKeeper and each applies it within seconds, the embedded broker (``--path``)
in its log directory. ``add`` sets both SCRAM mechanisms unless ``--mechanism`` names one;
``remove`` removes every credential of the user unless ``--mechanism`` names one. To reach a
SASL listener, give the admin's own credentials in a ``--command-config`` file or with
``-X security.protocol=SASL_PLAINTEXT -X sasl.username=... -X sasl.password=...`` (the
options every command that asks a broker takes).

``--zookeeper HOST:PORT[/chroot]`` writes a cluster's ZooKeeper directly instead (Kafka's
``kafka-configs --zookeeper``): the way to create the brokers' own user before any broker
runs, when the inter-broker listener is a SASL one and no broker could be reached without it::

    spark-mq users add broker --zookeeper zk1:2181 --password-file broker.secret \
        --mechanism SCRAM-SHA-512

Only the salted credential is written (``/config/users/<user>``, with a change notification,
so running brokers apply it too).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from spark_mq.cli.common import (
    CliUsageError,
    CommandGroup,
    Handler,
    client_config,
    handler_table,
)
from spark_mq.cli.format import json_text, render_table
from spark_mq.client.admin import Admin
from spark_mq.client.scram_users import (
    Alteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from spark_mq.scram import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_HASHES, ScramCredential

if TYPE_CHECKING:
    from spark_mq.broker.zk.client import ZkClient
    from spark_mq.broker.zk.user_credentials import ZkCredentialBackend


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(**client_config(args))


@contextlib.contextmanager
def _zookeeper(args: argparse.Namespace) -> Iterator[tuple[ZkClient, ZkCredentialBackend]]:
    """The credentials in the ZooKeeper of ``--zookeeper`` (which excludes a broker)."""
    if args.path is not None or args.bootstrap_server is not None:
        raise CliUsageError("give --zookeeper, or --path / --bootstrap-server, not both")
    # Imported here: only --zookeeper needs kazoo.
    from spark_mq.broker.zk.client import ZkClient, ZkClientConfig  # noqa: PLC0415
    from spark_mq.broker.zk.user_credentials import ZkCredentialBackend  # noqa: PLC0415

    zk = ZkClient(ZkClientConfig(connect=args.zookeeper, session_timeout_ms=10_000))
    zk.start()
    try:
        yield zk, ZkCredentialBackend(zk)
    finally:
        zk.close()


def _zk_add(args: argparse.Namespace, password: str, mechanisms: list[str]) -> None:
    from spark_mq.broker.zk.user_credentials import read_user  # noqa: PLC0415

    with _zookeeper(args) as (zk, backend):
        credentials = dict(read_user(zk, args.user))
        for mechanism in mechanisms:
            credentials[mechanism] = ScramCredential.from_password(
                mechanism, password, iterations=args.iterations
            )
        backend.write_user(args.user, credentials)


def _zk_remove(args: argparse.Namespace) -> list[str]:
    from spark_mq.broker.zk.user_credentials import read_user  # noqa: PLC0415

    with _zookeeper(args) as (zk, backend):
        credentials = dict(read_user(zk, args.user))
        mechanisms = args.mechanism or sorted(credentials)
        missing = [m for m in mechanisms if m not in credentials]
        if missing or not mechanisms:
            which = f" for {', '.join(missing)}" if missing else ""
            raise CliUsageError(
                f"user {args.user!r} has no SCRAM credential{which} in ZooKeeper "
                f"{args.zookeeper}; nothing was changed"
            )
        backend.write_user(args.user, {m: c for m, c in credentials.items() if m not in mechanisms})
    return mechanisms


def _zk_list(args: argparse.Namespace) -> dict[str, list[tuple[str, int]]]:
    with _zookeeper(args) as (_zk, backend):
        users = backend.load()
    return {
        user: [(m, c.iterations) for m, c in sorted(creds.items())]
        for user, creds in users.items()
        if not args.users or user in args.users
    }


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        password = str(args.password)
    elif args.password_file is not None:
        try:
            password = Path(args.password_file).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise CliUsageError(f"cannot read --password-file {args.password_file}: {exc}") from exc
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.user}: ")
        if getpass.getpass("again: ") != password:
            raise CliUsageError("the two passwords differ; nothing was changed")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliUsageError("the password is empty; nothing was changed")
    return password


def users_add(args: argparse.Namespace) -> int:
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise CliUsageError(f"--iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    password = _password(args)
    mechanisms = args.mechanism or list(SCRAM_HASHES)
    if args.zookeeper is not None:
        _zk_add(args, password, mechanisms)
    else:
        _add_through_broker(args, password, mechanisms)
    if args.json:
        print(json_text({"user": args.user, "added": mechanisms}))
    else:
        print(f"Set {', '.join(mechanisms)} credentials of user {args.user!r}.")
    return 0


def _add_through_broker(args: argparse.Namespace, password: str, mechanisms: list[str]) -> None:
    with _admin(args) as admin:
        admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(args.user, m, password, args.iterations)
                for m in mechanisms
            ]
        )


def users_remove(args: argparse.Namespace) -> int:
    zookeeper = args.zookeeper is not None
    mechanisms = _zk_remove(args) if zookeeper else _remove_through_broker(args)
    if args.json:
        print(json_text({"user": args.user, "removed": mechanisms}))
    else:
        print(f"Removed {', '.join(mechanisms)} credentials of user {args.user!r}.")
    return 0


def _remove_through_broker(args: argparse.Namespace) -> list[str]:
    with _admin(args) as admin:
        mechanisms = args.mechanism or [
            info.mechanism for info in admin.describe_user_scram_credentials([args.user])[args.user]
        ]
        alterations: list[Alteration] = [
            UserScramCredentialDeletion(args.user, m) for m in mechanisms
        ]
        admin.alter_user_scram_credentials(alterations)
    return list(mechanisms)


def users_list(args: argparse.Namespace) -> int:
    if args.zookeeper is not None:
        described = _zk_list(args)
    else:
        with _admin(args) as admin:
            described = {
                user: [(i.mechanism, i.iterations) for i in infos]
                for user, infos in admin.describe_user_scram_credentials(args.users or None).items()
            }
    if args.json:
        document: dict[str, Any] = {
            user: [{"mechanism": m, "iterations": n} for m, n in infos]
            for user, infos in sorted(described.items())
        }
        print(json_text({"users": document}))
        return 0
    if not described:
        print("No users.")
        return 0
    rows = [
        (user, ", ".join(f"{m} ({n})" for m, n in infos))
        for user, infos in sorted(described.items())
    ]
    print(render_table(["user", "credentials (iterations)"], rows))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``users`` and its actions on the ``spark-mq`` command parser."""
    actions = CommandGroup(
        commands,
        "users",
        help="add, remove and list SCRAM users (SASL authentication)",
        parents=[common],
    )
    add = actions.add(
        "add",
        users_add,
        help="add a user or change its password",
        description="Set the user's SCRAM credentials (both mechanisms unless --mechanism). "
        "The password comes from --password, --password-file, the terminal (asked twice) or "
        "the first line of standard input; it is salted here and never sent to the broker.",
    )
    add.add_argument("user", help="the user name (the principal is User:<name>)")
    secret = add.add_mutually_exclusive_group()
    secret.add_argument(
        "--password", help="the password (visible to other local users in ps; prefer a file)"
    )
    secret.add_argument("--password-file", metavar="F", help="read the password from F")
    add.add_argument(
        "--iterations",
        type=int,
        default=MIN_ITERATIONS,
        help=f"SCRAM iterations, {MIN_ITERATIONS}..{MAX_ITERATIONS} (default {MIN_ITERATIONS})",
    )
    remove = actions.add("remove", users_remove, help="remove a user's credentials")
    remove.add_argument("user")
    for p in (add, remove):
        p.add_argument(
            "--mechanism",
            action="append",
            choices=list(SCRAM_HASHES),
            help="only this mechanism (repeatable; default: all)",
        )
    lst = actions.add("list", users_list, help="list users and their SCRAM mechanisms")
    lst.add_argument("users", nargs="*", metavar="USER", help="only these users")
    for p in (add, remove, lst):
        p.add_argument(
            "--zookeeper",
            metavar="HOST:PORT[/chroot]",
            help="write the cluster's ZooKeeper directly, as kafka-configs --zookeeper (to "
            "create the brokers' own user before any broker runs)",
        )


HANDLERS: Final[dict[str, Handler]] = handler_table(users_add, users_remove, users_list)
