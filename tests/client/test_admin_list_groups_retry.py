"""``Admin.list_groups`` asks a broker again while it answers COORDINATOR_LOAD_IN_PROGRESS
(a coordinator loading a ``__consumer_offsets`` partition it was just elected for), as
Kafka's admin client does, and raises what is not retriable. A scripted broker answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from group_peer import ScriptedBroker, scripted_broker

from spark_mq import Admin
from spark_mq.errors import InvalidGroupIdError
from spark_mq.protocol.groups import ListedGroup, ListGroupsRequest, ListGroupsResponse


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[ScriptedBroker]:
    yield from scripted_broker(tmp_path, {})


def test_list_groups_waits_for_a_loading_coordinator(broker: ScriptedBroker) -> None:
    answers = iter(
        [
            ListGroupsResponse(14, []),
            ListGroupsResponse(14, []),
            ListGroupsResponse(0, [ListedGroup("g", "consumer", "Stable")]),
        ]
    )

    def handler(request: Any) -> Any:
        assert isinstance(request, ListGroupsRequest)
        return next(answers)

    broker.handler = handler
    with Admin(bootstrap_servers=broker.address, config={"retry.backoff.ms": 10}) as admin:
        listed = admin.list_groups()
    assert [g.group_id for g in listed] == ["g"]
    assert len(broker.of(ListGroupsRequest)) == 3


def test_list_groups_raises_what_is_not_retriable(broker: ScriptedBroker) -> None:
    broker.handler = lambda request: ListGroupsResponse(24, [])  # INVALID_GROUP_ID
    with (
        Admin(bootstrap_servers=broker.address, config={"retry.backoff.ms": 10}) as admin,
        pytest.raises(InvalidGroupIdError),
    ):
        admin.list_groups()
    assert len(broker.of(ListGroupsRequest)) == 1
