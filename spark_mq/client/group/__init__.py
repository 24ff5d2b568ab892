"""The consumer side of consumer groups: membership, rebalances, heartbeats, commits.

Modules, one concept each:

* ``member_state``: the member's state machine (:class:`MemberState`) and its
  :class:`Generation`.
* ``coordinator_lookup``: FindCoordinator; ``channel``: ordered, pipelined requests to the
  coordinator on one connection.
* ``heartbeat``: the heartbeat timers and the background thread that sends heartbeats and
  enforces ``max.poll.interval.ms``.
* ``membership``: joining, syncing and leaving (Kafka's ``AbstractCoordinator``).
* ``consumer_coordinator``: what joining means for a consumer: subscriptions, the leader's
  assignment, revoking and assigning partitions, auto-commit.
* ``listener``: :class:`ConsumerRebalanceListener` and how its callbacks are run.
* ``offsets`` and ``committer``: :class:`OffsetAndMetadata`, OffsetCommit / OffsetFetch, and
  what their errors mean.

``docs/groups.md`` ("Consumers in a group") describes the behaviour; the broker's side (the
group coordinator) is ``spark_mq/broker/group/``.
"""

from spark_mq.client.group.consumer_coordinator import ConsumerCoordinator
from spark_mq.client.group.listener import ConsumerRebalanceListener
from spark_mq.client.group.member_state import (
    NO_GENERATION,
    ConsumerGroupMetadata,
    Generation,
    MemberState,
)
from spark_mq.client.group.offsets import OffsetAndMetadata

__all__ = [
    "NO_GENERATION",
    "ConsumerCoordinator",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "Generation",
    "MemberState",
    "OffsetAndMetadata",
]
