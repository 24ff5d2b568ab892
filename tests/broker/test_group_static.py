"""Static membership (group.instance.id, KIP-345): a restarted member gets its place and its
assignment back with no rebalance; the member id it replaced is fenced."""

from __future__ import annotations

from typing import Any

import pytest
from group_harness import SESSION_MS, Harness

from spark_mq.broker.group.state import GroupState
from spark_mq.errors import FencedInstanceIdError
from spark_mq.protocol.error_codes import ErrorCode as E


def stable_static_group(h: Harness, instances: list[str], **kw: Any) -> dict[str, str]:
    """Static members joined and synced; instance id -> member id."""
    for i in instances:
        h.join(instance=i, **kw)  # at once: no MEMBER_ID_REQUIRED for static members
    ids = dict(h.group().static_members)
    # Later joins made the earlier members rejoin; every one does, with its instance id.
    answers = {i: h.join(ids[i], instance=i, **kw) for i in instances}
    results = {i: a.items[-1] for i, a in answers.items()}
    generation = results[instances[0]].generation_id
    leader = results[instances[0]].leader
    syncs = {
        i: h.sync(
            ids[i],
            generation,
            {m: f"a-{m}".encode() for m in ids.values()} if ids[i] == leader else None,
            instance=i,
        )
        for i in reversed(instances)
    }
    for i, answer in syncs.items():
        assert answer.one.assignment == f"a-{ids[i]}".encode()
    assert h.group().state is GroupState.STABLE
    return ids


def test_static_member_joins_without_member_id_required():
    h = Harness()
    answer = h.join(instance="i-1").one
    assert (answer.error_code, answer.generation_id, answer.leader) == (0, 1, answer.member_id)
    assert h.group().static_members == {"i-1": answer.member_id}


def test_restarted_follower_gets_its_assignment_back_without_a_rebalance():
    h = Harness()
    ids = stable_static_group(h, ["i-1", "i-2"])
    generation = h.group().generation_id
    old = ids["i-2"]
    # i-2 restarts: a new process, an empty member id, the same instance id.
    answer = h.join(instance="i-2").one
    new = answer.member_id
    assert new != old and answer.error_code == 0
    assert (answer.generation_id, answer.leader, answer.skip_assignment) == (
        generation,
        ids["i-1"],
        False,
    )
    assert h.group().state is GroupState.STABLE and h.group().generation_id == generation
    synced = h.sync(new, generation, instance="i-2").one
    assert synced.assignment == f"a-{old}".encode()
    assert h.heartbeat(ids["i-1"], generation) is E.NONE  # the others notice nothing
    # The old incarnation is fenced.
    assert h.heartbeat(old, generation, instance="i-2") is E.FENCED_INSTANCE_ID
    assert h.sync(old, generation, instance="i-2").one.error_code == E.FENCED_INSTANCE_ID
    with pytest.raises(FencedInstanceIdError):
        h.commit({("t", 0): 5}, generation=generation, member_id=old, instance="i-2")
    # The new one's record replaced the old one's.
    member_ids = [m.member_id for m in h.restarted().group().members.values()]
    assert member_ids == [ids["i-1"], new]


def test_restarted_static_leader_is_told_to_skip_the_assignment():
    h = Harness()
    ids = stable_static_group(h, ["i-1", "i-2"])
    answer = h.join(instance="i-1").one
    assert answer.skip_assignment and answer.leader == answer.member_id
    assert [m.group_instance_id for m in answer.members] == ["i-1", "i-2"]
    assert h.sync(answer.member_id, answer.generation_id).one.assignment == (
        f"a-{ids['i-1']}".encode()
    )


def test_a_waiting_old_incarnation_is_answered_fenced():
    h = Harness()
    ids = stable_static_group(h, ["i-1", "i-2"])
    waiting = h.join(ids["i-1"], instance="i-1")  # the leader rejoins: a round, waiting for i-2
    assert h.group().state is GroupState.PREPARING_REBALANCE
    replacement = h.join(instance="i-1")
    assert waiting.one.error_code == E.FENCED_INSTANCE_ID
    h.join(ids["i-2"], instance="i-2")
    assert replacement.one.error_code == 0
    assert replacement.one.leader == replacement.one.member_id  # it kept the leadership


def test_static_member_that_does_not_rejoin_keeps_its_place_until_its_session_expires():
    h = Harness()
    ids = stable_static_group(h, ["i-1", "i-2"])
    waiting = h.join(ids["i-1"], instance="i-1")
    h.tick(SESSION_MS - 1)
    assert not waiting.done and h.group().has(ids["i-2"])
    h.tick(1)  # i-2's session expires: removed, and the round completes without it
    assert not h.group().has(ids["i-2"]) and "i-2" not in h.group().static_members
    assert [m.member_id for m in waiting.one.members] == [ids["i-1"]]


def test_static_member_rejoining_with_protocols_that_change_the_vote_rebalances():
    both = [("range", b""), ("roundrobin", b"")]
    h = Harness()
    ids = stable_static_group(h, ["i-1", "i-2"], protocols=both)
    generation = h.group().generation_id
    # i-2 comes back supporting roundrobin only: the group's protocol must change.
    waiting = h.join(instance="i-2", protocols=[("roundrobin", b"")])
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert not waiting.done and ids["i-2"] not in h.group().members
    h.join(ids["i-1"], instance="i-1", protocols=both)
    assert waiting.one.protocol_name == "roundrobin"
    assert waiting.one.generation_id == generation + 1


def test_unknown_instance_with_a_member_id_is_unknown():
    h = Harness()
    stable_static_group(h, ["i-1"])
    assert h.join("c-1", instance="nobody").one.error_code == E.UNKNOWN_MEMBER_ID
