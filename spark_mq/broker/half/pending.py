"""A half message the service holds (:mod:`~spark_mq.broker.half.service`): the pending
one with its check count and the check now out, and how one ended (:class:`Outcome`), kept
for ``transaction.half.op.retention.ms``; what ListHalfMessages and CheckHalfMessages return
of it (:func:`to_message`).
"""

from __future__ import annotations

import dataclasses
import logging

from spark_mq.broker.half.half_log import DISCARD_TOPIC
from spark_mq.broker.half.records import HalfRecord
from spark_mq.protocol.half_messages import HalfMessage, HalfState

logger = logging.getLogger("spark_mq.broker.half")


@dataclasses.dataclass
class PendingMessage:
    """A message with a record and no final op (or a discarded one, kept for listing)."""

    record: HalfRecord
    #: Checks whose answer was due and did not come (as ``__half_ops`` has it).
    check_count: int
    #: Wall-clock ms when the check now out was handed to a producer; -1 when none is out
    #: (none since this broker started, or the last one was counted).
    check_out_ms: int = -1

    @property
    def checks_asked(self) -> int:
        """How many times a producer was asked: the counted checks and the one out."""
        return self.check_count + (1 if self.check_out_ms >= 0 else 0)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a message ended, kept for ``transaction.half.op.retention.ms``."""

    state: HalfState
    #: The real record's offset when COMMITTED, else -1.
    offset: int
    #: The service's clock when it ended.
    ended_ms: int
    #: The ``__half_messages`` partition the message lives in (0 on one node).
    index: int = 0


def log_discard(pending: PendingMessage) -> None:
    logger.warning(
        "half message %s of group %s moved to %s after %d unanswered checks",
        pending.record.message_id,
        pending.record.producer_group,
        DISCARD_TOPIC,
        pending.check_count,
    )


def to_message(pending: PendingMessage, state: HalfState) -> HalfMessage:
    """The message as the half-message APIs return it, in ``state``."""
    r = pending.record
    return HalfMessage(
        r.message_id,
        r.producer_group,
        r.topic,
        r.partition,
        r.key,
        r.value,
        list(r.headers),
        r.created_ms,
        pending.checks_asked,
        state,
    )
