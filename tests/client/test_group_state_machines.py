"""Unit tests of the group client's small parts: the member state table, the heartbeat
timer, the listener runner, offsets on the wire, the subscription state and the group
settings."""

from __future__ import annotations

import re
from typing import Any

import pytest

from spark_mq.client.assignors import CooperativeStickyAssignor, RangeAssignor
from spark_mq.client.config import ConsumerConfig
from spark_mq.client.group.heartbeat import HeartbeatTimer
from spark_mq.client.group.listener import ConsumerRebalanceListener, RebalanceCallbacks
from spark_mq.client.group.member_state import (
    NO_GENERATION,
    Generation,
    IllegalMemberTransitionError,
    MemberState,
    checked_transition,
)
from spark_mq.client.group.offsets import (
    CommitOutcome,
    OffsetAndMetadata,
    commit_outcome,
    commit_request,
    fetch_request,
    fetched_offsets,
    normalize_offsets,
)
from spark_mq.client.records import TopicPartition
from spark_mq.client.subscription_state import SubscriptionState, SubscriptionType
from spark_mq.errors import ConfigError, UsageError
from spark_mq.protocol.group_offsets import (
    OffsetFetchPartitionResponse,
    OffsetFetchResponse,
    OffsetFetchTopicResponse,
)

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)

# -- member state ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "target", "allowed"),
    [
        (MemberState.UNJOINED, MemberState.PREPARING_REBALANCE, True),
        (MemberState.UNJOINED, MemberState.COMPLETING_REBALANCE, False),
        (MemberState.UNJOINED, MemberState.STABLE, False),
        (MemberState.PREPARING_REBALANCE, MemberState.PREPARING_REBALANCE, True),
        (MemberState.PREPARING_REBALANCE, MemberState.STABLE, False),
        (MemberState.COMPLETING_REBALANCE, MemberState.STABLE, True),
        (MemberState.STABLE, MemberState.COMPLETING_REBALANCE, False),
        (MemberState.STABLE, MemberState.PREPARING_REBALANCE, True),
        (MemberState.STABLE, MemberState.UNJOINED, True),
    ],
)
def test_member_state_transitions(current: MemberState, target: MemberState, allowed: bool) -> None:
    if allowed:
        assert checked_transition(current, target) is target
    else:
        with pytest.raises(IllegalMemberTransitionError):
            checked_transition(current, target)


def test_generation_reset_keeps_the_member_id_only_when_asked() -> None:
    generation = Generation(4, "m-1", "range")
    assert generation.reset(keep_member_id=True) == Generation(-1, "m-1", None)
    assert generation.reset(keep_member_id=False) == NO_GENERATION


# -- heartbeat timer ------------------------------------------------------------------------


def make_timer() -> HeartbeatTimer:
    return HeartbeatTimer(
        interval_ms=1000,
        session_timeout_ms=10_000,
        max_poll_interval_ms=60_000,
        retry_backoff_ms=100,
        now=0.0,
    )


def test_heartbeat_timer_schedules_and_backs_off() -> None:
    timer = make_timer()
    assert timer.seconds_to_next(0.0) == 1.0
    timer.sent(1.0)
    assert timer.seconds_to_next(1.5) == 0.5
    timer.failed(1.6)
    assert timer.seconds_to_next(1.6) == pytest.approx(0.1)
    timer.reset(5.0)
    assert timer.seconds_to_next(5.0) == 1.0


def test_heartbeat_timer_session_and_poll_deadlines() -> None:
    timer = make_timer()
    timer.received(2.0)
    assert not timer.session_expired(12.0) and timer.session_expired(12.1)
    timer.poll(30.0)
    assert not timer.poll_timeout_expired(90.0) and timer.poll_timeout_expired(90.1)
    # The poll deadline bounds the wait even when a heartbeat is far off.
    timer.sent(89.9)
    assert timer.seconds_to_next(89.95) == pytest.approx(0.05)


# -- listener -------------------------------------------------------------------------------


def test_callbacks_skip_empty_sets_and_default_lost_to_revoked() -> None:
    calls: list[tuple[str, set[TopicPartition]]] = []

    class Partial:  # duck-typed, without on_partitions_lost
        def on_partitions_revoked(self, partitions: Any) -> None:
            calls.append(("revoked", set(partitions)))

    callbacks = RebalanceCallbacks(Partial())
    callbacks.revoked(set())
    callbacks.assigned({TP0})  # no such method: skipped
    callbacks.lost({TP1})
    assert calls == [("revoked", {TP1})]

    class Subclass(ConsumerRebalanceListener):
        def on_partitions_revoked(self, partitions: Any) -> None:
            calls.append(("sub-revoked", set(partitions)))

    RebalanceCallbacks(Subclass()).lost({TP0})
    assert calls[-1] == ("sub-revoked", {TP0})


def test_a_listener_error_is_kept_for_the_caller() -> None:
    class Boom(ConsumerRebalanceListener):
        def on_partitions_assigned(self, partitions: Any) -> None:
            raise ValueError("bad")

    callbacks = RebalanceCallbacks(Boom())
    callbacks.assigned({TP0})
    callbacks.assigned({TP1})
    error = callbacks.take_error()
    assert isinstance(error, ValueError) and callbacks.take_error() is None


# -- offsets --------------------------------------------------------------------------------


