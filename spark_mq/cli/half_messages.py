"""``spark-mq half-messages list [--discarded]``: the half messages (RocketMQ-style
transactional messages, docs/half_messages.md) a broker holds.

``list`` shows the pending ones: stored, not yet committed or rolled back, with how often
the broker has asked a producer of their group about them. ``--discarded`` shows those moved
to ``__half_discarded`` after ``transaction.check.max`` unanswered checks, which an operator
must handle (read them from that topic, decide, produce them again or drop them).
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any, Final

from spark_mq.cli.common import CommandGroup, Handler, client_config, handler_table
from spark_mq.cli.format import json_text, render_table
from spark_mq.client.half_messages import list_half_messages
from spark_mq.protocol.half_messages import HalfMessage, HalfState


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", "backslashreplace")


def _document(message: HalfMessage) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "producer_group": message.producer_group,
        "topic": message.topic,
        "partition": message.partition,
        "key": _text(message.key),
        "value": _text(message.value),
        "created_ms": message.created_ms,
        "check_count": message.check_count,
        "state": HalfState(message.state).name,
    }


def _created(ms: int) -> str:
    stamp = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return stamp.isoformat(timespec="seconds")


def half_messages_list(args: argparse.Namespace) -> int:
    listing = list_half_messages(
        **client_config(args), discarded=args.discarded, producer_group=args.producer_group
    )
    if args.json:
        print(
            json_text(
                {
                    "messages": [_document(m) for m in listing.messages],
                    "discarded_count": listing.discarded_count,
                }
            )
        )
        return 0
    if listing.messages:
        rows = [
            (
                m.message_id,
                m.producer_group,
                f"{m.topic}-{m.partition}",
                _created(m.created_ms),
                m.check_count,
                _text(m.key),
            )
            for m in listing.messages
        ]
        print(
            render_table(
                ["message id", "producer group", "partition", "sent", "checks", "key"], rows
            )
        )
    else:
        print("No discarded half messages." if args.discarded else "No pending half messages.")
    if not args.discarded and listing.discarded_count:
        print(
            f"{listing.discarded_count} half message(s) were discarded: "
            "see half-messages list --discarded"
        )
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``half-messages`` and its actions on the ``spark-mq`` command parser."""
    actions = CommandGroup(
        commands,
        "half-messages",
        help="list pending and discarded half messages (transactional messages)",
        parents=[common],
    )
    lst = actions.add(
        "list",
        half_messages_list,
        help="list pending (or discarded) half messages",
        description=(
            "List the half messages the broker holds: pending ones (neither committed nor "
            "rolled back yet), or with --discarded those moved to __half_discarded after "
            "transaction.check.max unanswered check-backs."
        ),
    )
    lst.add_argument(
        "--discarded", action="store_true", help="list the discarded half messages instead"
    )
    lst.add_argument("--producer-group", metavar="G", help="only the half messages of group G")


HANDLERS: Final[dict[str, Handler]] = handler_table(half_messages_list)
