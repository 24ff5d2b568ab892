"""One member of a consumer group, as the coordinator knows it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from spark_mq.protocol.groups import JoinGroupResponse, SyncGroupResponse

#: How the coordinator answers a JoinGroup or SyncGroup that had to wait (the broker's
#: handler completes a future with it; tests collect the responses in a list).
JoinCallback = Callable[[JoinGroupResponse], None]
SyncCallback = Callable[[SyncGroupResponse], None]

#: (protocol name, the member's metadata for it), most preferred first.
Protocols = list[tuple[str, bytes]]


@dataclasses.dataclass(eq=False)
class Member:
    """A member: identity, timeouts, the protocols it offers, its assignment, and the
    JoinGroup / SyncGroup it is waiting in (at most one of each)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_callback: JoinCallback | None = None
    sync_callback: SyncCallback | None = None
    #: Joined but never completed a join round: such a member may wait in its first join
    #: for NEW_MEMBER_JOIN_TIMEOUT_MS at most, whatever its session timeout.
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str | None) -> bytes:
        """The member's metadata for ``protocol`` (empty if it does not offer it)."""
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Whether ``protocols`` are exactly what the member offers already."""
        return list(protocols) == self.protocols

    def vote(self, candidates: Sequence[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id} supports none of {list(candidates)}")

    def answer_join(self, response: JoinGroupResponse) -> None:
        """Answer the JoinGroup the member waits in, if any."""
        callback, self.join_callback = self.join_callback, None
        if callback is not None:
            callback(response)

    def answer_sync(self, response: SyncGroupResponse) -> None:
        """Answer the SyncGroup the member waits in, if any."""
        callback, self.sync_callback = self.sync_callback, None
        if callback is not None:
            callback(response)