def test_offsets_are_normalized_and_checked() -> None:
    assert normalize_offsets({("t", 0): 5, TP1: OffsetAndMetadata(6, "x")}) == {
        TP0: OffsetAndMetadata(5),
        TP1: OffsetAndMetadata(6, "x"),
    }
    with pytest.raises(UsageError, match="t-0"):
        normalize_offsets({TP0: -1})


def test_commit_and_fetch_requests_group_partitions_by_topic() -> None:
    request = commit_request(
        "g",
        {TP1: OffsetAndMetadata(2), TP0: OffsetAndMetadata(1, "m")},
        Generation(3, "m-1", "range"),
        "i-1",
    )
    assert (request.generation_id, request.member_id, request.group_instance_id) == (
        3,
        "m-1",
        "i-1",
    )
    (topic,) = request.topics
    assert [(p.partition, p.committed_offset, p.committed_metadata) for p in topic.partitions] == [
        (0, 1, "m"),
        (1, 2, None),
    ]
    assert fetch_request("g", None).topics is None
    assert [t.partition_indexes for t in fetch_request("g", [TP1, TP0]).topics or []] == [[0, 1]]


def test_fetched_offsets_mark_missing_commits_as_none() -> None:
    response = OffsetFetchResponse(
        0,
        [
            OffsetFetchTopicResponse(
                "t",
                [
                    OffsetFetchPartitionResponse(0, 7, metadata="m"),
                    OffsetFetchPartitionResponse(1, -1),
                    OffsetFetchPartitionResponse(2, -1, error_code=88),
                ],
            )
        ],
    )
    offsets, errors = fetched_offsets(response)
    assert offsets == {TP0: OffsetAndMetadata(7, "m"), TP1: None}
    assert errors == {TopicPartition("t", 2): (88, None)}


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (14, CommitOutcome.RETRY),
        (16, CommitOutcome.COORDINATOR_GONE),
        (15, CommitOutcome.COORDINATOR_GONE),
        (7, CommitOutcome.COORDINATOR_GONE),
        (22, CommitOutcome.STALE_GENERATION),
        (25, CommitOutcome.STALE_GENERATION),
        (27, CommitOutcome.REBALANCING),
        (82, CommitOutcome.FENCED),
        (3, CommitOutcome.FAILED),
        (9999, CommitOutcome.FAILED),
    ],
)
def test_commit_outcomes(code: int, outcome: CommitOutcome) -> None:
    assert commit_outcome(code) is outcome


# -- subscription state ---------------------------------------------------------------------


def test_assign_and_subscribe_exclude_each_other() -> None:
    state = SubscriptionState()
    state.assign_from_user([TP0])
    with pytest.raises(UsageError, match="unsubscribe"):
        state.subscribe(["t"])
    state.unsubscribe()
    state.subscribe(["t"])
    with pytest.raises(UsageError, match="unsubscribe"):
        state.assign_from_user([TP0])
    state.subscribe_pattern(re.compile("t.*"))  # a new subscription replaces the old one
    assert state.subscription_type is SubscriptionType.AUTO_PATTERN


def test_a_pattern_matches_whole_names_and_never_internal_topics() -> None:
    state = SubscriptionState()
    state.subscribe_pattern(re.compile("ev.*"))
    assert state.match_topics(["events", "evict", "__consumer_offsets", "my-events"])
    assert state.subscription == {"events", "evict"}
    assert not state.match_topics(["evict", "events"])
    state2 = SubscriptionState()
    state2.subscribe_pattern(re.compile(".*"))
    state2.match_topics(["a", "__consumer_offsets"])
    assert state2.subscription == {"a"}


def test_the_group_assignment_keeps_the_state_of_partitions_that_stay() -> None:
    state = SubscriptionState()
    state.subscribe(["t"])
    state.assign_from_group([TP0, TP1])
    state.seek(TP0, 10)
    state.state(TP0).awaiting_committed = False
    state.assign_from_group([TP0, TopicPartition("t", 2)])
    assert state.position(TP0) == 10 and not state.state(TP0).awaiting_committed
    assert state.state(TopicPartition("t", 2)).awaiting_committed
    assert state.assignment() == {TP0, TopicPartition("t", 2)}


# -- settings -------------------------------------------------------------------------------


def test_group_settings_defaults_and_checks() -> None:
    config = ConsumerConfig()
    assert (config.session_timeout_ms, config.heartbeat_interval_ms) == (45_000, 3_000)
    assert config.effective_rebalance_timeout_ms == config.max_poll_interval_ms == 300_000
    assert [type(a) for a in config.partition_assignment_strategy] == [
        RangeAssignor,
        CooperativeStickyAssignor,
    ]
    assert not config.auto_commit  # enable.auto.commit needs a group.id
    assert ConsumerConfig(group_id="g").auto_commit
    assert ConsumerConfig(rebalance_timeout_ms=5000).effective_rebalance_timeout_ms == 5000
    with pytest.raises(ConfigError, match=r"heartbeat\.interval\.ms"):
        ConsumerConfig(heartbeat_interval_ms=10_000, session_timeout_ms=10_000)
    with pytest.raises(ConfigError, match=r"partition\.assignment\.strategy"):
        ConsumerConfig.from_properties({"partition.assignment.strategy": "fancy"})
    custom = ConsumerConfig.from_properties(partition_assignment_strategy=[RangeAssignor()])
    assert [a.name for a in custom.partition_assignment_strategy] == ["range"]
