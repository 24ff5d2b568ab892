"""JoinGroup / SyncGroup / Heartbeat / LeaveGroup flows of the coordinator, with a clock the
test moves: leader election, MEMBER_ID_REQUIRED, generation fencing, session expiry,
rebalance timeouts, the initial delay, protocol votes and persistence of the assignment."""

from __future__ import annotations

import pytest
from group_harness import REBALANCE_MS, SESSION_MS, Harness

from spark_mq.broker.group.rebalance import NEW_MEMBER_JOIN_TIMEOUT_MS
from spark_mq.broker.group.records import decode_group_value, decode_key
from spark_mq.broker.group.state import GroupState
from spark_mq.errors import InvalidGroupIdError
from spark_mq.protocol.error_codes import ErrorCode as E


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_first_join_needs_a_member_id_then_one_member_is_its_own_leader(h):
    first = h.join().one
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id == "c-1"
    assert "c-1" in h.group().pending_members
    answer = h.join("c-1").one
    assert (answer.error_code, answer.generation_id, answer.leader) == (0, 1, "c-1")
    assert (answer.protocol_type, answer.protocol_name) == ("consumer", "range")
    assert [(m.member_id, m.metadata) for m in answer.members] == [("c-1", b"sub")]
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    synced = h.sync("c-1", 1, {"c-1": b"all"}).one
    assert (synced.error_code, synced.assignment, synced.protocol_name) == (0, b"all", "range")
    assert h.group().state is GroupState.STABLE
    assert h.heartbeat("c-1", 1) is E.NONE


def test_three_members_leader_gets_everyone_followers_wait_for_its_assignment(h):
    ids = []
    for _ in range(3):
        member_id, _ = h.new_member()
        ids.append(member_id)
    # c-1 completed generation 1 alone; the others' joins started generation 2's round,
    # which c-1 must rejoin.
    assert h.group().state is GroupState.PREPARING_REBALANCE
    joins = {m: h.join(m) for m in ids}
    results = {m: a.items[-1] for m, a in joins.items()}
    assert {r.generation_id for r in results.values()} == {2}
    assert {r.leader for r in results.values()} == {"c-1"}
    assert [m.member_id for m in results["c-1"].members] == ids
    assert results["c-2"].members == [] and results["c-3"].members == []
    follower = h.sync("c-2", 2)
    assert not follower.done  # waits for the leader
    leader = h.sync("c-1", 2, {m: m.encode() for m in ids})
    assert leader.one.assignment == b"c-1"
    assert follower.one.assignment == b"c-2"
    assert h.sync("c-3", 2).one.assignment == b"c-3"  # Stable: answered at once
    assert h.group().pending_sync == set()


def test_a_new_member_makes_the_others_rejoin_and_the_leader_stays(h):
    ids = h.stable_group(2)
    generation = h.group().generation_id
    newcomer, waiting = h.new_member()
    assert not waiting.done
    assert h.heartbeat(ids[1], generation) is E.REBALANCE_IN_PROGRESS
    results = h.rejoin_all([*ids, newcomer])
    assert {r.generation_id for r in results.values()} == {generation + 1}
    assert results[ids[0]].leader == ids[0]


def test_the_next_oldest_member_leads_when_the_leader_leaves(h):
    ids = h.stable_group(3)
    response = h.leave(ids[0])
    assert [(m.member_id, m.error_code) for m in response.members] == [(ids[0], 0)]
    assert h.group().state is GroupState.PREPARING_REBALANCE
    results = h.rejoin_all(ids[1:])
    assert results[ids[1]].leader == ids[1]


def test_generation_fencing(h):
    ids = h.stable_group(2)
    old = h.group().generation_id
    h.new_member()
    h.rejoin_all([*ids, "c-3"])
    assert h.heartbeat(ids[0], old) is E.ILLEGAL_GENERATION
    assert h.sync(ids[0], old).one.error_code == E.ILLEGAL_GENERATION
    assert h.heartbeat("nobody", old + 1) is E.UNKNOWN_MEMBER_ID
    assert h.heartbeat(ids[0], old, group="other") is E.UNKNOWN_MEMBER_ID
    assert h.join("nobody").one.error_code == E.UNKNOWN_MEMBER_ID


