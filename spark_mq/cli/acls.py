"""``spark-mq acls add|remove|list``: Kafka's ``kafka-acls`` with its options, against
``--bootstrap-server`` or ``--path DIR`` (:meth:`spark_mq.Admin.create_acls` and friends).

    spark-mq acls add --path D --allow-principal User:alice --operation Read --topic orders
    spark-mq acls add --path D --allow-principal User:etl --producer --topic out- \\
        --resource-pattern-type prefixed --transactional-id etl-
    spark-mq acls add --path D --allow-principal User:etl --consumer --topic in --group etl
    spark-mq acls list --path D --topic orders
    spark-mq acls remove --path D --allow-principal User:alice --operation Read --topic orders

``add`` makes one ACL per principal, host, operation and resource given (``--allow-host``
and ``--deny-host`` default to ``*``; ``--operation`` defaults to All). ``remove`` deletes
the ACLs those options name; with no principal it deletes every ACL of the resources.
``list`` shows the ACLs of the resources given (all of them without a resource), optionally
of one ``--principal``. ``--producer`` and ``--consumer`` are Kafka's shortcuts: Write,
Describe and Create on the topics (with ``--transactional-id``, Write and Describe on it;
with ``--idempotent``, IdempotentWrite on the cluster), and Read and Describe on the topics
with Read on the group.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from spark_mq.cli.common import CliUsageError, CommandGroup, Handler, admin_client, handler_table
from spark_mq.cli.format import plural, print_listing, print_result
from spark_mq.client.acl_admin import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from spark_mq.errors import ConfigError
from spark_mq.protocol.acls import CLUSTER_NAME, WILDCARD

Op = AclOperation
RT = ResourceType

_PRODUCER_TOPIC: Final = (Op.WRITE, Op.DESCRIBE, Op.CREATE)
_CONSUMER_TOPIC: Final = (Op.READ, Op.DESCRIBE)


def _parse(kind: Any, text: str, option: str) -> Any:
    try:
        return kind.parse(text)
    except ConfigError as exc:
        raise CliUsageError(f"{option}: {exc}") from exc


def _pattern_type(args: argparse.Namespace) -> PatternType:
    return _parse(PatternType, args.resource_pattern_type, "--resource-pattern-type")  # type: ignore[no-any-return]


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    found = [(RT.TOPIC, t) for t in args.topic or ()]
    found += [(RT.GROUP, g) for g in args.group or ()]
    found += [(RT.TRANSACTIONAL_ID, t) for t in args.transactional_id or ()]
    if args.cluster:
        found.append((RT.CLUSTER, CLUSTER_NAME))
    return found


def _operations(args: argparse.Namespace) -> list[AclOperation]:
    return [_parse(AclOperation, op, "--operation") for op in args.operation or ("All",)]


def _entries(args: argparse.Namespace, ops: list[AclOperation]) -> list[AccessControlEntry]:
    entries: list[AccessControlEntry] = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for principal in principals or ():
            if ":" not in principal:
                raise CliUsageError(f"principal {principal!r}: write it as Kafka does, User:<name>")
            for host in hosts or (WILDCARD,):
                entries.extend(AccessControlEntry(principal, host, op, permission) for op in ops)
    return entries


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    """The ACLs ``add`` (and ``remove``) name, shortcuts included."""
    pattern_type = _pattern_type(args)
    resources = _resources(args)
    if not resources:
        raise CliUsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if args.producer or args.consumer:
        if args.operation:
            raise CliUsageError("--producer and --consumer choose the operations: drop --operation")
        out: list[AclBinding] = []
        for rtype, name in resources:
            ops: tuple[AclOperation, ...] = ()
            if rtype is RT.TOPIC:
                ops = (_PRODUCER_TOPIC if args.producer else ()) + (
                    _CONSUMER_TOPIC if args.consumer else ()
                )
            elif rtype is RT.GROUP and args.consumer:
                ops = (Op.READ,)
            elif rtype is RT.TRANSACTIONAL_ID and args.producer:
                ops = (Op.WRITE, Op.DESCRIBE)
            pattern = ResourcePattern(rtype, name, pattern_type)
            out += [AclBinding(pattern, e) for e in _entries(args, sorted(set(ops)))]
        if args.producer and args.idempotent:
            cluster = ResourcePattern(RT.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            out += [AclBinding(cluster, e) for e in _entries(args, [Op.IDEMPOTENT_WRITE])]
        return out
    operations = _operations(args)
    return [
        AclBinding(ResourcePattern(rtype, name, pattern_type), entry)
        for rtype, name in resources
        for entry in _entries(args, operations)
    ]


def _describe(binding: AclBinding) -> dict[str, str]:
    p, e = binding.pattern, binding.entry
    return {
        "resource_type": p.resource_type.kafka_name,
        "name": p.name,
        "pattern_type": p.pattern_type.name,
        "principal": e.principal,
        "host": e.host,
        "operation": e.operation.kafka_name,
        "permission_type": e.permission_type.kafka_name,
    }


def _print(args: argparse.Namespace, bindings: list[AclBinding], empty: str) -> None:
    docs = [_describe(b) for b in bindings]
    print_listing(
        args.json,
        docs,
        ["resource", "pattern", "principal", "host", "operation", "permission"],
        [
            (
                f"{d['resource_type']}:{d['name']}",
                d["pattern_type"],
                d["principal"],
                d["host"],
                d["operation"],
                d["permission_type"],
            )
            for d in docs
        ],
        empty=empty,
    )


def acls_add(args: argparse.Namespace) -> int:
    bindings = _bindings(args)
    if not bindings:
        raise CliUsageError("name a principal: --allow-principal or --deny-principal User:<name>")
    with admin_client(args) as admin:
        admin.create_acls(bindings)
    if args.json:
        print_result(True, [_describe(b) for b in bindings], "")
    else:
        print(f"Added {plural(len(bindings), 'ACL')}:")
        _print(args, bindings, empty="")
    return 0


def acls_remove(args: argparse.Namespace) -> int:
    if args.allow_principal or args.deny_principal:
        filters = [
            AclBindingFilter(
                b.pattern.resource_type,
                b.pattern.name,
                b.pattern.pattern_type,
                b.entry.principal,
                b.entry.host,
                b.entry.operation if args.operation or args.producer or args.consumer else Op.ANY,
                b.entry.permission_type,
            )
            for b in _bindings(args)
        ]
    else:
        resources = _resources(args)
        if not resources:
            raise CliUsageError(
                "name a resource: --topic, --group, --transactional-id or --cluster"
            )
        pattern_type = _pattern_type(args)
        filters = [AclBindingFilter(rtype, name, pattern_type) for rtype, name in resources]
    with admin_client(args) as admin:
        removed = admin.delete_acls(filters)
    if not args.json:
        print(f"Removed {plural(len(removed), 'ACL')}" + (":" if removed else "."))
    if removed or args.json:
        _print(args, removed, empty="")
    return 0


def acls_list(args: argparse.Namespace) -> int:
    pattern_type = _pattern_type(args) if args.resource_pattern_type else PatternType.ANY
    resources = _resources(args)
    filters = [
        AclBindingFilter(rtype, name, pattern_type, args.principal) for rtype, name in resources
    ]
    if not filters:
        filters = [AclBindingFilter(principal=args.principal)]
    with admin_client(args) as admin:
        found: list[AclBinding] = []
        for flt in filters:
            found += [b for b in admin.describe_acls(flt) if b not in found]
    _print(args, found, empty="No ACLs.")
    return 0


def _resource_options(parser: argparse.ArgumentParser, *, default_pattern: str | None) -> None:
    parser.add_argument("--topic", action="append", metavar="T", help="a topic (repeatable)")
    parser.add_argument("--group", action="append", metavar="G", help="a consumer group")
    parser.add_argument(
        "--transactional-id", action="append", metavar="ID", help="a transactional id"
    )
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument(
        "--resource-pattern-type",
        default=default_pattern,
        metavar="TYPE",
        help="literal (the default), prefixed; to list or remove also any or match",
    )


def _entry_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-principal", action="append", metavar="User:NAME")
    parser.add_argument("--deny-principal", action="append", metavar="User:NAME")
    parser.add_argument("--allow-host", action="append", metavar="HOST", help="default: *")
    parser.add_argument("--deny-host", action="append", metavar="HOST", help="default: *")
    parser.add_argument(
        "--operation",
        action="append",
        metavar="OP",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite or All (the default; repeatable)",
    )
    parser.add_argument("--producer", action="store_true", help="Kafka's producer shortcut")
    parser.add_argument("--consumer", action="store_true", help="Kafka's consumer shortcut")
    parser.add_argument(
        "--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster"
    )
    parser.add_argument("--force", action="store_true", help="accepted as kafka-acls; never asks")


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``acls`` and its actions on the ``spark-mq`` command parser."""
    actions = CommandGroup(
        commands, "acls", help="add, remove, list ACLs (kafka-acls)", parents=[common]
    )
    add = actions.add("add", acls_add, help="add ACLs")
    _resource_options(add, default_pattern="literal")
    _entry_options(add)
    remove = actions.add("remove", acls_remove, help="remove ACLs")
    _resource_options(remove, default_pattern="literal")
    _entry_options(remove)
    lst = actions.add("list", acls_list, help="list ACLs")
    _resource_options(lst, default_pattern=None)
    lst.add_argument("--principal", metavar="User:NAME", help="only this principal's ACLs")


HANDLERS: Final[dict[str, Handler]] = handler_table(acls_add, acls_remove, acls_list)
