"""Committed offsets in the coordinator: generation checks on commit, fetch, storage
failures, expiry driven by the clock, and the transactional hook."""

from __future__ import annotations

import pytest
from group_harness import Harness

from spark_mq.broker.group.records import decode_key
from spark_mq.broker.group.state import GroupState
from spark_mq.errors import (
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from spark_mq.protocol.error_codes import ErrorCode as E

MINUTE_MS = 60_000


@pytest.fixture
def h() -> Harness:
    return Harness(offsets_retention_minutes=60)


def test_commit_outside_the_group_protocol_creates_an_empty_group(h):
    assert h.commit({("t", 0): 10, ("t", 1): 20}) == [None, None]
    group = h.group()
    assert (group.state, group.protocol_type) == (GroupState.EMPTY, None)
    assert h.committed() == {("t", 0): 10, ("t", 1): 20}
    fetched = h.coordinator.fetch_offsets("g", [("t", 1), ("t", 9), ("u", 0)])
    assert [(f.topic, f.partition, f.entry and f.entry.offset) for f in fetched] == [
        ("t", 1, 20),
        ("t", 9, None),
        ("u", 0, None),
    ]
    assert h.coordinator.fetch_offsets("unknown") == []
    entry = fetched[0].entry
    assert entry is not None and entry.commit_timestamp_ms == h.now


def test_members_commit_with_their_generation(h):
    ids = h.stable_group(2)
    generation = h.group().generation_id
    assert h.commit({("t", 0): 5}, generation=generation, member_id=ids[1]) == [None]
    with pytest.raises(IllegalGenerationError, match="rejoin"):
        h.commit({("t", 0): 6}, generation=generation - 1, member_id=ids[1])
    with pytest.raises(UnknownMemberIdError):
        h.commit({("t", 0): 6}, generation=generation, member_id="stranger")
    with pytest.raises(UnknownMemberIdError, match="no members"):
        h.commit({("t", 0): 6})  # generation -1, no member id, but the group has members
    with pytest.raises(IllegalGenerationError):
        h.commit({("t", 0): 6}, group="other", generation=3, member_id="m")
    assert h.committed() == {("t", 0): 5}


def test_commits_during_a_rebalance(h):
    ids = h.stable_group(2)
    generation = h.group().generation_id
    h.join(ids[0])  # PreparingRebalance: members may still commit what they revoke
    assert h.commit({("t", 0): 7}, generation=generation, member_id=ids[1]) == [None]
    h.join(ids[1])  # CompletingRebalance: wait for SyncGroup
    with pytest.raises(RebalanceInProgressError):
        h.commit({("t", 0): 8}, generation=generation + 1, member_id=ids[1])
    assert h.committed() == {("t", 0): 7}


def test_commit_restarts_the_members_session(h):
    ids = h.stable_group(1)
    generation = h.group().generation_id
    for _ in range(3):
        h.tick(6000)
        assert h.commit({("t", 0): 1}, generation=generation, member_id=ids[0]) == [None]
    assert h.group().has(ids[0])


def test_metadata_over_the_limit_fails_only_that_partition():
    h = Harness(offset_metadata_max_bytes=4)
    h.commit({("t", 0): 1})
    errors = h.commit({("t", 0): 2, ("t", 1): 3}, metadata="12345")
    assert all(isinstance(e, OffsetMetadataTooLargeError) for e in errors)
    assert "offset.metadata.max.bytes=4" in str(errors[0])
    assert h.commit({("t", 1): 3}, metadata="1234") == [None]
    assert h.committed() == {("t", 0): 1, ("t", 1): 3}


def test_a_failed_write_commits_nothing(h):
    h.commit({("t", 0): 1})
    h.store.fail = OSError("no space left on device")
    errors = h.commit({("t", 0): 2})
    assert isinstance(errors[0], CoordinatorNotAvailableError)
    assert "no space left" in str(errors[0])
    assert h.committed() == {("t", 0): 1}


def test_committed_offsets_survive_a_restart(h):
    ids = h.stable_group(1)
    h.commit({("t", 0): 42, ("t", 1): 7}, generation=h.group().generation_id, member_id=ids[0])
    h.commit({("simple", 0): 3}, group="simple-group")
    back = h.restarted()
    assert back.committed() == {("t", 0): 42, ("t", 1): 7}
    assert back.committed("simple-group") == {("simple", 0): 3}
    assert back.group("simple-group").protocol_type is None


# ---------------------------------------------------------------------------------------------
# Expiry


def test_offsets_of_an_empty_group_expire_from_when_it_became_empty(h):
    ids = h.stable_group(1)
    h.commit({("t", 0): 5}, generation=h.group().generation_id, member_id=ids[0])
    h.tick(600 * MINUTE_MS)  # a live group's offsets never expire, however old
    h.heartbeat(ids[0], h.group().generation_id)
    assert h.coordinator.expire_offsets(h.now) == 0
    h.leave(ids[0])
    h.tick(60 * MINUTE_MS - 1)
    assert h.coordinator.expire_offsets(h.now) == 0
    h.tick(1)
    assert h.coordinator.expire_offsets(h.now) == 1
    assert "g" not in h.coordinator.groups  # Empty with no offsets: Dead and gone
    tombstones = [decode_key(k) for k, v in h.store.appends[-1][1] if v is None]
    assert [type(t).__name__ for t in tombstones] == ["OffsetKey", "GroupKey"]
    assert h.restarted().coordinator.groups == {}


def test_offsets_of_a_group_that_only_commits_expire_one_by_one(h):
    h.commit({("t", 0): 1})
    h.tick(30 * MINUTE_MS)
    h.commit({("t", 1): 1})
    h.tick(30 * MINUTE_MS)
    assert h.coordinator.expire_offsets(h.now) == 1
    assert h.committed() == {("t", 1): 1}
    h.tick(30 * MINUTE_MS)
    assert h.coordinator.expire_offsets(h.now) == 1
    assert "g" not in h.coordinator.groups
    # No group record was ever written for it, so none is deleted either.
    assert all(type(decode_key(k)).__name__ == "OffsetKey" for k, _ in h.store.records())


def test_expiry_that_cannot_be_written_is_retried(h):
    h.commit({("t", 0): 1})
    h.tick(60 * MINUTE_MS)
    h.store.fail = OSError("disk")
    assert h.coordinator.expire_offsets(h.now) == 0
    assert h.committed() == {("t", 0): 1}
    h.store.fail = None
    assert h.coordinator.expire_offsets(h.now) == 1


# Transactional offsets (durable, through __consumer_offsets and markers) are tested on real
# storage in tests/broker/test_txn_offsets.py.


def test_fetch_of_an_invalid_group_id(h):
    from spark_mq.errors import InvalidGroupIdError

    with pytest.raises(InvalidGroupIdError):
        h.coordinator.fetch_offsets("")
    with pytest.raises(InvalidGroupIdError):
        h.coordinator.commit_offsets("", [], now_ms=h.now)
    assert InvalidGroupIdError.error_code == E.INVALID_GROUP_ID