def test_session_expiry_removes_a_silent_member_and_rebalances(h):
    ids = h.stable_group(2)
    generation = h.group().generation_id
    for _ in range(2):
        h.tick(SESSION_MS * 2 // 5)
        assert h.heartbeat(ids[0], generation) is E.NONE
    h.tick(SESSION_MS // 5)
    # ids[1] has been silent for a whole session: gone, and the group rebalances.
    assert not h.group().has(ids[1])
    assert h.heartbeat(ids[0], generation) is E.REBALANCE_IN_PROGRESS
    assert h.heartbeat(ids[1], generation) is E.UNKNOWN_MEMBER_ID
    alone = h.join(ids[0]).one
    assert (alone.generation_id, [m.member_id for m in alone.members]) == (
        generation + 1,
        [ids[0]],
    )


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed(h):
    ids = h.stable_group(3)
    generation = h.group().generation_id
    h.leave(ids[2])
    waiting = h.join(ids[0])
    # ids[1] heartbeats (so its session lives) but never rejoins.
    for _ in range(REBALANCE_MS // 5000 - 1):
        h.tick(5000)
        assert h.heartbeat(ids[1], generation) is E.REBALANCE_IN_PROGRESS
        assert not waiting.done
    h.tick(5000)
    answer = waiting.one
    assert answer.generation_id == generation + 1
    assert [m.member_id for m in answer.members] == [ids[0]]
    assert h.heartbeat(ids[1], generation) is E.UNKNOWN_MEMBER_ID


def test_a_member_waiting_in_join_is_not_expired_by_its_session(h):
    ids = h.stable_group(2)
    waiting = h.join(ids[0])  # the leader rejoins: a rebalance
    h.tick(SESSION_MS + 1)  # ids[1] is silent and expires; ids[0] waits in its join
    assert h.group().has(ids[0]) and not h.group().has(ids[1])
    assert waiting.one.members[0].member_id == ids[0]


def test_a_new_member_that_never_completes_its_join_is_dropped(h):
    ids = h.stable_group(1)
    newcomer, waiting = h.new_member(rebalance_ms=10 * NEW_MEMBER_JOIN_TIMEOUT_MS)
    # The leader heartbeats but does not rejoin, so the round waits for the long rebalance
    # timeout; the newcomer may wait NEW_MEMBER_JOIN_TIMEOUT_MS only.
    for _ in range(NEW_MEMBER_JOIN_TIMEOUT_MS // 5000):
        h.tick(5000)
        h.heartbeat(ids[0], 1)
    assert not h.group().has(newcomer)
    assert waiting.one.error_code == E.UNKNOWN_MEMBER_ID


def test_an_unused_member_id_is_forgotten_after_the_session_timeout(h):
    first = h.join().one
    h.tick(SESSION_MS)
    assert first.member_id not in h.group().pending_members
    assert h.join(first.member_id).one.error_code == E.UNKNOWN_MEMBER_ID


def test_initial_delay_waits_for_more_members_and_extends_while_they_arrive():
    h = Harness(group_initial_rebalance_delay_ms=3000)
    _, first = h.new_member()
    h.tick(2000)
    _, second = h.new_member()
    h.tick(1000)  # 3 s after the first join: a member arrived meanwhile, so wait 3 s more
    assert not first.done and not second.done
    h.tick(2999)
    assert not first.done
    h.tick(1)
    assert first.one.generation_id == second.one.generation_id == 1
    assert len(first.one.members) == 2


def test_initial_delay_is_bounded_by_the_rebalance_timeout():
    h = Harness(group_initial_rebalance_delay_ms=3000)
    _, first = h.new_member(rebalance_ms=4000)
    h.tick(2000)
    h.new_member(rebalance_ms=4000)
    h.tick(1000)
    h.tick(1000)  # remaining was 1000: the extension is 1 s, not 3 s
    assert first.one.generation_id == 1


def test_session_timeout_bounds():
    h = Harness(group_min_session_timeout_ms=6000, group_max_session_timeout_ms=60_000)
    low = h.join(session_ms=5999).one
    assert low.error_code == E.INVALID_SESSION_TIMEOUT
    assert "group.min.session.timeout.ms" in low.error_message
    assert h.join(session_ms=60_001).one.error_code == E.INVALID_SESSION_TIMEOUT
    assert "g" not in h.coordinator.groups  # nothing was created


def test_invalid_group_id_and_inconsistent_protocols(h):
    assert h.join(group="").one.error_code == E.INVALID_GROUP_ID
    assert h.sync("m", 1, group="").one.error_code == E.INVALID_GROUP_ID
    assert h.heartbeat("m", 1, group="") is E.INVALID_GROUP_ID
    with pytest.raises(InvalidGroupIdError):
        h.leave("m", group="")
    assert h.join(protocols=()).one.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocol_type="").one.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    h.stable_group(1)
    other = h.join(protocols=[("roundrobin", b"")]).one
    assert other.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert "range" in other.error_message
    assert h.join(protocol_type="connect").one.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_is_chosen_by_vote_among_those_everyone_supports():
    both = [("range", b"r"), ("roundrobin", b"rr")]
    h = Harness()
    a, _ = h.new_member(protocols=both)
    _, b_waits = h.new_member(protocols=both)
    _, c_waits = h.new_member(protocols=[("roundrobin", b"x"), ("range", b"y")])
    a_waits = h.join(a, protocols=both)
    answers = [a_waits.one, b_waits.one, c_waits.one]
    assert {r.protocol_name for r in answers} == {"range"}  # two votes to one
    # The leader sees each member's metadata for the chosen protocol.
    assert [m.metadata for m in answers[0].members] == [b"r", b"r", b"y"]
    # A protocol that not every member supports is never chosen, however preferred.
    h = Harness()
    a, _ = h.new_member(protocols=both)
    h.new_member(protocols=[("roundrobin", b"")])
    assert h.join(a, protocols=both).one.protocol_name == "roundrobin"


def test_rejoining_follower_with_same_protocols_does_not_rebalance(h):
    ids = h.stable_group(2)
    again = h.join(ids[1]).one
    assert (again.error_code, again.generation_id, again.members) == (0, 1 + 1, [])
    assert h.group().state is GroupState.STABLE
    # The leader rejoining does start a rebalance (it may want to reassign).
    h.join(ids[0])
    assert h.group().state is GroupState.PREPARING_REBALANCE


def test_repeated_join_while_completing_returns_the_same_generation(h):
    member_id, first = h.new_member()
    again = h.join(member_id).one
    assert again.generation_id == first.one.generation_id
    assert again.leader == member_id


def test_leader_that_never_syncs_is_removed_after_the_rebalance_timeout(h):
    ids = h.stable_group(2)
    h.join(ids[0])
    h.join(ids[1])
    follower = h.sync(ids[1], 3)
    # Both stay alive (the leader heartbeats while it "computes"), but the leader never
    # sends its assignment.
    for _ in range(REBALANCE_MS // 5000):
        assert not follower.done
        assert h.heartbeat(ids[0], 3) is E.NONE
        h.tick(5000)
    assert follower.one.error_code == E.REBALANCE_IN_PROGRESS
    assert not h.group().has(ids[0])
    assert h.join(ids[1]).one.leader == ids[1]


def test_sync_errors(h):
    assert h.sync("x", 1).one.error_code == E.UNKNOWN_MEMBER_ID
    ids = h.stable_group(2)
    h.join(ids[0])
    assert h.sync(ids[1], 2).one.error_code == E.REBALANCE_IN_PROGRESS
    assert h.sync("x", 2).one.error_code == E.UNKNOWN_MEMBER_ID


def test_leave_errors_and_admin_removal_by_instance_id(h):
    response = h.leave("x", group="nope")
    assert (response.error_code, response.members[0].error_code) == (0, E.UNKNOWN_MEMBER_ID)
    h.join(instance="i-1")
    assert h.leave("", instance="i-1").members[0].error_code == 0
    assert h.group().state in (GroupState.PREPARING_REBALANCE, GroupState.EMPTY)
    assert h.leave("", instance="i-1").members[0].error_code == E.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group_at_a_new_generation(h):
    ids = h.stable_group(1)
    h.leave(ids[0])
    group = h.group()
    assert (group.state, group.generation_id, group.protocol_type) == (
        GroupState.EMPTY,
        2,
        "consumer",
    )
    assert group.state_timestamp_ms == h.now


def test_group_max_size():
    h = Harness(group_max_size=2)
    h.stable_group(2)
    refused = h.join().one
    assert refused.error_code == E.GROUP_MAX_SIZE_REACHED
    assert "group.max.size" in refused.error_message


def test_assignment_is_stored_and_a_restart_brings_the_group_back(h):
    ids = h.stable_group(2)
    key, value = h.store.records()[-1]
    assert decode_key(key).group_id == "g"
    record = decode_group_value(value)
    assert [(m.member_id, m.assignment) for m in record.members] == [
        (m, f"a-{m}".encode()) for m in ids
    ]
    assert (record.generation_id, record.leader_id, record.protocol_name) == (2, ids[0], "range")
    back = h.restarted()
    group = back.group()
    assert (group.state, group.generation_id, group.leader_id) == (GroupState.STABLE, 2, ids[0])
    assert back.heartbeat(ids[1], 2) is E.NONE
    assert back.sync(ids[1], 2).one.assignment == f"a-{ids[1]}".encode()
    # Members that do not come back after the restart expire and the group empties.
    back.tick(SESSION_MS)
    assert back.group().state is GroupState.EMPTY


def test_a_failed_store_fails_the_sync_and_rebalances(h):
    ids = h.stable_group(2)
    h.join(ids[0])
    h.join(ids[1])
    h.store.fail = OSError("disk on fire")
    follower = h.sync(ids[1], 3)
    leader = h.sync(ids[0], 3, {ids[0]: b"x", ids[1]: b"y"})
    assert leader.one.error_code == follower.one.error_code == E.COORDINATOR_NOT_AVAILABLE
    assert "disk on fire" in leader.one.error_message
    assert h.group().state is GroupState.PREPARING_REBALANCE


def test_shutdown_answers_everyone_waiting(h):
    ids = h.stable_group(2)
    waiting = h.join(ids[0])
    h.coordinator.shutdown()
    assert waiting.one.error_code == E.COORDINATOR_NOT_AVAILABLE
