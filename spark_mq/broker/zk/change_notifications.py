"""Following ZooKeeper change notifications, as Kafka's ZkNodeChangeNotificationListener
does: how every broker learns within a watch's delay that another one changed a znode.

A writer that changes an entity (a topic's config, a user, an ACL resource) creates, in the
same multi-op, a sequential child of a change path naming the entity::

    /config/changes/config_change_<10 digits>           topics, users, clients
    /kafka-acl-changes/acl_changes_<10 digits>           literal ACL resources
    /kafka-acl-extended-changes/acl_changes_<10 digits>  prefixed ACL resources

A :class:`ChangeNotificationFollower` follows one or more such :class:`ChangeSequence` s for
one :class:`NotificationHandler`, which knows what the notifications mean:

- **Watch**: the watch on each change path runs on the ZooKeeper event thread, which must
  stay free for the session's work, so it only records the children it saw and hands the
  work to the follower's own thread (one thread, so passes run one at a time and in order).
  The first pass waits until every path's watch has reported once.
- **Pass**: read each notification newer than the last one applied (in sequence order, per
  path) and give them to :meth:`NotificationHandler.process`, which reads the entities they
  name. The handler reads each entity's current znode rather than trusting the
  notification's order, so applying one twice, or two out of order, ends the same; it skips
  (and logs) a notification it cannot decode. A notification deleted before it is read is
  skipped: its change is in the entity's znode, which a full pass reads.
- **Full pass**: the first pass after start-up and the first after a new session (the old
  session's notifications may have been purged meanwhile) read no notification and call
  :meth:`NotificationHandler.process_all` instead: a broker that was down during a change
  catches up then, as Kafka's ZkConfigManager processes every entity at start-up.
- **Purge**: after a pass, the notifications applied that are older than
  :data:`CHANGE_EXPIRATION_MS` (15 minutes, Kafka's ``changeExpirationMs``) by the znode's
  creation time are deleted. Every broker purges; one already deleted by another is skipped.
  A broker down longer than that still catches up by its full pass.
- **Failure**: a pass that cannot finish (ZooKeeper unreachable, say) marks nothing applied;
  its children stay pending, and it runs again whole with the next change seen (a full pass
  again if it was one).

Session states (:class:`~spark_mq.broker.zk.client.SessionEvent`): SUSPENDED and
RECONNECTED keep the session, and kazoo keeps the watches; a pass that runs while suspended
fails and is run again as above. EXPIRED then NEW_SESSION may have lost notifications: a
full pass runs at once, as Kafka's listener processes every notification after a new
session. It lists the change paths itself, because kazoo's re-armed watches report only the
changes made after they are set again.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from kazoo.exceptions import BadVersionError, NoNodeError

from . import znodes
from .client import SessionEvent, ZkClient, translate_errors

log = logging.getLogger(__name__)

#: How long a notification is kept (Kafka's ``changeExpirationMs``, 15 minutes).
CHANGE_EXPIRATION_MS: Final = 15 * 60 * 1000


@dataclasses.dataclass(frozen=True, slots=True)
class ChangeSequence:
    """The notifications that are the children of ``path`` named ``<prefix><10 digits>``."""

    path: str
    prefix: str

    def number(self, child: str) -> int | None:
        """The sequence number of ``child``; None for a child that is not a notification."""
        return znodes.sequence_number(self.prefix, child)

    def node(self, child: str) -> str:
        return f"{self.path}/{child}"


@dataclasses.dataclass(frozen=True, slots=True)
class Notification:
    """One notification as read: its sequence, its child name, its number, its data."""

    sequence: ChangeSequence
    name: str
    number: int
    data: bytes


class NotificationHandler(Protocol):
    """What the notifications of a follower mean (see the module docstring). Called on the
    follower's thread, one call at a time; may block on ZooKeeper."""

    def process(self, notifications: Sequence[Notification]) -> None:
        """Apply the entities named by ``notifications`` (new ones, in order per path)."""
        ...

    def process_all(self) -> None:
        """Apply every entity (start-up, new session)."""
        ...


