"""``spark-mq transactions list|describe|abort``: transactions through
:class:`~spark_mq.Admin`, like Kafka's ``kafka-transactions.sh``.

``list`` shows every transactional id the coordinators know, with filters; ``--duration-ms D``
keeps the transactions open for longer than D ms, which is how hanging ones are found (Kafka's
``find-hanging``): an open or prepared transaction holds back the last stable offset of its
partitions and so stalls every ``read_committed`` reader of them. ``abort`` ends such a
transaction (Ongoing or Prepared) with an abort decision.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from spark_mq.cli.common import (
    CommandGroup,
    Handler,
    admin_client,
    handler_table,
    non_negative_int,
)
from spark_mq.cli.format import print_listing, print_result
from spark_mq.client.transactions import TransactionDescription
from spark_mq.protocol.transactions import TXN_STATES


def _duration(ms: int) -> str:
    return "-" if ms < 0 else f"{ms / 1000:.1f}s"


def transactions_list(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        listings = admin.list_transactions(
            states=args.state or (),
            producer_ids=args.producer_id or (),
            duration_ms=-1 if args.duration_ms is None else args.duration_ms,
            prefix=args.prefix,
        )
    print_listing(
        args.json,
        [
            {
                "transactional_id": t.transactional_id,
                "producer_id": t.producer_id,
                "state": t.state,
                "duration_ms": t.duration_ms,
                "coordinator": t.coordinator_id,
            }
            for t in listings
        ],
        ["transactional id", "producer id", "state", "open for", "coordinator"],
        [
            (t.transactional_id, t.producer_id, t.state, _duration(t.duration_ms), t.coordinator_id)
            for t in listings
        ],
        empty="No transactions.",
    )
    return 0


def describe_document(description: TransactionDescription) -> dict[str, Any]:
    """Everything ``transactions describe`` shows, as one JSON-ready document."""
    return {
        "transactional_id": description.transactional_id,
        "state": description.state,
        "producer_id": description.producer_id,
        "producer_epoch": description.producer_epoch,
        "transaction_timeout_ms": description.transaction_timeout_ms,
        "transaction_start_time_ms": description.transaction_start_time_ms,
        "prepared_time_ms": description.prepared_time_ms,
        "coordinator": description.coordinator_id,
        "partitions": [[tp.topic, tp.partition] for tp in description.partitions],
    }


def transactions_describe(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        (description,) = admin.describe_transactions([args.transactional_id])
    document = describe_document(description)
    lines = [
        f"{key.replace('_', ' ')}: {document[key]}"
        for key in (
            "transactional_id",
            "state",
            "producer_id",
            "producer_epoch",
            "transaction_timeout_ms",
            "transaction_start_time_ms",
            "prepared_time_ms",
            "coordinator",
        )
    ]
    parts = ", ".join(str(tp) for tp in description.partitions) or "-"
    lines.append(f"partitions: {parts}")
    print_result(args.json, document, "\n".join(lines))
    return 0


def transactions_abort(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        admin.abort_transaction(args.transactional_id)
    print_result(
        args.json,
        {"transactional_id": args.transactional_id, "aborted": True},
        f"Aborted the transaction of {args.transactional_id}.",
    )
    return 0


def _state(text: str) -> str:
    by_lower = {s.lower(): s for s in TXN_STATES}
    name = by_lower.get(text.lower())
    if name is None:
        raise argparse.ArgumentTypeError(
            f"unknown state {text!r}; use one of {', '.join(TXN_STATES)}"
        )
    return name


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``transactions`` and its actions on the ``spark-mq`` command parser."""
    actions = CommandGroup(
        commands,
        "transactions",
        help="list, describe and abort (hanging) transactions",
        parents=[common],
    )
    lst = actions.add(
        "list",
        transactions_list,
        help="list transactional ids and their transactions",
        description=(
            "List the transactional ids the coordinators know. --duration-ms D keeps only "
            "transactions open for longer than D ms: the hanging ones, which hold back the "
            "last stable offset of their partitions (end them with: transactions abort)."
        ),
    )
    lst.add_argument(
        "--state",
        action="append",
        type=_state,
        metavar="STATE",
        help=f"only transactions in this state ({', '.join(TXN_STATES)}; repeatable)",
    )
    lst.add_argument(
        "--producer-id",
        action="append",
        type=non_negative_int,
        metavar="N",
        help="only this producer id (repeatable)",
    )
    lst.add_argument(
        "--duration-ms",
        type=non_negative_int,
        metavar="D",
        help="only transactions open for longer than D ms (finds hanging ones)",
    )
    lst.add_argument("--prefix", metavar="P", help="only transactional ids starting with P")

    describe = actions.add(
        "describe",
        transactions_describe,
        help="state, producer id and epoch, timeout and partitions of one transactional id",
    )
    describe.add_argument("--transactional-id", required=True, metavar="ID")

    abort = actions.add(
        "abort",
        transactions_abort,
        help="abort a hanging (Ongoing or Prepared) transaction",
        description=(
            "End the open or prepared transaction of a transactional id with an abort: its "
            "records are hidden from read_committed readers, and the last stable offset of "
            "its partitions moves on."
        ),
    )
    abort.add_argument("--transactional-id", required=True, metavar="ID")


HANDLERS: Final[dict[str, Handler]] = handler_table(
    transactions_list, transactions_describe, transactions_abort
)
