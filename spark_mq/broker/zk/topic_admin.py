"""A cluster broker's topic administration through ZooKeeper (Kafka's AdminZkClient): any broker
writes the request, the controller carries it out.

- **create**: validate the name, partition count and config; assign replicas over the live
  brokers (``/brokers/ids``, with their racks) by Kafka's algorithm; write
  ``/config/topics/<t>`` then ``/brokers/topics/<t>``. The controller sees the new topic and
  elects its leaders; :meth:`ZkTopicAdmin.wait_for_leaders` waits for that.
- **delete**: create ``/admin/delete_topics/<t>``; the controller deletes the topic.
- **add partitions**: extend ``/brokers/topics/<t>`` (a compare-and-set at the version read,
  so two racing requests cannot both extend it); the controller brings them online.

A replication factor above the live brokers is refused with
:class:`~spark_mq.errors.InvalidReplicationFactorError` saying how many brokers are live and
how many more are needed. Blocking: call from an executor thread.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

from kazoo.exceptions import BadVersionError, NoNodeError

from spark_mq.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.topic_metadata import MAX_PARTITIONS_PER_TOPIC
from spark_mq.storage.topic_names import validate_topic_name

from ..controller.replica_assignment import BrokerMetadata, assign_replicas_to_brokers
from . import znodes
from .broker_registration import read_live_brokers
from .client import ZkClient, translate_errors
from .partition_states import (
    create_topic,
    mark_topic_for_deletion,
    read_partition_state,
    read_topic_assignment,
)


def check_replication_factor(
    topic: str, replication_factor: int, live_brokers: list[int], setting: str | None = None
) -> None:
    """Refuse a factor above the live brokers, naming how many are live and missing, and
    ``setting`` (the key the factor came from) when it is a broker setting."""
    if replication_factor <= len(live_brokers):
        return
    missing = replication_factor - len(live_brokers)
    source = f" ({setting})" if setting else ""
    raise InvalidReplicationFactorError(
        f"topic {topic!r} needs replication factor {replication_factor}{source} but only "
        f"{len(live_brokers)} broker{'s are' if len(live_brokers) != 1 else ' is'} live "
        f"({sorted(live_brokers)}): {missing} more broker{'s' if missing != 1 else ''} must "
        f"be running, or lower {setting or 'the replication factor'}"
    )


class ZkTopicAdmin:
    """:class:`~spark_mq.broker.core.ClusterTopicAdmin` through ZooKeeper."""

    def __init__(
        self,
        zk: ZkClient,
        *,
        default_replication_factor: int,
        log_defaults: LogConfig,
        rng: random.Random | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._zk = zk
        self.default_replication_factor = default_replication_factor
        self._log_defaults = log_defaults
        self._rng = rng or random.Random()
        self._monotonic = monotonic
        self._sleep = sleep

    def _live_brokers(self) -> list[BrokerMetadata]:
        return [
            BrokerMetadata(broker_id, registration.rack)
            for broker_id, (registration, _epoch) in sorted(read_live_brokers(self._zk).items())
        ]

    def topic_exists(self, name: str) -> bool:
        return read_topic_assignment(self._zk, name) is not None

    def partition_count(self, name: str) -> int:
        assignment = read_topic_assignment(self._zk, name)
        if assignment is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist", topic=name)
        return len(assignment.partitions)

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int | None,
        config: Mapping[str, str],
        *,
        validate_only: bool = False,
        replication_factor_setting: str | None = None,
    ) -> dict[int, tuple[int, ...]]:
        """Assign and write a new topic; its assignment. ``replication_factor`` None:
        ``default.replication.factor``. With ``validate_only`` every check runs and nothing
        is written. ``replication_factor_setting`` names the broker key the factor came
        from, for the error (internal topics)."""
        validate_topic_name(name)
        self._log_defaults.with_overrides(config)  # ConfigError naming a bad key or value
        if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(
                f"topic {name!r}: {partitions} partitions requested; a topic has 1 to "
                f"{MAX_PARTITIONS_PER_TOPIC}",
                topic=name,
                current=None,
                requested=partitions,
            )
        if replication_factor is None:
            replication_factor = self.default_replication_factor
            replication_factor_setting = replication_factor_setting or "default.replication.factor"
        if self.topic_exists(name):
            raise TopicExistsError(f"topic {name!r} already exists", topic=name)
        brokers = self._live_brokers()
        check_replication_factor(
            name, replication_factor, [b.broker_id for b in brokers], replication_factor_setting
        )
        assignment = assign_replicas_to_brokers(
            partitions, replication_factor, brokers, rng=self._rng, topic=name
        )
        if not validate_only:
            create_topic(self._zk, name, znodes.TopicAssignment(assignment), config)
        return assignment

    def delete_topic(self, name: str) -> None:
        """Ask the controller to delete ``name``; UnknownTopicOrPartitionError if it does
        not exist."""
        if not self.topic_exists(name):
            raise UnknownTopicOrPartitionError(
                f"topic {name!r} does not exist, so it cannot be deleted", topic=name
            )
        mark_topic_for_deletion(self._zk, name)

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        """Grow ``name`` to ``total`` partitions, the new ones assigned over the live
        brokers with the replication factor of its partition 0."""
        path = znodes.topic_path(name)
        found = self._zk.get(path)
        if found is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist", topic=name)
        data, stat = found
        current = znodes.TopicAssignment.decode(name, data)
        count = len(current.partitions)
        if total <= count or total > MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(
                f"topic {name!r} has {count} partitions; partitions can only be added, so "
                f"request a total above {count} (at most {MAX_PARTITIONS_PER_TOPIC})",
                topic=name,
                current=count,
                requested=total,
            )
        if name in self._zk.children(znodes.DELETE_TOPICS):
            raise InvalidPartitionsError(
                f"topic {name!r} is being deleted; partitions cannot be added to it",
                topic=name,
                current=count,
                requested=total,
            )
        # Partition 0's target replicas: while it is being reassigned its replica list also
        # holds the replicas leaving it.
        factor = len(current.partitions[0]) - len(current.removing.get(0, ()))
        brokers = self._live_brokers()
        check_replication_factor(name, factor, [b.broker_id for b in brokers])
        added = assign_replicas_to_brokers(
            total - count,
            factor,
            brokers,
            rng=self._rng,
            start_partition_id=count,
            topic=name,
        )
        if validate_only:
            return
        grown = znodes.TopicAssignment(
            {**current.partitions, **added}, current.adding, current.removing, current.topic_id
        )
        with translate_errors(f"adding partitions to topic {name}"):
            try:
                self._zk.kazoo.set(path, grown.encode(), version=stat.version)
            except (BadVersionError, NoNodeError) as exc:
                raise InvalidPartitionsError(
                    f"topic {name!r} changed while partitions were being added to it "
                    "(another request, or its deletion); describe it and retry",
                    topic=name,
                    current=count,
                    requested=total,
                ) from exc

    def leaders_elected(self, name: str, partitions: range | None = None) -> bool:
        """Whether every partition of ``name`` (or of ``partitions``) has a state with a
        leader: the controller has brought it online."""
        assignment = read_topic_assignment(self._zk, name)
        if assignment is None:
            return False
        for p in partitions if partitions is not None else range(len(assignment.partitions)):
            state = read_partition_state(self._zk, name, p)
            if state is None or state.value.leader < 0:
                return False
        return True

    def wait_for_leaders(self, name: str, timeout_ms: int, partitions: range | None = None) -> bool:
        """Poll ZooKeeper until the controller has elected every partition's leader, at most
        ``timeout_ms``; whether it did (Kafka's CreateTopics waits the same way)."""
        deadline = self._monotonic() + timeout_ms / 1000
        while not self.leaders_elected(name, partitions):
            if self._monotonic() >= deadline:
                return False
            self._sleep(0.05)
        return True

    def topic_gone(self, name: str) -> bool:
        return self._zk.get(znodes.topic_path(name)) is None
