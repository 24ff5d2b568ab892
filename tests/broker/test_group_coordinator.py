"""DescribeGroups, ListGroups and DeleteGroups of the coordinator."""

from __future__ import annotations

from group_harness import Harness

from spark_mq.broker.group.records import GroupKey, OffsetKey, decode_key
from spark_mq.protocol.error_codes import ErrorCode as E


def test_describe_a_stable_group():
    h = Harness()
    ids = h.stable_group(2)
    (described,) = h.coordinator.describe_groups(["g"]).groups
    assert (described.error_code, described.group_state, described.protocol_type) == (
        0,
        "Stable",
        "consumer",
    )
    assert (described.protocol_data, described.generation_id) == ("range", 2)
    assert [(m.member_id, m.member_assignment, m.member_metadata) for m in described.members] == [
        (m, f"a-{m}".encode(), b"sub") for m in ids
    ]
    assert {(m.client_id, m.client_host) for m in described.members} == {("c", "/127.0.0.1")}


def test_describe_while_rebalancing_hides_metadata_and_unknown_groups_are_dead():
    h = Harness()
    ids = h.stable_group(2)
    h.join(ids[0])
    rebalancing, missing, invalid = h.coordinator.describe_groups(["g", "nope", ""]).groups
    assert (rebalancing.group_state, rebalancing.protocol_data) == ("PreparingRebalance", "")
    assert all(m.member_assignment == b"" for m in rebalancing.members)
    assert (missing.error_code, missing.group_state, missing.members) == (0, "Dead", [])
    assert invalid.error_code == E.INVALID_GROUP_ID


def test_list_groups_with_a_state_filter():
    h = Harness()
    h.stable_group(1, group="a")
    h.commit({("t", 0): 1}, group="b")
    listed = h.coordinator.list_groups().groups
    assert [(g.group_id, g.protocol_type, g.group_state) for g in listed] == [
        ("a", "consumer", "Stable"),
        ("b", "", "Empty"),
    ]
    assert [g.group_id for g in h.coordinator.list_groups(["empty"]).groups] == ["b"]
    assert h.coordinator.list_groups(["Dead", "whatever"]).groups == []


def test_delete_groups():
    h = Harness()
    h.stable_group(1, group="busy")
    h.commit({("t", 0): 1, ("t", 1): 2}, group="idle")
    results = h.coordinator.delete_groups(["busy", "idle", "nope", ""], now_ms=h.now)
    assert [(r.group_id, r.error_code) for r in results] == [
        ("busy", E.NON_EMPTY_GROUP),
        ("idle", 0),
        ("nope", E.GROUP_ID_NOT_FOUND),
        ("", E.INVALID_GROUP_ID),
    ]
    assert "stop its consumers" in results[0].error_message
    group_id, records = h.store.appends[-1]
    assert group_id == "idle" and all(v is None for _, v in records)
    assert {decode_key(k) for k, _ in records} == {
        OffsetKey("idle", "t", 0),
        OffsetKey("idle", "t", 1),
        GroupKey("idle"),
    }
    assert "idle" not in h.coordinator.groups
    assert h.coordinator.fetch_offsets("idle") == []
    assert "idle" not in h.restarted().coordinator.groups


def test_a_deleted_group_can_be_joined_again():
    h = Harness()
    ids = h.stable_group(1)
    h.leave(ids[0])
    assert h.coordinator.delete_groups(["g"], now_ms=h.now)[0].error_code == 0
    assert h.heartbeat(ids[0], 2) is E.UNKNOWN_MEMBER_ID
    _, answers = h.new_member()
    assert answers.one.generation_id == 1


def test_module_examples_run():
    import doctest

    from spark_mq.broker.group import config, coordinator

    for module in (config, coordinator):
        assert doctest.testmod(module).failed == 0, module.__name__
