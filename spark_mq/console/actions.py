"""The console's admin actions, served only with ``--allow-admin``: reset a group's offsets,
abort a hanging transaction, delete a topic.

Each action has a confirmation page (GET: what will happen, and the form) and the action
itself (POST of that form). Without ``--allow-admin`` both answer 403 saying how to enable
them. Every form carries the console's CSRF token; a POST without it is refused (403). A
topic is deleted only when its name is typed in again.
"""

from __future__ import annotations

import hmac

from flask import Blueprint, render_template, request
from werkzeug.exceptions import Forbidden

from spark_mq.client.group.admin_groups import ALTERABLE_STATES
from spark_mq.client.records import EARLIEST, LATEST, TopicPartition
from spark_mq.console.context import ConsoleContext, context
from spark_mq.errors import GroupIdNotFoundError, NonEmptyGroupError, UsageError

actions = Blueprint("actions", __name__)

RESET_TARGETS = ("earliest", "latest", "offset")


class AdminDisabled(Forbidden):
    description = (
        "This console is read-only: admin actions (reset offsets, abort a transaction, "
        "delete a topic) are disabled. Start it with --allow-admin to enable them."
    )


class BadCsrfToken(Forbidden):
    description = (
        "The form's token does not match this console's (it was restarted, or the form came "
        "from another page). Open the confirmation page again and resubmit."
    )


def _admin_context() -> ConsoleContext:
    """The context, when admin actions are allowed; checks a POST's CSRF token."""
    ctx = context()
    if not ctx.config.allow_admin:
        raise AdminDisabled
    if request.method == "POST":
        sent = request.form.get("csrf_token", "")
        if not hmac.compare_digest(sent.encode(), ctx.csrf_token.encode()):
            raise BadCsrfToken
    return ctx


def _required(name: str) -> str:
    value = request.values.get(name, "")
    if not value:
        raise UsageError(f"the form field {name!r} is missing")
    return value


# ---------------------------------------------------------------------------------------------
# reset a group's offsets


@actions.route("/group/reset-offsets", methods=["GET", "POST"])
def reset_offsets() -> str:
    ctx = _admin_context()
    group_id = _required("id")
    with ctx.admin_client() as admin:
        description = admin.describe_group(group_id)
        committed = admin.list_group_offsets(group_id)
        if description.state == "Dead" and not committed:
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        topics = sorted({tp.topic for tp in committed})
        if request.method == "GET":
            return render_template(
                "confirm_reset.html",
                group=description,
                committed=sorted(committed.items()),
                topics=topics,
                targets=RESET_TARGETS,
                csrf_token=ctx.csrf_token,
                can_reset=description.state in ALTERABLE_STATES,
                active="groups",
            )
        # The rule alter_group_offsets applies too, said before anything is read.
        if description.state not in ALTERABLE_STATES:
            raise NonEmptyGroupError(
                f"group {group_id!r} is {description.state} with {len(description.members)} "
                "member(s): offsets can only be reset while it has none; stop its consumers"
            )
        topic = _required("topic")
        target = _required("target")
        if target not in RESET_TARGETS:
            raise UsageError(f"target must be one of {', '.join(RESET_TARGETS)}, got {target!r}")
        count = admin.describe_topic(topic).partition_count
        tps = [TopicPartition(topic, p) for p in range(count)]
        low = admin.list_offsets(dict.fromkeys(tps, EARLIEST))
        high = admin.list_offsets(dict.fromkeys(tps, LATEST))
        plan: dict[TopicPartition, int] = {}
        for tp in tps:
            if target == "earliest":
                wanted = low[tp].offset
            elif target == "latest":
                wanted = high[tp].offset
            else:
                try:
                    wanted = int(_required("offset"))
                except ValueError:
                    raise UsageError("offset must be an integer") from None
            # Kafka's rule: a target outside the log moves to its nearest end.
            plan[tp] = min(max(wanted, low[tp].offset), high[tp].offset)
        admin.alter_group_offsets(group_id, {tp: offset for tp, offset in plan.items()})
    return render_template(
        "done.html",
        message=f"Reset the offsets of group {group_id} for {len(plan)} partition(s) of "
        f"{topic} ({target}).",
        rows=[(f"{tp.topic}-{tp.partition}", offset) for tp, offset in sorted(plan.items())],
        back=("group", {"id": group_id}),
        active="groups",
    )


# ---------------------------------------------------------------------------------------------
# abort a transaction


@actions.route("/transaction/abort", methods=["GET", "POST"])
def abort_transaction() -> str:
    ctx = _admin_context()
    transactional_id = _required("id")
    with ctx.admin_client() as admin:
        (description,) = admin.describe_transactions([transactional_id])
        if request.method == "GET":
            return render_template(
                "confirm_abort.html",
                txn=description,
                csrf_token=ctx.csrf_token,
                active="transactions",
            )
        admin.abort_transaction(transactional_id)
    return render_template(
        "done.html",
        message=f"Aborted the transaction of {transactional_id}.",
        rows=[],
        back=("transactions", {}),
        active="transactions",
    )


# ---------------------------------------------------------------------------------------------
# delete a topic


@actions.route("/topics/<name>/delete", methods=["GET", "POST"])
def delete_topic(name: str) -> str:
    ctx = _admin_context()
    with ctx.admin_client() as admin:
        description = admin.describe_topic(name)
        if request.method == "GET":
            return render_template(
                "confirm_delete.html",
                topic=description,
                csrf_token=ctx.csrf_token,
                active="topics",
            )
        typed = request.form.get("confirm_name", "")
        if typed != name:
            raise UsageError(
                f"type the topic's exact name ({name!r}) to delete it; got {typed!r}: "
                "nothing was deleted"
            )
        admin.delete_topic(name)
    return render_template(
        "done.html",
        message=f"Deleted topic {name} and all its data.",
        rows=[],
        back=("topics", {}),
        active="topics",
    )
