"""answers_by_entry: a Produce response is read by position, one answer per request entry."""

from __future__ import annotations

from spark_mq.protocol.produce import (
    ProducePartition,
    ProducePartitionResponse,
    ProduceResponse,
    ProduceTopic,
    ProduceTopicResponse,
    answers_by_entry,
)

REQUEST = [
    ProduceTopic("t", [ProducePartition(0, 10), ProducePartition(0, 20), ProducePartition(1, 5)]),
    ProduceTopic("u", [ProducePartition(0, 7)]),
]


def _answer(partition: int, code: int, offset: int = -1) -> ProducePartitionResponse:
    return ProducePartitionResponse(partition, code, offset)


def test_a_partition_named_twice_gets_both_of_its_answers_in_order() -> None:
    first, second, third, fourth = (
        _answer(0, 10),
        _answer(0, 0, 5),
        _answer(1, 0, 0),
        _answer(0, 0, 9),
    )
    response = ProduceResponse(
        [ProduceTopicResponse("t", [first, second, third]), ProduceTopicResponse("u", [fourth])]
    )
    assert answers_by_entry(REQUEST, response) == [first, second, third, fourth]


def test_answers_out_of_place_or_missing_are_none() -> None:
    # A broker that merged the two entries of partition 0, answered the wrong partition at a
    # place, and left out the second topic.
    response = ProduceResponse([ProduceTopicResponse("t", [_answer(0, 0, 5), _answer(0, 0, 6)])])
    assert answers_by_entry(REQUEST, response) == [_answer(0, 0, 5), _answer(0, 0, 6), None, None]
    renamed = ProduceResponse(
        [ProduceTopicResponse("x", [_answer(0, 0)] * 3), ProduceTopicResponse("u", [_answer(1, 0)])]
    )
    assert answers_by_entry(REQUEST, renamed) == [None, None, None, None]
