"""The group coordinator: consumer groups, their rebalances and their committed offsets.

Modules, one concept each:

- ``config``: :class:`GroupConfig`, the ``group.*`` / ``offsets.*`` broker settings;
- ``state``: :class:`GroupState` and its transition table;
- ``member``, ``group``: a member, and a group's membership and offsets;
- ``timers``: the deadline queue the coordinator schedules into;
- ``rebalance``: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, sessions;
- ``offsets``: OffsetCommit, OffsetFetch, expiry, the transactional hook;
- ``coordinator``: :class:`GroupCoordinator`, the synchronous whole, plus Describe/List/Delete;
- ``records``: the byte format of ``__consumer_offsets`` records;
- ``offsets_topic``: ``__consumer_offsets`` itself (creation, appends, loading, which
  partition coordinates a group);
- ``service``: the coordinator on the broker's event loop (timers, loading, expiry job).

docs/groups.md describes the whole.
"""

from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.coordinator import GroupCoordinator
from spark_mq.broker.group.state import GroupState

__all__ = ["GroupConfig", "GroupCoordinator", "GroupState"]
