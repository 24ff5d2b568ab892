"""``spark-mq quotas alter|describe``: client quotas (Kafka's ``kafka-configs
--entity-type users|clients``).

    spark-mq quotas alter --entity-type users --entity-name alice \
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152 --bootstrap-server H:P
    spark-mq quotas alter --entity-type users --entity-name alice --entity-type clients \
        --entity-name etl --add-config request_percentage=50 --path DIR
    spark-mq quotas alter --entity-type clients --entity-default --delete-config consumer_byte_rate
    spark-mq quotas describe --entity-type users          (every user entity)
    spark-mq quotas describe                              (every entity)

An entity is ``--entity-type users`` and/or ``--entity-type clients``, each followed by
``--entity-name NAME`` or ``--entity-default`` (Kafka's ``<default>``: every user or client id
without a quota of its own); describe without a name matches every entity of the type.
Alterations go through the admin API (AlterClientQuotas / DescribeClientQuotas): a cluster's
brokers keep them in ZooKeeper and each applies them within seconds, the embedded broker
(``--path``) in its log directory. ``--zookeeper HOST:PORT[/chroot]`` writes a cluster's
ZooKeeper directly instead (Kafka's ``kafka-configs --zookeeper``), with the change
notification that running brokers apply.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from spark_mq.cli.common import CliUsageError, CommandGroup, Handler, client_config, handler_table
from spark_mq.cli.format import json_text, render_table
from spark_mq.client.admin import Admin
from spark_mq.client.quota_admin import (
    DEFAULT,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    filter_any,
    filter_default,
    filter_exact,
)
from spark_mq.protocol.quotas import CLIENT_ID, QUOTA_KEYS, USER, FilterComponent

if TYPE_CHECKING:
    from spark_mq.broker.zk.client import ZkClient

#: kafka-configs' entity types -> the protocol's.
ENTITY_TYPES: Final = {"users": USER, "clients": CLIENT_ID}


class _EntityType(argparse.Action):
    def __call__(self, parser: Any, ns: argparse.Namespace, value: Any, opt: Any = None) -> None:
        entities = list(getattr(ns, "entities", None) or [])
        entities.append([ENTITY_TYPES[value], None])
        ns.entities = entities


class _EntityName(argparse.Action):
    def __call__(self, parser: Any, ns: argparse.Namespace, value: Any, opt: Any = None) -> None:
        entities = getattr(ns, "entities", None) or []
        if not entities or entities[-1][1] is not None:
            raise CliUsageError(f"{opt} must follow an --entity-type (users or clients)")
        entities[-1][1] = value if isinstance(value, str) else DEFAULT  # --entity-default: []


def _entity(args: argparse.Namespace) -> ClientQuotaEntity:
    entities = args.entities or []
    if not entities:
        raise CliUsageError("give --entity-type users and/or clients, each with a name")
    names: dict[str, str] = {}
    for kind, name in entities:
        if name is None:
            raise CliUsageError(
                f"give --entity-name or --entity-default after --entity-type {kind}"
            )
        if kind in names:
            raise CliUsageError(f"--entity-type {kind} is given twice")
        if name == "":
            raise CliUsageError("--entity-name is empty")
        names[kind] = name
    return ClientQuotaEntity(names.get(USER), names.get(CLIENT_ID))


def _filter(args: argparse.Namespace) -> list[FilterComponent]:
    out = []
    for kind, name in args.entities or []:
        if name is None:
            out.append(filter_any(kind))
        elif name == DEFAULT:
            out.append(filter_default(kind))
        else:
            out.append(filter_exact(kind, name))
    return out


def parse_add_config(text: str | None) -> dict[str, float | None]:
    """``k=v,k=v`` of --add-config (CliUsageError naming the bad item)."""
    out: dict[str, float | None] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in QUOTA_KEYS:
            raise CliUsageError(
                f"--add-config item {item!r}: write KEY=VALUE with KEY one of "
                f"{', '.join(QUOTA_KEYS)}"
            )
        try:
            out[key] = float(value)
        except ValueError:
            raise CliUsageError(
                f"--add-config {key}={value!r}: the value is not a number"
            ) from None
    return out


def _ops(args: argparse.Namespace) -> dict[str, float | None]:
    ops = parse_add_config(args.add_config)
    for key in (args.delete_config or "").split(","):
        if key.strip():
            if key.strip() in ops:
                raise CliUsageError(f"{key.strip()} is both added and deleted")
            ops[key.strip()] = None
    if not ops:
        raise CliUsageError("give --add-config and/or --delete-config")
    return ops


@contextlib.contextmanager
def _zookeeper(args: argparse.Namespace) -> Iterator[ZkClient]:
    if args.path is not None or args.bootstrap_server is not None:
        raise CliUsageError("give --zookeeper, or --path / --bootstrap-server, not both")
    # Imported here: only --zookeeper needs kazoo.
    from spark_mq.broker.zk.client import ZkClient, ZkClientConfig  # noqa: PLC0415

    zk = ZkClient(ZkClientConfig(connect=args.zookeeper, session_timeout_ms=10_000))
    zk.start()
    try:
        yield zk
    finally:
        zk.close()


def _zk_alter(
    args: argparse.Namespace, entity: ClientQuotaEntity, ops: dict[str, float | None]
) -> None:
    from spark_mq.broker.quotas.entity import QuotaEntity  # noqa: PLC0415
    from spark_mq.broker.quotas.store import apply_ops  # noqa: PLC0415
    from spark_mq.broker.zk.client_quotas import ZkQuotaBackend  # noqa: PLC0415
    from spark_mq.protocol.quotas import QuotaOp  # noqa: PLC0415

    target = QuotaEntity(entity.user, entity.client_id)
    quota_ops = [QuotaOp(k, 0.0, True) if v is None else QuotaOp(k, v) for k, v in ops.items()]
    with _zookeeper(args) as zk:
        ZkQuotaBackend(zk).alter_entity(target, lambda now: apply_ops(target, now, quota_ops))


def quotas_alter(args: argparse.Namespace) -> int:
    entity = _entity(args)
    ops = _ops(args)
    if args.zookeeper is not None:
        _zk_alter(args, entity, ops)
    else:
        with Admin(**client_config(args)) as admin:
            admin.alter_client_quotas([ClientQuotaAlteration(entity, ops)])
    if args.json:
        print(json_text({"entity": _entity_doc(entity), "altered": ops}))
    else:
        shown = ", ".join(f"{k}={'(deleted)' if v is None else _number(v)}" for k, v in ops.items())
        print(f"Altered the quotas of {_entity_text(entity)}: {shown}.")
    return 0


def _zk_describe(
    args: argparse.Namespace, components: Sequence[FilterComponent]
) -> dict[ClientQuotaEntity, dict[str, float]]:
    from spark_mq.broker.quotas.entity import filter_matcher  # noqa: PLC0415
    from spark_mq.broker.zk.client_quotas import ZkQuotaBackend  # noqa: PLC0415

    matches = filter_matcher(list(components), False)
    with _zookeeper(args) as zk:
        configs = ZkQuotaBackend(zk).load()
    return {ClientQuotaEntity(e.user, e.client_id): v for e, v in configs.items() if matches(e)}


def quotas_describe(args: argparse.Namespace) -> int:
    components = _filter(args)
    if args.zookeeper is not None:
        described = _zk_describe(args, components)
    else:
        with Admin(**client_config(args)) as admin:
            described = admin.describe_client_quotas(components)
    ordered = sorted(described.items(), key=lambda kv: _entity_text(kv[0]))
    if args.json:
        doc = [{"entity": _entity_doc(e), "quotas": dict(sorted(v.items()))} for e, v in ordered]
        print(json_text({"quotas": doc}))
        return 0
    if not ordered:
        print("No client quotas.")
        return 0
    rows = [
        (_entity_text(e), ", ".join(f"{k}={_number(x)}" for k, x in sorted(v.items())))
        for e, v in ordered
    ]
    print(render_table(["entity", "quotas"], rows))
    return 0


#: Whole numbers up to this are printed without a fraction; past it a float's digits are
#: not the number's (1e308 would print as 309 digits, most of them noise).
_EXACT_INTEGER_BOUND = 2**53


def _number(value: float) -> str:
    value = float(value)
    return (
        str(int(value)) if value.is_integer() and abs(value) <= _EXACT_INTEGER_BOUND else str(value)
    )


def _entity_doc(entity: ClientQuotaEntity) -> dict[str, str]:
    out = {}
    if entity.user is not None:
        out["user"] = entity.user
    if entity.client_id is not None:
        out["client-id"] = entity.client_id
    return out


def _entity_text(entity: ClientQuotaEntity) -> str:
    return ", ".join(f"{k}={v}" for k, v in _entity_doc(entity).items())


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``quotas`` and its actions on the ``spark-mq`` command parser."""
    actions = CommandGroup(
        commands,
        "quotas",
        help="set and show client quotas (byte rates, request time) per user and client id",
        parents=[common],
    )
    alter = actions.add(
        "alter",
        quotas_alter,
        help="set or delete quotas of a user, a client id or both",
        description="Set (--add-config) or delete (--delete-config) the quotas of one entity: "
        f"{', '.join(QUOTA_KEYS)}.",
    )
    alter.add_argument("--add-config", metavar="K=V,...", help="quotas to set")
    alter.add_argument("--delete-config", metavar="K,...", help="quotas to delete")
    describe = actions.add(
        "describe", quotas_describe, help="show the quotas of the entities matched"
    )
    for p in (alter, describe):
        p.add_argument(
            "--entity-type",
            choices=list(ENTITY_TYPES),
            action=_EntityType,
            help="users or clients (both, each with its name, for a user's client id)",
        )
        p.add_argument(
            "--entity-name", action=_EntityName, metavar="NAME", help="the entity type's name"
        )
        p.add_argument(
            "--entity-default",
            action=_EntityName,
            nargs=0,
            help="the entity type's default (<default>)",
        )
        p.add_argument(
            "--zookeeper",
            metavar="HOST:PORT[/chroot]",
            help="the cluster's ZooKeeper directly, as kafka-configs --zookeeper",
        )
        p.set_defaults(entities=None)


HANDLERS: Final[dict[str, Handler]] = handler_table(quotas_alter, quotas_describe)