class ChangeNotificationFollower:
    """Follows ``sequences`` for ``handler`` (see the module docstring). :meth:`start` once
    the session is up; :meth:`close` before what the handler writes to closes."""

    def __init__(
        self,
        zk: ZkClient,
        sequences: Sequence[ChangeSequence],
        handler: NotificationHandler,
        *,
        name: str,
        wall_clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        expiration_ms: int = CHANGE_EXPIRATION_MS,
    ) -> None:
        self._zk = zk
        self._sequences = tuple(sequences)
        self._handler = handler
        #: What is followed, in the thread's name and the logs ("acl-changes").
        self._name = name
        self._wall_clock_ms = wall_clock_ms
        self._expiration_ms = expiration_ms
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"zk-{name}")
        self._lock = threading.Lock()
        #: Per sequence, the children last seen by its watch, not yet processed.
        self._pending: dict[ChangeSequence, list[str]] = {}
        #: The sequences whose watch has reported at least once.
        self._reported: set[ChangeSequence] = set()
        #: Whether the next pass applies every entity (start-up, new session).
        self._full_pass = True
        #: Whether the next pass lists every change path itself (new session).
        self._relist = False
        self._scheduled = False
        self._closed = False
        #: Per change path, the number of the newest notification applied (-1: none yet).
        self._last_applied = {s.path: -1 for s in self._sequences}

    def last_applied(self, sequence: ChangeSequence) -> int:
        """The number of the newest notification of ``sequence`` applied (-1: none yet)."""
        return self._last_applied[sequence.path]

    def start(self) -> None:
        """Make sure the change paths exist (Kafka's listener does) and watch them."""
        for sequence in self._sequences:
            with translate_errors(f"creating {sequence.path}"):
                self._zk.kazoo.ensure_path(sequence.path)
        self._zk.add_handler(self)
        for sequence in self._sequences:
            self._zk.watch_children(sequence.path, functools.partial(self._on_children, sequence))

    def close(self) -> None:
        """Stop following; waits for a pass under way. Idempotent."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=True)

    # -- on the ZooKeeper event thread: quick work only ----------------------------------------

    def on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.NEW_SESSION:
            with self._lock:
                self._full_pass = True
                self._relist = True
                self._schedule()

    def _on_children(self, sequence: ChangeSequence, children: list[str]) -> None:
        with self._lock:
            if self._closed:
                return
            self._pending[sequence] = children
            self._reported.add(sequence)
            self._schedule()

    def _schedule(self) -> None:
        """Start a drain unless one is under way; under the lock, so that close() never
        shuts the executor before this. The first pass waits for every watch's first
        report, so that the start-up full pass covers every path (else a path reported late
        would have its old notifications read one by one as if new)."""
        if self._closed or self._scheduled or len(self._reported) < len(self._sequences):
            return
        self._scheduled = True
        self._executor.submit(self._drain)

    # -- on the follower's own thread -------------------------------------------------------------

    def _drain(self) -> None:
        while True:
            with self._lock:
                pending, full, relist = self._pending, self._full_pass, self._relist
                if (not pending and not relist) or self._closed:
                    self._scheduled = False
                    return
                self._pending = {}
                self._full_pass = self._relist = False
            try:
                if relist:
                    pending = {
                        s: pending[s] if s in pending else self._zk.children(s.path)
                        for s in self._sequences
                    }
                self._pass(pending, full=full)
            except Exception:
                log.exception("applying %s failed; tried again at the next change", self._name)
                with self._lock:
                    # The failed pass's children stay pending (those seen since are newer
                    # and replace them): it runs again now if a change came meanwhile, else
                    # with the next one. What it applied before failing is applied again,
                    # which ends the same.
                    arrived = bool(self._pending)
                    self._pending = {**pending, **self._pending}
                    self._full_pass = self._full_pass or full
                    self._relist = self._relist or relist
                    if not arrived:
                        self._scheduled = False
                        return

    def _pass(self, pending: dict[ChangeSequence, list[str]], *, full: bool) -> None:
        numbered = {
            sequence: sorted(
                (number, child)
                for child in children
                if (number := sequence.number(child)) is not None
            )
            for sequence, children in pending.items()
        }
        if full:
            self._handler.process_all()
        else:
            fresh = []
            for sequence, items in numbered.items():
                for number, child in items:
                    if number <= self._last_applied[sequence.path]:
                        continue
                    found = self._zk.get(sequence.node(child))
                    if found is not None:  # else purged meanwhile (see the module docstring)
                        fresh.append(Notification(sequence, child, number, found[0]))
            if fresh:
                self._handler.process(fresh)
        for sequence, items in numbered.items():
            if items:
                newest = max(self._last_applied[sequence.path], items[-1][0])
                self._last_applied[sequence.path] = newest
            last = self._last_applied[sequence.path]
            self._purge(sequence, [child for number, child in items if number <= last])

    def _purge(self, sequence: ChangeSequence, applied: list[str]) -> None:
        now = self._wall_clock_ms()
        for child in applied:
            path = sequence.node(child)
            with translate_errors(f"purging {path}"):
                stat = self._zk.kazoo.exists(path)
                if stat is None:
                    continue
                if now - stat.ctime <= self._expiration_ms:
                    break  # in sequence order, so every later one is younger
                # Another broker may have purged it first.
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self._zk.kazoo.delete(path, version=stat.version)
