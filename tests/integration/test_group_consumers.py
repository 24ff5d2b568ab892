"""Consumers in groups against a real broker: sharing partitions, commits, auto-commit,
cooperative rebalancing, static membership, patterns, and offsets across a restart."""

from __future__ import annotations

from typing import Any

import pytest
from group_testing import (
    GROUP_BROKER,
    Recorder,
    create_topic,
    member,
    poll_all,
    produce,
    servers,
    settled,
)

from spark_mq import Admin, CommitFailedError, Consumer, OffsetAndMetadata, TopicPartition
from spark_mq.errors import UsageError


@pytest.fixture
def broker(start_broker: Any) -> Any:
    return start_broker(overrides=GROUP_BROKER)


def tps(topic: str, count: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(count)}


def test_subscribe_and_assign_exclude_each_other(broker: Any) -> None:
    with member(broker) as c:
        c.subscribe(["t"])
        with pytest.raises(UsageError, match="unsubscribe"):
            c.assign([TopicPartition("t", 0)])
        c.unsubscribe()
        c.assign([TopicPartition("t", 0)])
        with pytest.raises(UsageError, match="unsubscribe"):
            c.subscribe(["t"])
    with (
        Consumer(bootstrap_servers=servers(broker)) as plain,
        pytest.raises(UsageError, match=r"group\.id"),
    ):
        plain.subscribe(["t"])


def test_two_members_split_the_partitions_and_read_every_record_once(broker: Any) -> None:
    create_topic(broker, "t", 4)
    a, b = member(broker), member(broker)
    try:
        a.subscribe(["t"])
        b.subscribe(["t"])
        poll_all([a, b], lambda: settled([a, b], tps("t", 4)))
        assert len(a.assignment()) == len(b.assignment()) == 2
        produce(broker, "t", 250, 4)
        seen: list[tuple[Consumer, int, int]] = []
        poll_all(
            [a, b],
            lambda: len(seen) >= 1000,
            sink=lambda c, r: seen.append((c, r.partition, r.offset)),
        )
        keys = [(p, o) for _, p, o in seen]
        assert len(keys) == len(set(keys)) == 1000
        for c, p, _ in seen:
            assert TopicPartition("t", p) in c.assignment()
    finally:
        a.close()
        b.close()


def test_commit_and_committed_and_a_new_member_resumes_there(broker: Any) -> None:
    create_topic(broker, "t", 2)
    produce(broker, "t", 10, 2)
    with member(broker, enable_auto_commit=False) as c:
        c.subscribe(["t"])
        got: list[Any] = []
        poll_all([c], lambda: len(got) >= 20, sink=lambda _, r: got.append(r))
        c.commit({TopicPartition("t", 0): 4, ("t", 1): OffsetAndMetadata(7, "note")})
        committed = c.committed([TopicPartition("t", 0), TopicPartition("t", 1)])
        assert committed[TopicPartition("t", 0)] == OffsetAndMetadata(4)
        assert committed[TopicPartition("t", 1)].offset == 7
        assert committed[TopicPartition("t", 1)].metadata == "note"
    with member(broker, enable_auto_commit=False) as again:
        again.subscribe(["t"])
        got = []
        poll_all([again], lambda: len(got) >= 9, sink=lambda _, r: got.append(r))
        assert sorted((r.partition, r.offset) for r in got) == [
            *((0, o) for o in range(4, 10)),
            *((1, o) for o in range(7, 10)),
        ]


def test_auto_commit_in_poll_and_on_close(broker: Any) -> None:
    create_topic(broker, "t", 1)
    produce(broker, "t", 30, 1)
    tp = TopicPartition("t", 0)
    with member(broker, auto_commit_interval_ms=50) as c:
        c.subscribe(["t"])
        got: list[Any] = []
        poll_all([c], lambda: len(got) >= 30, sink=lambda _, r: got.append(r))
        # poll() commits the position every 50 ms, asynchronously.
        poll_all([c], lambda: (c.committed([tp])[tp] or OffsetAndMetadata(0)).offset == 30)
    produce(broker, "t", 5, 1)
    with member(broker, auto_commit_interval_ms=3_600_000, max_poll_records=2) as c:
        c.subscribe(["t"])
        got = []
        poll_all([c], lambda: len(got) >= 2, sink=lambda _, r: got.append(r))
        assert [r.offset for r in got] == [30, 31]
    # close() committed the position (32), not just what the hour-long interval would.
    with Admin(bootstrap_servers=servers(broker)) as admin:
        assert admin.list_group_offsets("g")[tp].offset == 32


