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

AlterConfigs stays allowed, as in Kafka (operators tune ``segment.bytes`` or retention of
``__consumer_offsets``), except that ``cleanup.policy`` must keep ``compact``: both topics
hold the newest record per key and would lose live keys to deletion by age or size.

The set is explicit rather than "every name starting with ``__``": users may name their own
topics so (Kafka only warns), and those are ordinary topics.
"""

from __future__ import annotations

from typing import Final

from spark_mq.errors import ConfigError, InvalidTopicError

#: The group coordinator's topic.
OFFSETS_TOPIC: Final = "__consumer_offsets"
#: The transaction coordinator's topic.
TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
#: Every internal topic (Kafka's ``Topic.INTERNAL_TOPICS`` for the coordinators we have).
INTERNAL_TOPICS: Final = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


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


def check_internal_config(topic: str, configs: dict[str, str | None]) -> None:
    """Refuse a config change that would break an internal topic: ``cleanup.policy`` must keep
    ``compact`` (removing the override, which falls back to the broker's default ``delete``,
    is refused too). Other keys are the operator's to tune."""
    if topic not in INTERNAL_TOPICS:
        return
    for key, value in configs.items():
        # Keys come as Kafka's dotted names or with underscores (LogConfig accepts both).
        if key.replace("_", ".") != "cleanup.policy":
            continue
        policies = {p.strip() for p in (value or "").split(",")}
        if "compact" not in policies:
            raise ConfigError(
                f"internal topic {topic!r} must keep cleanup.policy=compact (got "
                f"{value!r}): the {_owner(topic)} keeps the newest record per key there and "
                "would lose live entries to deletion; set 'compact' or 'compact,delete'",
                key="cleanup.policy",
                value=value,
            )


def _owner(topic: str) -> str:
    return "group coordinator" if topic == OFFSETS_TOPIC else "transaction coordinator"
