"""Request handlers in-process: a BrokerCore over a LogManager in tmp_path, no sockets.

These cover what is awkward through a broker process: transactions written straight into
the log (the LSO and aborted transactions of read_committed), leader epochs, the high
watermark, and waking long polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.handlers.errors import answer
from spark_mq.broker.handlers.inter_broker import guard
from spark_mq.broker.handlers.produce import INLINE_APPEND_MAX_BYTES
from spark_mq.protocol import fetch, offsets, produce, transactions
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import INTER_BROKER_APIS, spec_for_request
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import RequestHeader
from spark_mq.storage.batch_decoder import decode_records, iter_batches
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import ControlType, encode_batch


@pytest.fixture
def core(tmp_path: Path) -> Iterator[BrokerCore]:
    root = tmp_path / "mq"
    logs = LogManager(root)
    config = ServerConfig.from_properties({"log.dirs": str(root)})
    BrokerMeta.take_over(root)
    core = BrokerCore(config, logs, BrokerMeta.take_over(root))  # epoch 2
    yield core
    core.close()
    logs.close()


async def call(
    core: BrokerCore, request: Any, records: bytes = b"", *, broker: bool = False
) -> Response | None:
    spec = spec_for_request(request)
    ctx = RequestContext(
        core,
        RequestHeader(spec.key, 0, 1, "test"),
        BrokerAddress("127.0.0.1", 9092),
        "test",
        inter_broker=broker,
    )
    # Through the dispatcher, which answers what a handler raises, as the connection does.
    return await answer(spec, HANDLERS[spec.key], ctx, request, memoryview(records))


async def produce_to(core: BrokerCore, topic: str, records: bytes, acks: int = 1) -> Any:
    request = produce.ProduceRequest(
        acks, 1000, [produce.ProduceTopic(topic, [produce.ProducePartition(0, len(records))])]
    )
    return await call(core, request, records)


def fetch_request(topic: str, offset: int = 0, isolation: int = 0, **kw: int) -> fetch.FetchRequest:
    params = {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24, **kw}
    return fetch.FetchRequest(
        topics=[fetch.FetchTopic(topic, [fetch.FetchPartition(0, offset, 1 << 24)])],
        isolation_level=isolation,
        **params,
    )


def records_of(response: Response) -> bytes:
    out = b"".join(r.read() if not isinstance(r, bytes) else r for r in response.records)
    response.close()
    return out


def list_latest(core: BrokerCore, topic: str, isolation: int) -> int:
    request = offsets.ListOffsetsRequest(
        [offsets.ListOffsetsTopic(topic, [offsets.ListOffsetsPartition(0, -1)])], isolation
    )
    response = asyncio.run(call(core, request))
    assert response is not None
    return int(response.body.topics[0].partitions[0].offset)


def test_append_stamps_the_leader_epoch_and_moves_the_high_watermark(core):
    response = asyncio.run(produce_to(core, "t", encode_batch(pa.array([b"a", b"b"]))))
    assert response.body.topics[0].partitions[0].error_code == 0
    part = core.replicas.partition("t", 0)
    assert part.leader_epoch == core.epoch == 2
    assert part.high_watermark == part.log_end_offset == 2
    fetched = asyncio.run(call(core, fetch_request("t")))
    headers = [h for h, _ in iter_batches(records_of(fetched))]
    assert [h.partition_leader_epoch for h in headers] == [2]


def test_large_compressed_requests_append_on_the_executor_with_the_same_result(core):
    rng = np.random.default_rng(3)  # incompressible, so the compressed request stays large
    values = [rng.bytes(1000) for _ in range(INLINE_APPEND_MAX_BYTES // 1000 + 10)]
    data = encode_batch(pa.array(values), codec="zstd")
    assert len(data) >= INLINE_APPEND_MAX_BYTES
    response = asyncio.run(produce_to(core, "big", data))
    assert response.body.topics[0].partitions[0].base_offset == 0
    assert core.replicas.partition("big", 0).high_watermark == len(values)


def test_read_committed_stops_at_the_last_stable_offset(core):
    asyncio.run(produce_to(core, "tx", encode_batch(pa.array([b"plain"]))))
    log = core.replicas.partition("tx", 0).log
    txn = encode_batch(
        pa.array([b"in-txn"]),
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    log.append(txn)
    assert list_latest(core, "tx", fetch.READ_UNCOMMITTED) == 2
    assert list_latest(core, "tx", fetch.READ_COMMITTED) == 1  # the LSO
    committed = asyncio.run(call(core, fetch_request("tx", isolation=fetch.READ_COMMITTED)))
    part = committed.body.topics[0].partitions[0]
    assert (part.high_watermark, part.last_stable_offset) == (2, 1)
    assert decode_records(records_of(committed)).column("value").to_pylist() == [b"plain"]
    log.append_transaction_marker(
        ControlType.ABORT, producer_id=9, producer_epoch=0, coordinator_epoch=0
    )
    assert list_latest(core, "tx", fetch.READ_COMMITTED) == 3
    after = asyncio.run(call(core, fetch_request("tx", isolation=fetch.READ_COMMITTED)))
    part = after.body.topics[0].partitions[0]
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(9, 1)]
    assert records_of(after)
    uncommitted = asyncio.run(call(core, fetch_request("tx")))
    assert uncommitted.body.topics[0].partitions[0].aborted_transactions is None
    uncommitted.close()


def test_leader_epoch_fencing(core):
    asyncio.run(produce_to(core, "e", encode_batch(pa.array([b"v"]))))
    for epoch, code in [
        (1, ErrorCode.FENCED_LEADER_EPOCH),
        (3, ErrorCode.UNKNOWN_LEADER_EPOCH),
        (2, ErrorCode.NONE),
        (-1, ErrorCode.NONE),
    ]:
        request = fetch.FetchRequest(
            0, 0, 1 << 20, [fetch.FetchTopic("e", [fetch.FetchPartition(0, 0, 1 << 20, epoch)])]
        )
        response = asyncio.run(call(core, request))
        assert response.body.topics[0].partitions[0].error_code == code
        response.close()


def test_long_poll_wakes_on_append_and_on_shutdown(core):
    async def scenario() -> None:
        await produce_to(core, "p", encode_batch(pa.array([b"first"])))
        waiting = asyncio.create_task(
            call(core, fetch_request("p", offset=1, max_wait_ms=600_000, min_bytes=1))
        )
        await asyncio.sleep(0)
        assert not waiting.done()
        await produce_to(core, "p", encode_batch(pa.array([b"second"])))
        response = await waiting
        values = decode_records(records_of(response), start_offset=1).column("value")
        assert values.to_pylist() == [b"second"]

        idle = asyncio.create_task(
            call(core, fetch_request("p", offset=2, max_wait_ms=600_000, min_bytes=1))
        )
        await asyncio.sleep(0)
        core.replicas.wake_all()
        response = await idle
        assert response.body.topics[0].partitions[0].records_size == 0

    asyncio.run(scenario())


def test_acks_zero_answers_nothing_unless_it_failed(core):
    ok = asyncio.run(produce_to(core, "z", encode_batch(pa.array([b"v"])), acks=0))
    assert ok is None
    failed = asyncio.run(produce_to(core, "z", b"\x00" * 70, acks=0))
    assert failed is not None and failed.silent and failed.close_connection


def test_response_close_releases_file_ranges(core):
    asyncio.run(produce_to(core, "f", encode_batch(pa.array([b"v"]))))
    response = asyncio.run(call(core, fetch_request("f")))
    ranges = list(response.records)
    assert ranges
    response.close()
    assert all(r._fd < 0 for r in ranges)


def _markers_request(
    topic: str, *, producer_epoch: int = 0, coordinator_epoch: int = 2
) -> transactions.WriteTxnMarkersRequest:
    marker = transactions.WritableTxnMarker(
        9, producer_epoch, True, [transactions.TxnTopic(topic, [0])], coordinator_epoch
    )
    return transactions.WriteTxnMarkersRequest([marker])


def _marker_codes(response: Response | None) -> list[int]:
    assert response is not None
    return [q.error_code for t in response.body.markers[0].topics for q in t.partitions]


def test_write_txn_markers_refuses_clients_and_serves_brokers(core):
    """WriteTxnMarkers is an inter-broker API: a client's request changes nothing; a
    broker's (``inter_broker``, which no listener sets yet) writes the marker once."""
    asyncio.run(produce_to(core, "tx", encode_batch(pa.array([b"plain"]))))
    log = core.replicas.partition("tx", 0).log
    log.append(
        encode_batch(
            pa.array([b"in-txn"]),
            producer_id=9,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
    )
    refused = asyncio.run(call(core, _markers_request("tx")))
    assert _marker_codes(refused) == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert log.log_end_offset == 2
    assert list_latest(core, "tx", fetch.READ_COMMITTED) == 1

    assert _marker_codes(asyncio.run(call(core, _markers_request("tx"), broker=True))) == [0]
    assert log.log_end_offset == 3
    assert list_latest(core, "tx", fetch.READ_COMMITTED) == 3
    # A rewrite of the same decision writes nothing.
    assert _marker_codes(asyncio.run(call(core, _markers_request("tx"), broker=True))) == [0]
    assert log.log_end_offset == 3
    older = _markers_request("tx", producer_epoch=1, coordinator_epoch=1)
    assert _marker_codes(asyncio.run(call(core, older, broker=True))) == [
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    ]
    missing = _markers_request("missing")
    assert _marker_codes(asyncio.run(call(core, missing, broker=True))) == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    ]


def test_every_inter_broker_api_needs_a_refusal():
    served = {api: HANDLERS[api] for api in INTER_BROKER_APIS if api in HANDLERS}
    with pytest.raises(RuntimeError, match="is an inter-broker API but has no refusal"):
        guard(served, {})
