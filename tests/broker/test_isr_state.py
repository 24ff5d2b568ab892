"""The leader's ISR bookkeeping with an injected clock: who stays in sync under a steady
stream of appends, who falls out after replica.lag.time.max.ms, when a follower may join,
and the high watermark the (maximal) ISR allows."""

from __future__ import annotations

from spark_mq.broker.isr import LeaderIsrState

LAG_MS = 30_000


def _state(now: int = 0) -> LeaderIsrState:
    return LeaderIsrState(leader_id=1, replicas=[1, 2, 3], isr=[1, 2, 3], now_ms=now)


def test_a_follower_that_keeps_up_with_steady_appends_stays_in_sync() -> None:
    state = _state()
    leader_end = 0
    for second in range(1, 120):
        now = second * 1000
        # The follower always asks for the leader's end as of its previous fetch: one
        # second behind, never caught up at the moment it fetches.
        state.update_follower(2, leader_end, leader_end + 100, now)
        state.update_follower(3, leader_end + 100, leader_end + 100, now)
        leader_end += 100
        assert state.out_of_sync(now, LAG_MS) == frozenset()


def test_a_follower_that_stops_fetching_leaves_after_the_lag_time() -> None:
    state = _state()
    state.update_follower(2, 50, 50, now_ms=1_000)
    state.update_follower(3, 50, 50, now_ms=1_000)
    for now in range(2_000, 40_000, 1_000):
        state.update_follower(3, 50 + now, 50 + now, now_ms=now)
    assert state.out_of_sync(31_000, LAG_MS) == frozenset()
    assert state.out_of_sync(31_001, LAG_MS) == frozenset({2})
    assert state.proposed_shrink(31_001, LAG_MS) == frozenset({1, 3})


def test_a_follower_that_falls_ever_further_behind_leaves() -> None:
    state = _state()
    leader_end = 0
    left_at = None
    for second in range(1, 100):
        now = second * 1000
        # Half the leader's pace: it never reaches even the previous fetch's leader end.
        state.update_follower(2, leader_end // 2, leader_end + 100, now)
        state.update_follower(3, leader_end + 100, leader_end + 100, now)
        leader_end += 100
        if left_at is None and 2 in state.out_of_sync(now, LAG_MS):
            left_at = now
    assert left_at is not None and LAG_MS < left_at <= LAG_MS + 2_000


def test_the_high_watermark_is_the_smallest_log_end_of_the_isr_and_never_goes_back() -> None:
    state = _state()
    # A follower whose log end is unknown holds the high watermark where it is.
    state.update_follower(2, 40, 100, now_ms=1)
    assert state.high_watermark(100, current=10) == 10
    state.update_follower(3, 70, 100, now_ms=1)
    assert state.high_watermark(100, current=10) == 40
    assert state.high_watermark(100, current=55) == 55
    # Out of the ISR, a slow follower no longer holds it.
    state.settle([1, 3])
    assert state.high_watermark(100, current=40) == 70


def test_a_follower_joins_once_at_the_high_watermark_and_the_epoch_start() -> None:
    state = LeaderIsrState(leader_id=1, replicas=[1, 2, 3], isr=[1, 3], now_ms=0)
    state.update_follower(3, 100, 100, now_ms=1)
    state.update_follower(2, 90, 100, now_ms=1)
    assert state.proposed_expansion(high_watermark=100, epoch_start_offset=80) is None
    state.update_follower(2, 100, 100, now_ms=2)
    assert state.proposed_expansion(high_watermark=100, epoch_start_offset=120) is None
    assert state.proposed_expansion(high_watermark=100, epoch_start_offset=80) == {1, 2, 3}


def test_one_proposal_at_a_time_and_the_pending_one_holds_the_high_watermark() -> None:
    state = LeaderIsrState(leader_id=1, replicas=[1, 2, 3], isr=[1, 3], now_ms=0)
    state.update_follower(3, 100, 100, now_ms=1)
    state.update_follower(2, 100, 100, now_ms=1)
    proposal = state.proposed_expansion(100, 0)
    assert proposal == {1, 2, 3}
    state.propose(proposal)
    assert state.proposed_expansion(100, 0) is None
    assert state.proposed_shrink(10**9, LAG_MS) is None
    # The leader appends; follower 2 (being added) has not fetched it: the maximal ISR holds
    # the high watermark at its log end.
    state.update_follower(3, 150, 150, now_ms=2)
    assert state.high_watermark(150, current=100) == 100
    # Refused (a stale partition epoch): the ISR stays; a new proposal may follow.
    state.settle(None)
    assert state.isr == {1, 3}
    assert state.high_watermark(150, current=100) == 150
    assert state.proposed_expansion(150, 0) is None  # follower 2 is behind the HW now


def test_a_broker_that_is_not_a_replica_is_refused_and_min_insync_counts_the_leader() -> None:
    state = _state()
    assert not state.update_follower(9, 0, 0, now_ms=1)
    assert state.enough_in_sync(3)
    state.settle([1])
    assert state.enough_in_sync(1) and not state.enough_in_sync(2)
