"""Rebalance listeners: what the application is told when its partitions change.

A listener is any object with some of ``on_partitions_revoked``, ``on_partitions_assigned``
and ``on_partitions_lost`` (missing methods are skipped), or a subclass of
:class:`ConsumerRebalanceListener`. Every call runs in the thread that called
:meth:`~spark_mq.Consumer.poll` (or ``close``/``unsubscribe``), inside that call, as in Kafka,
so a listener may use the consumer: commit in ``on_partitions_revoked``, ``seek`` in
``on_partitions_assigned``.

When each is called:

- ``on_partitions_revoked(partitions)``: the member gives these partitions up in an orderly
  way, with its generation still valid, so committing their offsets here works (auto-commit has
  already committed the positions when it is on). Eager assignors revoke every partition
  before each rebalance; cooperative-sticky revokes only the partitions that move. Not called
  with an empty set.
- ``on_partitions_assigned(partitions)``: after every completed rebalance, with the partitions
  added by it (eager: the whole assignment; cooperative: only the new ones, possibly none).
  Positions are looked up after it returns (committed offset, else ``auto.offset.reset``), so a
  ``seek`` here wins.
- ``on_partitions_lost(partitions)``: the member was already out of the group (session or poll
  timeout, fenced) when it found out, so the partitions may already belong to someone else
  and committing is pointless. The default implementation calls ``on_partitions_revoked``, as
  Kafka's does. Not called with an empty set.

An exception from a callback is logged; the rebalance still completes, and the first such
exception is raised from the ``poll`` that ran it.

>>> class Printer(ConsumerRebalanceListener):
...     def on_partitions_assigned(self, partitions):
...         print(sorted(str(tp) for tp in partitions))
>>> RebalanceCallbacks(Printer()).assigned({TopicPartition("t", 1), TopicPartition("t", 0)})
['t-0', 't-1']
"""

from __future__ import annotations

import logging
from collections.abc import Set

from spark_mq.client.records import TopicPartition

log = logging.getLogger(__name__)


class ConsumerRebalanceListener:
    """Subclass and override what you need; every method does nothing by default, except
    :meth:`on_partitions_lost`, which calls :meth:`on_partitions_revoked`."""

    def on_partitions_revoked(self, partitions: Set[TopicPartition]) -> None:
        """These partitions are given up; commit what you processed of them."""

    def on_partitions_assigned(self, partitions: Set[TopicPartition]) -> None:
        """These partitions were added; ``seek`` here to choose where reading starts."""

    def on_partitions_lost(self, partitions: Set[TopicPartition]) -> None:
        """These partitions were lost without a clean hand-over (they may already be read by
        another member); by default the same as :meth:`on_partitions_revoked`."""
        self.on_partitions_revoked(partitions)


class RebalanceCallbacks:
    """Calls a user's listener, recording (not propagating) what it raises.

    The coordinator calls these in the middle of a rebalance, which must finish whatever the
    listener does; :meth:`take_error` hands the first exception to the ``poll`` that ran it.
    """

    def __init__(self, listener: object | None) -> None:
        self.listener = listener
        self._error: BaseException | None = None

    def _call(self, name: str, partitions: Set[TopicPartition]) -> None:
        method = getattr(self.listener, name, None)
        if method is None:
            return
        try:
            method(frozenset(partitions))
        except Exception as exc:
            log.exception("rebalance listener %s(%s) raised", name, sorted(partitions))
            if self._error is None:
                self._error = exc

    def revoked(self, partitions: Set[TopicPartition]) -> None:
        if partitions:
            self._call("on_partitions_revoked", partitions)

    def assigned(self, partitions: Set[TopicPartition]) -> None:
        self._call("on_partitions_assigned", partitions)

    def lost(self, partitions: Set[TopicPartition]) -> None:
        if not partitions:
            return
        if getattr(self.listener, "on_partitions_lost", None) is None:
            # A duck-typed listener without on_partitions_lost gets Kafka's default.
            self._call("on_partitions_revoked", partitions)
        else:
            self._call("on_partitions_lost", partitions)

    def take_error(self) -> BaseException | None:
        error, self._error = self._error, None
        return error
