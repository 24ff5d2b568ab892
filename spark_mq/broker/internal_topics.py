"""Internal topics: the topics the broker's coordinators own.

``__consumer_offsets`` (the group coordinator's committed offsets and group records) and
``__transaction_state`` (the transaction coordinator's log) are written only by the broker,
through its own append path (``ReplicaManager.partition(...).append`` and the log directly),
never through the client-facing handlers. As in Kafka (``Topic.isInternal``), a client may read
them (Fetch, ListOffsets, Metadata reports them with ``is_internal``) but the broker refuses,
with ``INVALID_TOPIC_EXCEPTION`` (17, :class:`~spark_mq.errors.InvalidTopicError`):

- Produce to them (Kafka: "Cannot append to internal topic");
- DeleteTopics and DeleteRecords (either would lose every group's offsets or every open
  transaction);
- CreatePartitions (a group's coordinator partition is ``hash(group.id) % partitions``, so a
  new count would move groups away from their offsets);
- Metadata and Produce never auto-create them (their coordinator creates them with the
  settings it needs: compaction, its own partition count).

Their configs may be tuned (AlterConfigs, and CreateTopics should an operator create one
before its coordinator does), except what would delete their data
(:func:`check_internal_config`; INVALID_CONFIG, :class:`~spark_mq.errors.ConfigError`):

- ``cleanup.policy`` must be ``compact`` alone. Both topics hold the newest record per key,
  and every live key matters: a group's committed offsets, an open or prepared transaction.
  ``delete`` (also in ``compact,delete``) removes whole segments by age or size, live keys
  with them; the coordinators remove what has expired themselves, with tombstones
  (``offsets.retention.minutes``, ``transactional.id.expiration.ms``). Kafka accepts
  ``compact,delete`` here; we do not, as the issue that found ``retention.ms=1`` accepted on
  ``__consumer_offsets`` asked. Removing the override falls back to the broker's
  ``log.cleanup.policy`` and is refused unless that is ``compact``.
- ``retention.ms`` and ``retention.bytes`` take only -1 (unlimited): with compaction alone
  they would have no effect, and a value would suggest a bound that does not exist.
- Everything else is the operator's: ``segment.bytes`` and ``segment.ms`` (compaction works
  on rolled segments), ``min.cleanable.dirty.ratio``, the compaction lags,
  ``delete.retention.ms`` (how long a tombstone of a removed key stays), flushing.

The set is explicit rather than "every name starting with ``__``": users may name their own
topics so (Kafka only warns), and those are ordinary topics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spark_mq.errors import ConfigError, InvalidTopicError
from spark_mq.storage.log_config import LogConfig

#: The group coordinator's topic.
OFFSETS_TOPIC: Final = "__consumer_offsets"
#: The transaction coordinator's topic.
TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
#: The half-message service's stored half messages and their ops (docs/half_messages.md).
HALF_MESSAGES_TOPIC: Final = "__half_messages"
HALF_OPS_TOPIC: Final = "__half_ops"
#: Every internal topic (Kafka's ``Topic.INTERNAL_TOPICS`` for the coordinators we have).
INTERNAL_TOPICS: Final = frozenset(
    {OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, HALF_MESSAGES_TOPIC, HALF_OPS_TOPIC}
)


def is_internal(topic: str) -> bool:
    """Whether ``topic`` is owned by one of the broker's coordinators."""
    return topic in INTERNAL_TOPICS


def check_not_internal(topic: str, action: str) -> None:
    """Raise :class:`InvalidTopicError` if ``topic`` is internal; ``action`` says what the
    client tried ("produce to", "delete", ...), for the message."""
    if topic in INTERNAL_TOPICS:
        raise InvalidTopicError(
            f"cannot {action} internal topic {topic!r}: it is written only by the broker's "
            f"{_owner(topic)}; use the group or transaction APIs instead (commit offsets, "
            "DeleteGroups, reset-offsets)",
            topic=topic,
        )


#: The retention settings, which an internal topic takes only as -1 (unlimited).
_RETENTION_KEYS: Final = ("retention.ms", "retention.bytes")


def check_internal_config(
    topic: str, changes: Mapping[str, object | None], effective: LogConfig
) -> None:
    """Refuse a config that would delete an internal topic's data (see the module
    docstring). ``changes`` are the keys a request sets (None: removes the override),
    ``effective`` the topic's config with them applied. Ordinary topics pass."""
    if topic not in INTERNAL_TOPICS:
        return
    owner = _owner(topic)
    if effective.cleanup_policy != ("compact",):
        policy = ",".join(effective.cleanup_policy)
        raise ConfigError(
            f"internal topic {topic!r} must keep cleanup.policy=compact alone (this change "
            f"would make it {policy!r}): 'delete' removes whole segments by age or size and "
            f"with them live entries of the {owner} ({_what(topic)}); the {owner} removes "
            f"expired entries itself ({_expiry(topic)}). Set cleanup.policy=compact",
            key="cleanup.policy",
            value=policy,
        )
    for key, value in changes.items():
        canonical = key.replace("_", ".")
        if canonical not in _RETENTION_KEYS or value is None:
            continue
        if getattr(effective, canonical.replace(".", "_")) != -1:
            raise ConfigError(
                f"internal topic {topic!r} takes {canonical} only as -1 (got {value!r}): it "
                f"is compacted, not deleted by age or size, so retention would not apply; "
                f"the {owner} removes expired entries itself ({_expiry(topic)})",
                key=canonical,
                value=value,
            )


def _what(topic: str) -> str:
    if topic == OFFSETS_TOPIC:
        return "the committed offsets of every group"
    if topic in (HALF_MESSAGES_TOPIC, HALF_OPS_TOPIC):
        return "every pending half message and the outcome of every ended one"
    return "the state of every open or prepared transaction"


def _expiry(topic: str) -> str:
    if topic == OFFSETS_TOPIC:
        return "offsets.retention.minutes"
    if topic in (HALF_MESSAGES_TOPIC, HALF_OPS_TOPIC):
        return "transaction.half.op.retention.ms"
    return "transactional.id.expiration.ms"


def _owner(topic: str) -> str:
    if topic == OFFSETS_TOPIC:
        return "group coordinator"
    if topic in (HALF_MESSAGES_TOPIC, HALF_OPS_TOPIC):
        return "half-message service"
    return "transaction coordinator"