def test_a_commit_from_a_removed_member_raises_commit_failed(broker: Any) -> None:
    create_topic(broker, "t", 2)
    # Slow heartbeats: A will not hear of the rebalance; the short rebalance timeout makes
    # the coordinator remove A when it does not rejoin.
    slow = {
        "heartbeat_interval_ms": 20_000,
        "session_timeout_ms": 45_000,
        "rebalance_timeout_ms": 1000,
        "enable_auto_commit": False,
    }
    a, b = member(broker, **slow), member(broker, **slow)
    try:
        a.subscribe(["t"])
        poll_all([a], lambda: len(a.assignment()) == 2)
        stale = a.group_metadata()
        b.subscribe(["t"])  # A stops polling; the group moves on without it
        poll_all([b], lambda: len(b.assignment()) == 2)
        assert b.group_metadata().generation_id > stale.generation_id
        with pytest.raises(CommitFailedError) as info:
            a.commit({TopicPartition("t", 0): 1})
        assert info.value.generation_id == stale.generation_id
        assert info.value.reason in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION")
        with Admin(bootstrap_servers=servers(broker)) as admin:
            assert TopicPartition("t", 0) not in admin.list_group_offsets("g")
    finally:
        a.close()
        b.close()


def test_a_cooperative_rebalance_never_revokes_partitions_that_stay(broker: Any) -> None:
    create_topic(broker, "t", 6)
    cooperative = {"partition_assignment_strategy": "cooperative-sticky"}
    recorders = [Recorder(), Recorder(), Recorder()]
    members = [member(broker, **cooperative) for _ in recorders]
    try:
        members[0].subscribe(["t"], listener=recorders[0])
        poll_all(members[:1], lambda: settled(members[:1], tps("t", 6)))
        for n in (2, 3):
            members[n - 1].subscribe(["t"], listener=recorders[n - 1])
            poll_all(members[:n], lambda n=n: settled(members[:n], tps("t", 6)))
        for c, r in zip(members, recorders, strict=True):
            owned: set[TopicPartition] = set()
            for name, partitions in r.calls:
                assert name != "lost"
                if name == "assigned":
                    assert owned.isdisjoint(partitions)
                    owned |= partitions
                else:
                    assert partitions <= owned
                    owned -= partitions
            assert owned == c.assignment()
            # Partitions a member ends with were never revoked from it.
            assert r.of("revoked").isdisjoint(c.assignment())
        assert [len(c.assignment()) for c in members] == [2, 2, 2]
        # Minimal movement: the first member gave up 3 then 1, the second 1.
        assert [len(r.of("revoked")) for r in recorders] == [4, 1, 0]
    finally:
        for c in members:
            c.close()


def test_partitions_that_stay_keep_being_read_during_a_cooperative_rebalance(
    broker: Any,
) -> None:
    create_topic(broker, "t", 2)
    produce(broker, "t", 400, 2)
    cooperative = {"partition_assignment_strategy": "cooperative-sticky", "max_poll_records": 5}
    a, b = member(broker, **cooperative), member(broker, **cooperative)
    try:
        a.subscribe(["t"])
        poll_all([a], lambda: len(a.assignment()) == 2)
        b.subscribe(["t"])
        # Poll B once so that it joins; the group now waits for A to rejoin, and A keeps
        # returning records while its JoinGroup is in flight.
        b.poll(timeout_ms=50)
        generation = a.group_metadata().generation_id
        during: list[Any] = []
        while a.group_metadata().generation_id == generation:
            during.extend(r for rs in a.poll(timeout_ms=50).values() for r in rs)
        assert during, "A returned nothing while it rejoined"
        poll_all([a, b], lambda: settled([a, b], tps("t", 2)))
    finally:
        a.close()
        b.close()


