"""Kafka's reassignment JSON (kafka-reassign-partitions.sh) read into a plan, written back,
and the request and errors of the admin client's reassignment calls."""

from __future__ import annotations

import json

import pytest

from spark_mq import TopicPartition
from spark_mq.client.reassignments import (
    alter_request,
    parse_plan_json,
    parse_topics_to_move_json,
    plan_json,
    raise_for_alter,
)
from spark_mq.errors import InvalidReplicaAssignmentError, UsageError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.reassignment import (
    AlterPartitionReassignmentsResponse,
    ReassignablePartition,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)

KAFKA_PLAN = (
    '{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3],'
    '"log_dirs":["any","any"]},{"topic":"orders","partition":1,"replicas":[3,1]}]}'
)


def test_kafkas_plan_is_read_and_written_back() -> None:
    plan = parse_plan_json(KAFKA_PLAN)
    assert plan == {TopicPartition("orders", 0): [2, 3], TopicPartition("orders", 1): [3, 1]}
    again = json.loads(plan_json(plan))
    assert again["version"] == 1
    assert parse_plan_json(plan_json(plan)) == plan


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{", "not JSON"),
        ('{"version":2,"partitions":[]}', '"version": 1'),
        ('{"version":1,"partitions":[]}', "non-empty"),
        ('{"version":1,"partitions":[{"partition":0,"replicas":[1]}]}', '"topic"'),
        ('{"version":1,"partitions":[{"topic":"t","partition":-1,"replicas":[1]}]}', "partition"),
        ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":"1,2"}]}', "list of"),
        ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[true]}]}', "list of"),
        (
            '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],'
            '"log_dirs":["/data"]}]}',
            "log_dirs",
        ),
        (
            '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
            '{"topic":"t","partition":0,"replicas":[2]}]}',
            "named twice",
        ),
    ],
)
def test_bad_plans_name_what_is_wrong(text: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_plan_json(text, "plan.json")


def test_topics_to_move() -> None:
    assert parse_topics_to_move_json('{"topics":[{"topic":"a"},{"topic":"b"}],"version":1}') == [
        "a",
        "b",
    ]
    with pytest.raises(UsageError, match="topics"):
        parse_topics_to_move_json('{"topics":[]}')


def test_the_request_groups_partitions_by_topic_and_none_cancels() -> None:
    request = alter_request({("b", 0): [1], TopicPartition("a", 1): None}, 5000)
    assert [t.name for t in request.topics] == ["a", "b"]
    assert request.topics[0].partitions == [ReassignablePartition(1, None)]
    assert request.topics[1].partitions == [ReassignablePartition(0, [1])]
    with pytest.raises(UsageError, match="names no partition"):
        alter_request({}, 5000)
    with pytest.raises(UsageError, match="list of broker ids"):
        alter_request({("a", 0): "1,2"}, 5000)  # type: ignore[dict-item]


def test_a_refused_partition_raises_its_typed_error_naming_every_refusal() -> None:
    response = AlterPartitionReassignmentsResponse(
        0,
        [
            ReassignableTopicResponse(
                "t",
                [
                    ReassignablePartitionResponse(0, 0),
                    ReassignablePartitionResponse(1, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "dup"),
                ],
            )
        ],
    )
    with pytest.raises(InvalidReplicaAssignmentError, match=r"t-1: dup.*1 other\(s\) started"):
        raise_for_alter(response)
    raise_for_alter(AlterPartitionReassignmentsResponse(0, []))
