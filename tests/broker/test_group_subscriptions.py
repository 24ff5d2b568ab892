"""The coordinator's reading of consumer subscriptions, and KIP-496: offsets of topics a
Stable consumer group no longer subscribes to expire ``offsets.retention.minutes`` after
their commit. Time is the harness's clock; nothing sleeps."""

from __future__ import annotations

import msgspec
import pytest
from group_harness import Harness

from spark_mq.broker.group.records import OffsetEntry, OffsetKey, decode_key
from spark_mq.broker.group.state import GroupState
from spark_mq.broker.group.subscriptions import subscribed_topics, subscription_topics
from spark_mq.client.assignors import Subscription
from spark_mq.client.assignors.metadata import encode_subscription
from spark_mq.client.records import TopicPartition

MINUTE_MS = 60_000
RETENTION_MS = 60 * MINUTE_MS


def protocols(*topics: str) -> tuple[tuple[str, bytes], ...]:
    return (("range", encode_subscription(Subscription(list(topics)))),)


def stable(h: Harness, *subscriptions: tuple[str, ...]) -> list[str]:
    """A Stable group at generation 1 whose members subscribe to ``subscriptions`` (one tuple
    of topics per member); the member ids, leader first."""
    ids = [h.new_member(protocols=protocols(*topics))[0] for topics in subscriptions]
    answers = {
        m: h.join(m, protocols=protocols(*t)) for m, t in zip(ids, subscriptions, strict=True)
    }
    results = {m: a.items[-1] for m, a in answers.items()}
    assert all(r.error_code == 0 for r in results.values()), results
    generation = results[ids[0]].generation_id
    leader = results[ids[0]].leader
    for m in ids:
        if m != leader:
            h.sync(m, generation)
    h.sync(leader, generation, {m: b"" for m in ids})
    assert h.group().state is GroupState.STABLE
    return ids


def commit(h: Harness, ids: list[str], offsets: dict[tuple[str, int], int]) -> None:
    generation = h.group().generation_id
    assert h.commit(offsets, generation=generation, member_id=ids[0]) == [None] * len(offsets)


def keep_alive(h: Harness, ids: list[str]) -> None:
    for m in ids:
        assert h.heartbeat(m, h.group().generation_id) == 0


def advance(h: Harness, ms: int, ids: list[str]) -> None:
    """Move time by ``ms`` in steps shorter than the session timeout, heartbeating."""
    while ms > 0:
        step = min(ms, 5_000)
        h.tick(step)
        keep_alive(h, ids)
        ms -= step


@pytest.fixture
def h() -> Harness:
    return Harness(offsets_retention_minutes=60)


# ---------------------------------------------------------------------------------------------
# Decoding


def test_topics_decode_from_the_consumers_subscription_bytes():
    owned = Subscription(["a", "b"], [TopicPartition("a", 0)], generation=4, user_data=b"x")
    assert subscription_topics(encode_subscription(owned)) == {"a", "b"}
    # A later version appends fields: still read.
    assert subscription_topics(msgspec.msgpack.encode([1, ["c"], [], -1, b"", "new"])) == {"c"}
    for garbage in (b"", b"sub", msgspec.msgpack.encode([0]), msgspec.msgpack.encode([-1, []])):
        assert subscription_topics(garbage) is None


def test_the_union_is_known_only_for_consumer_groups_whose_members_all_decode():
    a, b = encode_subscription(Subscription(["a"])), encode_subscription(Subscription(["b"]))
    assert subscribed_topics("consumer", [a, b]) == {"a", "b"}
    assert subscribed_topics("consumer", [a, b"opaque"]) is None
    assert subscribed_topics("connect", [a]) is None
    assert subscribed_topics(None, [a]) is None


# ---------------------------------------------------------------------------------------------
# KIP-496 expiry


def test_offsets_of_unsubscribed_topics_expire_from_their_commit(h):
    ids = stable(h, ("t",))
    commit(h, ids, {("t", 0): 5, ("old", 0): 7, ("old", 1): 8})
    advance(h, RETENTION_MS - 5_000, ids)
    commit(h, ids, {("old", 1): 9})  # a newer commit restarts that offset's retention
    advance(h, 4_999, ids)
    assert h.coordinator.expire_offsets(h.now) == 0
    advance(h, 1, ids)
    assert h.coordinator.expire_offsets(h.now) == 1
    assert h.committed() == {("t", 0): 5, ("old", 1): 9}
    tombstones = [decode_key(k) for k, v in h.store.appends[-1][1] if v is None]
    assert tombstones == [OffsetKey("g", "old", 0)]  # no group tombstone: it lives on
    assert h.group().state is GroupState.STABLE
    advance(h, RETENTION_MS, ids)
    assert h.coordinator.expire_offsets(h.now) == 1
    # The subscribed topic's offset is never expired while the group is live, however old.
    assert h.committed() == {("t", 0): 5}
    # What was expired stays expired after a restart.
    assert h.restarted().committed() == {("t", 0): 5}


def test_a_topic_any_member_subscribes_to_is_kept(h):
    ids = stable(h, ("t",), ("u",))
    commit(h, ids, {("t", 0): 1, ("u", 0): 2, ("v", 0): 3})
    advance(h, RETENTION_MS, ids)
    assert h.coordinator.expire_offsets(h.now) == 1
    assert h.committed() == {("t", 0): 1, ("u", 0): 2}


def test_nothing_expires_by_subscription_when_it_is_unknown_or_rebalancing(h):
    # Metadata the coordinator cannot read (the harness's default b"sub"): Kafka's rule too.
    ids = h.stable_group(1)
    commit(h, ids, {("x", 0): 1})
    advance(h, 2 * RETENTION_MS, ids)
    assert h.coordinator.expire_offsets(h.now) == 0
    # A group that is rebalancing keeps everything until it is Stable again.
    other = Harness(offsets_retention_minutes=60)
    ids = stable(other, ("t",))
    commit(other, ids, {("x", 0): 1})
    advance(other, 2 * RETENTION_MS, ids)
    other.new_member(protocols=protocols("t"))  # starts a round: PreparingRebalance
    assert other.group().state is GroupState.PREPARING_REBALANCE
    assert other.coordinator.expire_offsets(other.now) == 0
    assert other.committed() == {("x", 0): 1}


def test_an_offset_with_a_transactional_commit_pending_is_kept(h):
    ids = stable(h, ("t",))
    commit(h, ids, {("x", 0): 1, ("y", 0): 1})
    advance(h, RETENTION_MS, ids)
    # A transaction of producer 42 committed x-0 and has not completed: what the
    # transactional commit path leaves in the group (Group.pending_txn_offsets).
    h.group().pending_txn_offsets[42] = {("x", 0): OffsetEntry(2, -1, None, h.now)}
    assert h.coordinator.expire_offsets(h.now) == 1
    assert set(h.group().offsets) == {("x", 0)}  # (OffsetFetch answers it as unstable)


def test_a_restarted_coordinator_reads_the_subscriptions_from_the_group_record(h):
    ids = stable(h, ("t",))
    commit(h, ids, {("t", 0): 1, ("gone", 0): 1})
    restarted = h.restarted()  # members are back, Stable, sessions restarted
    assert restarted.group().state is GroupState.STABLE
    advance(restarted, RETENTION_MS, ids)
    assert restarted.coordinator.expire_offsets(restarted.now) == 1
    assert restarted.committed() == {("t", 0): 1}
