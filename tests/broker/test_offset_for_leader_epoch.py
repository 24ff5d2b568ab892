"""OffsetForLeaderEpoch (23) in-process: the leader answers from its leader-epoch cache,
fences an older or newer current leader epoch, and answers each partition on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import RequestContext
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.handlers.errors import answer
from spark_mq.protocol import produce
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import spec_for_request
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import RequestHeader
from spark_mq.protocol.replication import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import encode_batch


@pytest.fixture
def core(tmp_path: Path) -> Iterator[BrokerCore]:
    root = tmp_path / "mq"
    logs = LogManager(root)
    made = BrokerCore(
        ServerConfig.from_properties({"log.dirs": str(root)}), logs, BrokerMeta.take_over(root)
    )
    yield made
    made.close()
    logs.close()


def _call(core: BrokerCore, request: Any, records: bytes = b"") -> Any:
    spec = spec_for_request(request)
    ctx = RequestContext(
        core, RequestHeader(spec.key, 0, 1, "test"), BrokerAddress("127.0.0.1", 9092), "test"
    )
    response = asyncio.run(answer(spec, HANDLERS[spec.key], ctx, request, memoryview(records)))
    assert response is not None
    return response.body


def _ask(core: BrokerCore, *parts: tuple[str, int, int, int]) -> list[tuple[int, int, int]]:
    """(error code, leader epoch, end offset) per (topic, partition, epoch, current epoch)."""
    topics: dict[str, list[OffsetForLeaderPartition]] = {}
    for topic, partition, epoch, current in parts:
        topics.setdefault(topic, []).append(OffsetForLeaderPartition(partition, epoch, current))
    request = OffsetForLeaderEpochRequest(
        [OffsetForLeaderTopic(t, ps) for t, ps in topics.items()], replica_id=2
    )
    body = _call(core, request)
    return [(p.error_code, p.leader_epoch, p.end_offset) for t in body.topics for p in t.partitions]


def test_the_leader_answers_where_an_epoch_ends_and_fences_stale_epochs(core: BrokerCore) -> None:
    batch = encode_batch(pa.array([b"a", b"b", b"c"]))
    request = produce.ProduceRequest(
        1, 1000, [produce.ProduceTopic("t", [produce.ProducePartition(0, len(batch))])]
    )
    assert _call(core, request, batch).topics[0].partitions[0].error_code == 0
    epoch = core.replicas.partition("t", 0).leader_epoch
    log = core.replicas.partition("t", 0).log

    answers = _ask(
        core,
        ("t", 0, epoch, -1),  # the latest epoch ends at the log end
        ("t", 0, epoch + 5, epoch),  # a later epoch: the latest the leader knows
        ("t", 0, epoch - 1, -1),  # before the first epoch: ends where that one starts
        ("t", 0, epoch, epoch - 1),  # the asker's leader is older: fenced
        ("t", 0, epoch, epoch + 1),  # the asker knows a newer leader
        ("t", 7, epoch, -1),  # no such partition
        ("missing", 0, epoch, -1),
    )
    expected = [log.end_offset_for_epoch(e) for e in (epoch, epoch + 5, epoch - 1)]
    assert answers[:3] == [(0, e.leader_epoch, e.end_offset) for e in expected]
    assert answers[0] == (0, epoch, 3)
    assert answers[2][2] == 0
    assert [a[0] for a in answers[3:]] == [
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
