"""Partition assignors: how a consumer group's leader shares partitions among its members.

Each rebalance, the member the coordinator elects leader decodes every member's subscription,
runs the assignor the group agreed on, and sends one assignment per member back through
SyncGroup. The assignors are pure functions of the member subscriptions and the partition
counts, so every leader computes the same result from the same inputs.

Modules, one concept each:

* ``assignor``: the :class:`Assignor` contract and its values, :class:`Subscription`,
  :class:`Assignment` and :class:`RebalanceProtocol`.
* ``metadata``: the versioned MessagePack bytes of subscriptions, assignments and the sticky
  assignors' user data.
* ``range_assignor``, ``round_robin_assignor``: Kafka's two stateless assignors.
* ``sticky_balance``: the balanced, minimal-movement algorithm; ``sticky`` and
  ``cooperative_sticky``: the two assignors built on it (eager and incremental).
* ``registry``: assignors by name and the ``partition.assignment.strategy`` parser.

``docs/groups.md`` (section "Assignors") compares them.

>>> strategy = parse_assignment_strategy("cooperative-sticky")
>>> subs = {"a": Subscription(["t"]), "b": Subscription(["t"])}
>>> {m: len(a.partitions) for m, a in strategy[0].assign({"t": 5}, subs).items()}
{'a': 3, 'b': 2}
"""

from spark_mq.client.assignors.assignor import (
    DEFAULT_GENERATION,
    Assignment,
    Assignor,
    RebalanceProtocol,
    Subscription,
    member_sort_key,
)
from spark_mq.client.assignors.cooperative_sticky import CooperativeStickyAssignor
from spark_mq.client.assignors.metadata import (
    METADATA_VERSION,
    InvalidGroupMetadataError,
    StickyUserData,
    decode_assignment,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_sticky_user_data,
    encode_subscription,
)
from spark_mq.client.assignors.range_assignor import RangeAssignor
from spark_mq.client.assignors.registry import (
    ASSIGNORS,
    DEFAULT_ASSIGNMENT_STRATEGY,
    assignor_for,
    common_rebalance_protocol,
    parse_assignment_strategy,
)
from spark_mq.client.assignors.round_robin_assignor import RoundRobinAssignor
from spark_mq.client.assignors.sticky import AbstractStickyAssignor, StickyAssignor

__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNMENT_STRATEGY",
    "DEFAULT_GENERATION",
    "METADATA_VERSION",
    "AbstractStickyAssignor",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "InvalidGroupMetadataError",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "StickyUserData",
    "Subscription",
    "assignor_for",
    "common_rebalance_protocol",
    "decode_assignment",
    "decode_sticky_user_data",
    "decode_subscription",
    "encode_assignment",
    "encode_sticky_user_data",
    "encode_subscription",
    "member_sort_key",
    "parse_assignment_strategy",
]
