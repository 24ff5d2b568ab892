"""Which wake-ups make a waiting fetch read its partitions again (handlers/fetch.py).

A waiting fetch is woken whenever one of its partitions is appended to, moves its high
watermark or changes role. It reads again only if that can change its answer: a follower's
fetch (which reads up to the log end) sleeps through a high watermark that another
follower's fetch moved, a consumer's fetch (which reads up to the high watermark) does not,
and a role change ends either. In-process: a BrokerCore over a LogManager in tmp_path whose
high watermark is kept apart from the log end, as a cluster broker's is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import ConnectionSession, RequestContext, Response
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.handlers.errors import answer
from spark_mq.broker.partition import LeaderAndIsr, Partition
from spark_mq.protocol import fetch, produce
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import spec_for_request
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import RequestHeader
from spark_mq.storage.batch_decoder import decode_records
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import encode_batch

FOLLOWERS = (2, 3)


@pytest.fixture
def core(tmp_path: Path) -> Iterator[BrokerCore]:
    root = tmp_path / "mq"
    logs = LogManager(root, high_watermark_follows_log_end=False)
    made = BrokerCore(
        ServerConfig.from_properties({"log.dirs": str(root)}), logs, BrokerMeta.take_over(root)
    )
    yield made
    made.close()
    logs.close()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The start offset of every PartitionLog.read (the real read runs)."""
    seen: list[int] = []
    real = PartitionLog.read

    def counted(self: PartitionLog, start_offset: int, *args: Any, **kwargs: Any) -> Any:
        seen.append(start_offset)
        return real(self, start_offset, *args, **kwargs)

    monkeypatch.setattr(PartitionLog, "read", counted)
    return seen


async def call(core: BrokerCore, request: Any, records: bytes = b"", *, broker: int = -1) -> Any:
    spec = spec_for_request(request)
    ctx = RequestContext(
        core,
        RequestHeader(spec.key, 0, 1, "test"),
        BrokerAddress("127.0.0.1", 9092),
        "test",
        inter_broker=broker >= 0,
        session=ConnectionSession(broker_id=broker if broker >= 0 else None),
    )
    return await answer(spec, HANDLERS[spec.key], ctx, request, memoryview(records))


async def append(core: BrokerCore, *values: bytes) -> None:
    batch = encode_batch(pa.array(list(values)))
    request = produce.ProduceRequest(
        1, 1000, [produce.ProduceTopic("t", [produce.ProducePartition(0, len(batch))])]
    )
    response = await call(core, request, batch)
    assert response.body.topics[0].partitions[0].error_code == ErrorCode.NONE


def fetch_from(
    offset: int, *, replica: int = -1, wait_ms: int = 0, isolation: int = fetch.READ_UNCOMMITTED
) -> fetch.FetchRequest:
    return fetch.FetchRequest(
        max_wait_ms=wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[fetch.FetchTopic("t", [fetch.FetchPartition(0, offset, 1 << 20)])],
        isolation_level=isolation,
        replica_id=replica,
    )


async def led_partition(core: BrokerCore) -> Partition:
    """Partition t-0 with three records, led by this broker with followers 2 and 3 in sync,
    its high watermark still at 0 (no follower has fetched yet)."""
    core.replicas.auto_create("t")
    part = core.replicas.partition("t", 0)
    me = part.node_id
    everyone = (me, *FOLLOWERS)
    part.make_leader(LeaderAndIsr(me, part.leader_epoch + 1, everyone, everyone, 1))
    await append(core, b"a", b"b", b"c")
    assert (part.log_end_offset, part.high_watermark) == (3, 0)
    return part


def values_of(response: Response, start: int) -> list[bytes]:
    data = b"".join(r if isinstance(r, bytes) else r.read() for r in response.records)
    response.close()
    return list(decode_records(data, start_offset=start).column("value").to_pylist())


async def settle() -> None:
    """Let every woken task run (a wake-up is a future resolved on this loop)."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_follower_fetch_sleeps_through_a_high_watermark_another_follower_moved(
    core: BrokerCore, reads: list[int]
) -> None:
    async def scenario() -> None:
        part = await led_partition(core)
        reads.clear()
        waiting = asyncio.create_task(
            call(core, fetch_from(3, replica=2, wait_ms=600_000), broker=2)
        )
        await settle()
        assert not waiting.done() and reads == [3]
        # Follower 3 catches up: the high watermark moves to 3 and wakes follower 2's fetch,
        # whose log end is still the leader's: nothing to read again.
        done = await call(core, fetch_from(3, replica=3), broker=3)
        assert done.body.topics[0].partitions[0].high_watermark == 3
        await settle()
        assert part.high_watermark == 3
        assert not waiting.done()
        assert reads == [3, 3], "the woken follower fetch read its partition again"
        # An append is what it waits for: it reads once more and answers with the record.
        await append(core, b"d")
        response = await asyncio.wait_for(waiting, 5)
        assert reads == [3, 3, 3]
        assert values_of(response, 3) == [b"d"]

    asyncio.run(scenario())


@pytest.mark.parametrize("isolation", [fetch.READ_UNCOMMITTED, fetch.READ_COMMITTED])
def test_a_consumer_fetch_wakes_when_the_high_watermark_moves(
    core: BrokerCore, isolation: int
) -> None:
    """Both bounds: the high watermark (read_uncommitted) and the last stable offset it
    caps (read_committed, no transaction open)."""

    async def scenario() -> None:
        await led_partition(core)
        request = fetch_from(0, wait_ms=600_000, isolation=isolation)
        waiting = asyncio.create_task(call(core, request))
        await settle()
        assert not waiting.done()  # nothing below the high watermark yet
        for follower in FOLLOWERS:
            await call(core, fetch_from(3, replica=follower), broker=follower)
        response = await asyncio.wait_for(waiting, 5)
        partition = response.body.topics[0].partitions[0]
        assert partition.high_watermark == 3
        assert values_of(response, 0) == [b"a", b"b", b"c"]

    asyncio.run(scenario())


def test_a_role_change_ends_a_waiting_follower_fetch(core: BrokerCore) -> None:
    async def scenario() -> None:
        part = await led_partition(core)
        waiting = asyncio.create_task(
            call(core, fetch_from(3, replica=2, wait_ms=600_000), broker=2)
        )
        await settle()
        assert not waiting.done()
        me = part.node_id
        everyone = (me, *FOLLOWERS)
        part.make_follower(LeaderAndIsr(2, part.leader_epoch + 1, everyone, everyone, 2))
        core.replicas.notify([part])
        response = await asyncio.wait_for(waiting, 5)
        partition = response.body.topics[0].partitions[0]
        assert partition.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    asyncio.run(scenario())
