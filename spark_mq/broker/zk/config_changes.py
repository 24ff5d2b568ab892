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

**Applying** (:class:`TopicConfigSync`, one per cluster broker): the broker follows the
children of ``/config/changes`` with a
:class:`~spark_mq.broker.zk.change_notifications.ChangeNotificationFollower` (its own thread,
the full pass at start-up and after a new session, the purge of notifications older than
:data:`CHANGE_EXPIRATION_MS`: see that module). For each topic the new notifications name
that this broker hosts, it makes its log directory's overrides those of
``/config/topics/<t>`` (:meth:`~spark_mq.storage.log_manager.LogManager.alter_topic_config`,
which gives the open logs the new config at once). A full pass applies
``/config/topics/<t>`` to *every* topic the broker hosts: a broker that was down during a
change catches up then.

**Other entities**: notifications for another entity type (``users/<name>``: SCRAM
credentials, :mod:`spark_mq.broker.zk.user_credentials`; ``users`` and ``clients``: client
quotas, :mod:`spark_mq.broker.zk.client_quotas`) go to the :class:`EntityHandler` given for
that type: ``apply(name)`` for each one named, ``apply_all()`` on a full pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, Protocol

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from spark_mq.errors import ClusterError, SparkMQError, UnknownTopicOrPartitionError

from . import znodes
from .cas_retry import MAX_WRITE_ATTEMPTS, write_attempts
from .change_notifications import (
    CHANGE_EXPIRATION_MS,
    ChangeNotificationFollower,
    ChangeSequence,
    Notification,
)
from .client import ZkClient, translate_errors
from .partition_states import read_topic_assignment, read_topic_config

if TYPE_CHECKING:
    from spark_mq.storage.log_manager import LogManager

log = logging.getLogger(__name__)

#: The notifications of every entity config change.
CONFIG_CHANGES: Final = ChangeSequence(znodes.CONFIG_CHANGES, znodes.CONFIG_CHANGE_PREFIX)

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
    for _attempt in write_attempts():
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
    every notification, and the other entity types' notifications to their handlers (see the
    module docstring). Start with :meth:`start`, after the session is up; :meth:`close`
    before the LogManager closes."""

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
        self._follower = ChangeNotificationFollower(
            zk,
            [CONFIG_CHANGES],
            self,
            name="config-changes",
            wall_clock_ms=wall_clock_ms,
            expiration_ms=expiration_ms,
        )

    @property
    def last_applied(self) -> int:
        """The sequence number of the newest notification applied (-1: none yet)."""
        return self._follower.last_applied(CONFIG_CHANGES)

    def start(self) -> None:
        self._follower.start()

    def close(self) -> None:
        """Stop applying changes; waits for a pass under way. Idempotent."""
        self._follower.close()

    # -- the follower's NotificationHandler, on its thread ----------------------------------------

    def process_all(self) -> None:
        topics = set(self._logs.list_topics())
        for handler in self._handlers.values():
            handler.apply_all()
        for topic in sorted(topics):
            self._apply(topic)

    def process(self, notifications: Sequence[Notification]) -> None:
        topics: set[str] = set()
        others: dict[str, set[str]] = {kind: set() for kind in self._handlers}
        for notification in notifications:
            try:
                notice = znodes.ConfigChangeNotification.decode(
                    notification.name, notification.data
                )
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
