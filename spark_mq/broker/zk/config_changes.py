"""Topic configuration in a cluster: ZooKeeper holds it, every broker applies it (Kafka's
AdminZkClient.changeTopicConfig on the writing side, ZkConfigManager and
ZkNodeChangeNotificationListener on the brokers).

**Writing** (:func:`change_topic_config`, any broker answering AlterConfigs): read
``/config/topics/<t>``, compute the new overrides, then commit in one multi-op the new
overrides (a compare-and-set at the version read, so two brokers altering one topic at once
cannot lose each other's keys: the loser reads again and re-applies its change) and a
sequential notification ``/config/changes/config_change_<n>`` holding
``{"version":2,"entity_path":"topics/<t>"}``. Kafka writes the two apart; one multi-op means a
notification never announces a change that was not written.

**Applying** (:class:`TopicConfigSync`, one per cluster broker): the broker watches the
children of ``/config/changes``. The watch runs on the ZooKeeper event thread, which must
stay free for the session's work, so it only records the children it saw and hands the
work to the sync's own thread (one thread, so changes are applied in order): read each
notification newer than the last one applied, and for each topic named that this broker
hosts, make its log directory's overrides those of ``/config/topics/<t>``
(:meth:`~spark_mq.storage.log_manager.LogManager.alter_topic_config`, which gives the open
logs the new config at once). Applying reads the znode's current state rather than trusting
the order of notifications, so applying one twice, or two out of order, ends the same.

The first pass after start-up, and the first after a new session (notifications may have
been purged meanwhile), applies ``/config/topics/<t>`` to *every* topic the broker hosts:
a broker that was down during a change catches up then, as Kafka's ZkConfigManager
processes every entity's config at start-up.

**Other entities**: notifications for another entity type (``users/<name>``: SCRAM
credentials, :mod:`spark_mq.broker.zk.user_credentials`) go to the :class:`EntityHandler`
given for that type: ``apply(name)`` for each one named, ``apply_all()`` on a full pass.

**Purging**: after each pass the broker deletes the notifications it has applied that are
older than :data:`CHANGE_EXPIRATION_MS` (15 minutes, Kafka's ``changeExpirationMs``), by the
znode's creation time. Every broker purges; a notification already deleted by another is
skipped. A broker down longer than that still catches up by its start-up pass.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, Protocol

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from spark_mq.errors import ClusterError, SparkMQError, UnknownTopicOrPartitionError

from . import znodes
from .client import SessionEvent, ZkClient, translate_errors
from .partition_states import read_topic_assignment, read_topic_config

if TYPE_CHECKING:
    from spark_mq.storage.log_manager import LogManager

log = logging.getLogger(__name__)

#: How long a notification is kept (Kafka's ConfigChangeNotification expiration, 15 min).
CHANGE_EXPIRATION_MS: Final = 15 * 60 * 1000
#: How many times a write that lost a compare-and-set race is tried again.
MAX_WRITE_ATTEMPTS: Final = 10

#: ``update(current overrides) -> new overrides``; raises to refuse the change.
OverridesUpdate = Callable[[Mapping[str, str]], Mapping[str, str]]


class EntityHandler(Protocol):
    """Applies the config of an entity type other than topics from ZooKeeper."""

    def apply(self, name: str) -> None: ...

    def apply_all(self) -> None: ...


def _unknown_topic(topic: str) -> UnknownTopicOrPartitionError:
    return UnknownTopicOrPartitionError(
        f"topic {topic!r} does not exist in the cluster (no {znodes.topic_path(topic)}); "
        "create it first",
        topic=topic,
    )


def read_cluster_topic_config(zk: ZkClient, topic: str) -> dict[str, str]:
    """The overrides of ``topic`` in ``/config/topics/<t>`` ({} if the znode is missing);
    UnknownTopicOrPartitionError if the cluster has no such topic."""
    if read_topic_assignment(zk, topic) is None:
        raise _unknown_topic(topic)
    return read_topic_config(zk, topic)


def change_topic_config(
    zk: ZkClient, topic: str, update: OverridesUpdate, *, validate_only: bool = False
) -> dict[str, str]:
    """Replace the overrides of ``topic`` by ``update(current)`` and notify every broker;
    the new overrides. ``update`` validates (and raises for a bad change, writing nothing).
    With ``validate_only`` nothing is written. Blocking."""
    what = f"changing the config of topic {topic}"
    config_path = znodes.topic_config_path(topic)
    notification = znodes.ConfigChangeNotification(znodes.TOPIC_ENTITY, topic).encode()
    for _attempt in range(MAX_WRITE_ATTEMPTS):
        assignment = zk.get(znodes.topic_path(topic))
        if assignment is None:
            raise _unknown_topic(topic)
        found = zk.get(config_path)
        current: dict[str, str] = {}
        if found is not None:
            current = dict(znodes.TopicConfigOverrides.decode(topic, found[0]).config)
        new = dict(update(current))
        if validate_only:
            return new
        encoded = znodes.TopicConfigOverrides(new).encode()
        with translate_errors(what):
            txn = zk.kazoo.transaction()
            # The topic must still be the one read: a deletion between the read and the
            # write fails the whole multi-op (then the next attempt says it is unknown).
            txn.check(znodes.topic_path(topic), assignment[1].version)
            if found is None:
                txn.create(config_path, encoded)
            else:
                txn.set_data(config_path, encoded, found[1].version)
            txn.create(
                znodes.config_change_path(znodes.CONFIG_CHANGE_PREFIX), notification, sequence=True
            )
            results = txn.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            log.info("config of topic %r is now %s", topic, new)
            return new
        # BadVersion / NodeExists / NoNode: another writer (or a deletion, or a partition
        # growth) came between the read and the write. Anything else is not a race.
        raced = (BadVersionError, NodeExistsError, NoNodeError)
        if not any(isinstance(r, raced) for r in failures):
            raise ClusterError(f"{what} failed in ZooKeeper: {failures}")
    raise ClusterError(
        f"{what}: {MAX_WRITE_ATTEMPTS} attempts in a row lost a race with other writers of "
        f"{config_path}; retry"
    )


def overrides_delta(current: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, str | None]:
    """The incremental change (None: remove the key) that turns ``current`` into ``wanted``."""
    delta: dict[str, str | None] = {k: None for k in current if k not in wanted}
    delta.update({k: v for k, v in wanted.items() if current.get(k) != v})
    return delta


class TopicConfigSync:
    """Applies ``/config/topics/<t>`` to the topics this broker hosts, on start-up and on
    every notification (see the module docstring). Start with :meth:`start`, after the
    session is up; :meth:`close` before the LogManager closes."""

    def __init__(
        self,
        zk: ZkClient,
        logs: LogManager,
        *,
        wall_clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        expiration_ms: int = CHANGE_EXPIRATION_MS,
        entity_handlers: Mapping[str, EntityHandler] | None = None,
    ) -> None:
        self._zk = zk
        self._logs = logs
        self._handlers = dict(entity_handlers or {})
        self._wall_clock_ms = wall_clock_ms
        self._expiration_ms = expiration_ms
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="zk-config-changes"
        )
        self._lock = threading.Lock()
        #: The children of /config/changes last seen by the watch, not yet processed.
        self._pending: list[str] | None = None
        #: Whether the next pass applies every hosted topic (start-up, new session).
        self._full_pass = True
        self._scheduled = False
        self._closed = False
        #: The sequence number of the newest notification applied (-1: none yet).
        self.last_applied = -1

    def start(self) -> None:
        self._zk.add_handler(self)
        self._zk.watch_children(znodes.CONFIG_CHANGES, self._on_children)

    def close(self) -> None:
        """Stop applying changes; waits for a pass under way. Idempotent."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=True)

    # -- on the ZooKeeper event thread: quick work only ----------------------------------------

    def on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.NEW_SESSION:
            # Notifications may have come and been purged while the session was lost.
            with self._lock:
                self._full_pass = True

    def _on_children(self, children: list[str]) -> None:
        with self._lock:
            if self._closed:
                return
            self._pending = children
            if not self._scheduled:
                # Under the lock, so that close() never shuts the executor before this.
                self._scheduled = True
                self._executor.submit(self._drain)

    # -- on the sync's own thread ----------------------------------------------------------------

    def _drain(self) -> None:
        while True:
            with self._lock:
                children, full = self._pending, self._full_pass
                if children is None or self._closed:
                    self._scheduled = False
                    return
                self._pending = None
                self._full_pass = False
            try:
                self._pass(children, full=full)
            except Exception:
                # A pass that could not finish (ZooKeeper unreachable, say) is done again
                # whole at the next change or session: nothing is marked applied.
                log.exception("applying topic config changes failed; retried at the next change")
                with self._lock:
                    self._full_pass = self._full_pass or full

    def _pass(self, children: list[str], *, full: bool) -> None:
        numbered = sorted(
            (seq, child)
            for child in children
            if (seq := znodes.config_change_sequence(child)) is not None
        )
        fresh = [(seq, child) for seq, child in numbered if seq > self.last_applied]
        others: dict[str, set[str]] = {kind: set() for kind in self._handlers}
        if full:
            topics = set(self._logs.list_topics())
            for handler in self._handlers.values():
                handler.apply_all()
        else:
            topics = set()
            for _seq, child in fresh:
                found = self._zk.get(znodes.config_change_path(child))
                if found is None:
                    continue  # purged meanwhile: its change is in /config/topics anyway
                try:
                    notice = znodes.ConfigChangeNotification.decode(child, found[0])
                except SparkMQError as exc:
                    log.error("ignoring config change notification: %s", exc)
                    continue
                if notice.entity_type == znodes.TOPIC_ENTITY:
                    topics.add(notice.entity_name)
                elif notice.entity_type in others:
                    others[notice.entity_type].add(notice.entity_name)
        for topic in sorted(topics):
            self._apply(topic)
        for kind, names in others.items():
            for name in sorted(names):
                self._handlers[kind].apply(name)
        if numbered:
            self.last_applied = max(self.last_applied, numbered[-1][0])
        self._purge([child for seq, child in numbered if seq <= self.last_applied])

    def _apply(self, topic: str) -> None:
        """Make this broker's overrides of ``topic`` those in ZooKeeper, if it hosts it."""
        if not self._logs.topic_exists(topic):
            return
        if read_topic_assignment(self._zk, topic) is None:
            return  # being deleted: the controller stops its replicas
        wanted = read_topic_config(self._zk, topic)
        try:
            current = self._logs.describe_topic(topic).config_overrides
            delta = overrides_delta(current, wanted)
            if delta:
                self._logs.alter_topic_config(topic, delta)
                log.info("applied the config of topic %r from ZooKeeper: %s", topic, delta)
        except UnknownTopicOrPartitionError:
            return  # its last replica here stopped meanwhile
        except (SparkMQError, OSError) as exc:
            # A value this broker cannot take (written by another tool) or a disk failure:
            # the other topics still get theirs.
            log.error("could not apply the config of topic %r from ZooKeeper: %s", topic, exc)

    def _purge(self, applied: list[str]) -> None:
        now = self._wall_clock_ms()
        for child in applied:
            path = znodes.config_change_path(child)
            with translate_errors(f"purging {path}"):
                stat = self._zk.kazoo.exists(path)
                if stat is None:
                    continue
                if now - stat.ctime <= self._expiration_ms:
                    break  # in sequence order, so every later one is younger
                # Another broker may have purged it first.
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self._zk.kazoo.delete(path, version=stat.version)
