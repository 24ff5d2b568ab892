"""Admin's consumer-group calls against a real broker: list, describe (members and decoded
assignments), committed offsets, altering them (only while the group is empty), lag, and
deleting groups."""

from __future__ import annotations

from typing import Any

import pytest
from group_testing import GROUP_BROKER, create_topic, member, poll_all, produce, servers

from spark_mq import Admin, OffsetAndMetadata, PartitionLag, TopicPartition
from spark_mq.errors import GroupIdNotFoundError, NonEmptyGroupError

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def broker(start_broker: Any) -> Any:
    return start_broker(overrides=GROUP_BROKER)


@pytest.fixture
def admin(broker: Any) -> Any:
    with Admin(bootstrap_servers=servers(broker)) as a:
        yield a


def test_describe_list_lag_and_offsets_of_a_live_group(broker: Any, admin: Admin) -> None:
    create_topic(broker, "t", 2)
    produce(broker, "t", 10, 2)
    with member(broker, client_id="reader", enable_auto_commit=False) as c:
        c.subscribe(["t"])
        got: list[Any] = []
        poll_all([c], lambda: len(got) >= 20, sink=lambda _, r: got.append(r))
        c.commit({TP0: 4, TP1: 10})
        assert [(g.group_id, g.state, g.protocol_type) for g in admin.list_groups()] == [
            ("g", "Stable", "consumer")
        ]
        assert admin.list_groups(["empty"]) == []
        described = admin.describe_group("g")
        assert (described.state, described.protocol, described.generation_id) == (
            "Stable",
            "range",
            c.group_metadata().generation_id,
        )
        (m,) = described.members
        assert (m.member_id, m.client_id, m.assignment) == (
            c.group_metadata().member_id,
            "reader",
            (TP0, TP1),
        )
        assert admin.list_group_offsets("g") == {
            TP0: OffsetAndMetadata(4),
            TP1: OffsetAndMetadata(10),
        }
        assert admin.group_lag("g") == {
            TP0: PartitionLag(4, 10, 6, m.member_id),
            TP1: PartitionLag(10, 10, 0, m.member_id),
        }
        with pytest.raises(NonEmptyGroupError, match="stop its consumers"):
            admin.alter_group_offsets("g", {TP0: 0})
        with pytest.raises(NonEmptyGroupError):
            admin.delete_groups(["g"])
    described = admin.describe_group("g")
    assert (described.state, described.members) == ("Empty", ())
    assert admin.group_lag("g")[TP0] == PartitionLag(4, 10, 6, None)


def test_alter_offsets_of_an_empty_group_and_delete_it(broker: Any, admin: Admin) -> None:
    create_topic(broker, "t", 2)
    produce(broker, "t", 10, 2)
    admin.alter_group_offsets("fresh", {TP0: 3, ("t", 1): OffsetAndMetadata(5, "m")})
    assert admin.list_group_offsets("fresh") == {
        TP0: OffsetAndMetadata(3),
        TP1: OffsetAndMetadata(5, "m"),
    }
    with member(broker, group="fresh", enable_auto_commit=False) as c:
        c.subscribe(["t"])
        got: list[Any] = []
        poll_all([c], lambda: len(got) >= 12, sink=lambda _, r: got.append(r))
        assert min(r.offset for r in got if r.partition == 0) == 3
        assert min(r.offset for r in got if r.partition == 1) == 5
    admin.delete_groups(["fresh"])
    assert admin.list_group_offsets("fresh") == {}
    assert admin.describe_group("fresh").state == "Dead"
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_groups(["fresh"])