def test_a_static_member_restarts_without_a_rebalance(broker: Any) -> None:
    create_topic(broker, "t", 4)
    ra, rb = Recorder(), Recorder()
    a = member(broker, group_instance_id="a", session_timeout_ms=30_000)
    b = member(broker, group_instance_id="b", session_timeout_ms=30_000)
    try:
        a.subscribe(["t"], listener=ra)
        b.subscribe(["t"], listener=rb)
        poll_all([a, b], lambda: settled([a, b], tps("t", 4)))
        generation = b.group_metadata().generation_id
        owned_by_a = set(a.assignment())
        b_calls = list(rb.calls)
        a.close()  # a static member does not leave: no rebalance
        a = member(broker, group_instance_id="a", session_timeout_ms=30_000)
        a.subscribe(["t"])
        poll_all([a, b], lambda: set(a.assignment()) == owned_by_a)
        assert a.group_metadata().generation_id == generation
        assert b.group_metadata().generation_id == generation
        assert rb.calls == b_calls  # B saw no rebalance
        with Admin(bootstrap_servers=servers(broker)) as admin:
            assert admin.describe_group("g").generation_id == generation
    finally:
        a.close()
        b.close()


def test_a_pattern_picks_up_new_topics_and_the_leader_new_partitions(broker: Any) -> None:
    create_topic(broker, "p-1", 1)
    create_topic(broker, "other", 1)
    with member(broker, metadata_max_age_ms=100) as c:
        c.subscribe("p-.*")
        poll_all([c], lambda: c.assignment() == {TopicPartition("p-1", 0)})
        assert c.subscription() == {"p-1"}
        create_topic(broker, "p-2", 2)
        poll_all([c], lambda: c.assignment() == tps("p-1", 1) | tps("p-2", 2))
        with Admin(bootstrap_servers=servers(broker)) as admin:
            admin.create_partitions("p-1", 3)
        poll_all([c], lambda: c.assignment() == tps("p-1", 3) | tps("p-2", 2))


def test_committed_offsets_survive_a_broker_restart(broker: Any, start_broker: Any) -> None:
    create_topic(broker, "t", 2)
    produce(broker, "t", 10, 2)
    with member(broker, enable_auto_commit=False) as c:
        c.subscribe(["t"])
        got: list[Any] = []
        poll_all([c], lambda: len(got) >= 20, sink=lambda _, r: got.append(r))
        c.commit({TopicPartition("t", 0): 3, TopicPartition("t", 1): 8})
    broker.stop()
    again = start_broker(overrides=GROUP_BROKER)
    with member(again, enable_auto_commit=False) as c:
        assert c.committed([TopicPartition("t", 0), TopicPartition("t", 1)]) == {
            TopicPartition("t", 0): OffsetAndMetadata(3),
            TopicPartition("t", 1): OffsetAndMetadata(8),
        }
        c.subscribe(["t"])
        got = []
        poll_all([c], lambda: len(got) >= 9, sink=lambda _, r: got.append(r))
        assert sorted((r.partition, r.offset) for r in got) == [
            *((0, o) for o in range(3, 10)),
            *((1, o) for o in range(8, 10)),
        ]


def test_assigned_partitions_start_from_committed_offsets_too(broker: Any) -> None:
    create_topic(broker, "t", 1)
    produce(broker, "t", 10, 1)
    tp = TopicPartition("t", 0)
    with Admin(bootstrap_servers=servers(broker)) as admin:
        admin.alter_group_offsets("manual", {tp: 6})
    with member(broker, group="manual", enable_auto_commit=False) as c:
        c.assign([tp])
        assert c.position(tp) == 6
        c.seek(tp, 8)
        c.commit()
        assert c.committed([tp])[tp] == OffsetAndMetadata(8)
