"""Where a follower truncates its log before it fetches: the leader epoch rules.

A replica that becomes a follower (after a leader change, or a restart) may hold records the
new leader does not have: the tail the old leader wrote but never replicated, or a tail of
its own from a term in which it led. It must cut them off before it fetches, and it must not
cut anything the leader has, above all not a record that was committed (acknowledged to an
``acks=all`` producer: below the leader's high watermark).

Kafka first truncated to the follower's own high watermark. KIP-101 showed two ways that
fails, both because a follower learns the high watermark one fetch late:

- **Lost data**: a follower that restarts truncates to its lagging high watermark and drops a
  committed record; if it is then elected, the record is gone everywhere.
- **Divergence**: after failures in quick succession the follower keeps a record that a new
  leader wrote differently at the same offset (its high watermark was past the point where
  the logs differ), and the two logs disagree below the high watermark forever.

So the follower asks the leader instead (OffsetsForLeaderEpoch) where its latest epoch ends in
the leader's log. KIP-279 fixed the first version of that exchange: when the leader never had
the follower's epoch, it answers with the largest epoch it has below it, and the follower
continues from *its* largest epoch at or below that one. The rules (Kafka's
``AbstractFetcherThread`` since 2.0):

1. Ask the leader for the end of the follower's latest epoch E: ``(L, end)``, L <= E the
   largest epoch the leader knows at or below E.
2. Look up L in the follower's own cache: ``(F, own_end)``, F <= L.
3. If F == L both logs agree up to ``min(end, own_end)`` (the epoch ends where it ends first):
   truncate there. Done.
4. If F < L the follower never had epoch L: everything from the end of its epoch F on is of
   epochs the leader does not have in that place, so truncate to ``own_end`` and repeat from 1
   with the follower's now latest epoch (each round removes at least one epoch).
5. The result never exceeds the follower's log end.

With no epoch to ask about (an empty cache: data appended without a leader epoch) or an
undefined answer (a leader that knows no epoch at or below E), nothing better is known and
the follower truncates to its high watermark, as Kafka does; the result says so
(``by_high_watermark``) so that the caller can log it.

:func:`truncation_offset` is the pure rule over a follower's entries and a function that asks
the leader; :func:`truncate_as_follower` applies it to a
:class:`~spark_mq.storage.log.PartitionLog`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from spark_mq.storage.leader_epoch_cache import (
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    EpochEntry,
    end_offset_for,
    truncated_from_end,
)

if TYPE_CHECKING:
    from spark_mq.storage.log import PartitionLog

__all__ = ["AskLeader", "Truncation", "truncate_as_follower", "truncation_offset"]

log = logging.getLogger(__name__)

#: OffsetsForLeaderEpoch sent to the leader: epoch -> (largest epoch <= it, its end offset).
AskLeader = Callable[[int], EpochEndOffset]


class Truncation(NamedTuple):
    """Where to truncate: ``offset``; how many questions it took; whether it fell back to the
    follower's high watermark for want of epochs."""

    offset: int
    rounds: int
    by_high_watermark: bool = False


def truncation_offset(
    follower_epochs: Sequence[EpochEntry],
    *,
    log_end_offset: int,
    high_watermark: int,
    ask_leader: AskLeader,
) -> Truncation:
    """The offset a follower truncates to before fetching (rules in the module doc).

    ``follower_epochs`` are its leader epoch cache's entries, ``log_end_offset`` and
    ``high_watermark`` its own; ``ask_leader`` sends OffsetsForLeaderEpoch to the leader.
    """
    entries = list(follower_epochs)
    end = log_end_offset
    # Every round but the last removes at least one entry, so this bounds the questions.
    for rounds in range(1, len(entries) + 2):
        if not entries:
            return Truncation(min(high_watermark, end), rounds - 1, by_high_watermark=True)
        answer = ask_leader(entries[-1].epoch)
        if answer.end_offset == UNDEFINED_EPOCH_OFFSET:
            return Truncation(min(high_watermark, end), rounds, by_high_watermark=True)
        own = end_offset_for(entries, answer.leader_epoch, end)
        if own.end_offset == UNDEFINED_EPOCH_OFFSET:
            # The leader's epoch is older than all the follower has (its log start moved past
            # it): what lies below the leader's answer is the leader's too.
            return Truncation(min(answer.end_offset, end), rounds)
        if own.leader_epoch == answer.leader_epoch:
            return Truncation(min(answer.end_offset, own.end_offset, end), rounds)
        # KIP-279: the follower never had the leader's epoch; drop its epochs above it.
        end = min(own.end_offset, end)
        entries = truncated_from_end(entries, end)
    raise AssertionError(f"no truncation offset after {len(follower_epochs) + 1} rounds")


def truncate_as_follower(replica: PartitionLog, ask_leader: AskLeader) -> Truncation:
    """Truncate ``replica`` (becoming a follower; nothing appends to it meanwhile) by the
    leader epoch rules and return what was decided."""
    decided = truncation_offset(
        replica.leader_epoch_cache.entries,
        log_end_offset=replica.log_end_offset,
        high_watermark=replica.high_watermark,
        ask_leader=ask_leader,
    )
    if decided.offset < replica.log_end_offset:
        log.info(
            "%s-%d: truncating to offset %d (log end %d) %s after %d OffsetsForLeaderEpoch "
            "round(s)",
            replica.topic,
            replica.partition,
            decided.offset,
            replica.log_end_offset,
            "to the high watermark, for want of leader epochs to compare,"
            if decided.by_high_watermark
            else "where its epochs stop agreeing with the leader's",
            decided.rounds,
        )
    # Even at the log end: the cache may hold an epoch this replica started as leader without
    # appending to it, which truncation forgets (as Kafka's truncateTo does).
    replica.truncate_to(decided.offset)
    return decided
