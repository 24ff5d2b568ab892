"""Fetch responses to records and positions: positions follow batch headers across gaps
(compaction), control batches and aborted transactions; stale data is dropped."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ConsumerConfig
from spark_mq.client.connection import Response
from spark_mq.client.fetcher import CompletedFetch, Fetcher, end_of_last_batch
from spark_mq.client.records import TopicPartition
from spark_mq.client.subscription_state import SubscriptionState
from spark_mq.errors import OffsetOutOfRangeError
from spark_mq.protocol.fetch import (
    AbortedTransaction,
    FetchPartitionResponse,
    FetchResponse,
    FetchTopicResponse,
)
from spark_mq.storage.record_batch import ControlType, encode_batch, encode_control_batch

TP = TopicPartition("t", 0)


def batch(base: int, values: list[bytes], **kw: object) -> bytes:
    return encode_batch(pa.array(values), base_offset=base, now_ms=1, **kw)  # type: ignore[arg-type]


def test_end_of_last_batch_uses_headers_not_records() -> None:
    # A compacted batch spanning offsets 10..19 that kept only two records (deltas 0 and 3).
    compacted = batch(10, [b"a", b"b"], offset_delta=[0, 3], last_offset_delta=9)
    # An empty batch (every record compacted away) spanning 20..24.
    emptied = batch(20, [], last_offset_delta=4)
    data = memoryview(compacted + emptied)
    assert end_of_last_batch(data) == 25
    # A trailing partial batch (a fetch cut at its size limit) is not counted.
    assert end_of_last_batch(memoryview(compacted + emptied[:30])) == 20
    assert end_of_last_batch(memoryview(compacted[:40])) is None


def test_completed_fetch_positions_across_gaps() -> None:
    data = batch(10, [b"a", b"b"], offset_delta=[0, 3], last_offset_delta=9) + batch(
        20, [b"c"], last_offset_delta=4
    )
    fetch = CompletedFetch(
        TP, 10, memoryview(data), end_of_last_batch(memoryview(data)) or -1, None
    )
    assert fetch.expected_position() == 10
    table, position, used_up = fetch.take(1, verify_crc=True)
    assert table.column("offset").to_pylist() == [10] and position == 13 and not used_up
    assert fetch.expected_position() == 13
    table, position, used_up = fetch.take(None, verify_crc=True)
    assert table.column("offset").to_pylist() == [13, 20]
    assert position == 25 and used_up  # the end of the last batch, not last record + 1


def test_records_below_the_fetch_offset_are_cut() -> None:
    data = batch(0, [b"a", b"b", b"c"])
    fetch = CompletedFetch(TP, 2, memoryview(data), 3, None)
    table, position, _ = fetch.take(None, verify_crc=True)
    assert table.column("value").to_pylist() == [b"c"] and position == 3


def test_control_batches_and_aborted_transactions_are_dropped() -> None:
    pid = 7
    aborted = batch(
        0, [b"x", b"y"], producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    marker = encode_control_batch(
        ControlType.ABORT, producer_id=pid, producer_epoch=0, coordinator_epoch=0, base_offset=2
    )
    plain = batch(3, [b"z"])
    data = memoryview(aborted + marker + plain)
    fetch = CompletedFetch(TP, 0, data, 4, [AbortedTransaction(pid, 0)])
    table, position, used_up = fetch.take(None, verify_crc=True)
    assert table.column("value").to_pylist() == [b"z"] and position == 4 and used_up
    # read_uncommitted (no aborted list): the aborted records are visible, the marker is not.
    fetch = CompletedFetch(TP, 0, data, 4, None)
    table, _, _ = fetch.take(None, verify_crc=True)
    assert table.column("value").to_pylist() == [b"x", b"y", b"z"]


def test_only_control_batches_advance_the_position_with_no_records() -> None:
    marker = encode_control_batch(
        ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, base_offset=5
    )
    fetch = CompletedFetch(TP, 5, memoryview(marker), 6, None)
    table, position, used_up = fetch.take(10, verify_crc=True)
    assert table.num_rows == 0 and position == 6 and used_up


# -- the Fetcher with hand-made responses (no broker: response handling only) ---------------


def _fetcher(**config: object) -> tuple[Fetcher, SubscriptionState]:
    cfg = ConsumerConfig.from_properties({"path": "/unused", **config})
    cluster = Cluster(cfg, ensure_broker=lambda *a, **k: None)  # type: ignore[arg-type]
    subs = SubscriptionState()
    subs.assign_from_user([TP])
    return Fetcher(cfg, cluster, subs), subs


def _response(data: bytes, *, error_code: int = 0, hw: int = 100) -> Response:
    part = FetchPartitionResponse(0, error_code, hw, hw, 0, len(data))
    body = FetchResponse(0, [FetchTopicResponse("t", [part])])
    return Response(1, body, memoryview(data), None)


def test_fetcher_buffers_then_hands_out_and_advances() -> None:
    fetcher, subs = _fetcher()
    subs.seek(TP, 0)
    fetcher._in_flight[0] = {TP: 0}
    fetcher._handle(0, _response(batch(0, [b"a", b"b"]) + batch(2, [b"c"])))
    assert fetcher._next_fetch_offset(TP) == 3  # the next fetch may go out before decoding
    ((tp, table),) = fetcher.collect(2)
    assert tp == TP and table.column("value").to_pylist() == [b"a", b"b"]
    assert subs.position(TP) == 2
    ((_, table),) = fetcher.collect(None)
    assert table.column("offset").to_pylist() == [2] and subs.position(TP) == 3
    assert subs.state(TP).high_watermark == 100


def test_a_seek_makes_buffered_and_in_flight_data_stale() -> None:
    fetcher, subs = _fetcher()
    subs.seek(TP, 0)
    fetcher._in_flight[0] = {TP: 0}
    fetcher._handle(0, _response(batch(0, [b"a"])))
    subs.seek(TP, 50)  # what Consumer.seek does, without dropping the buffer
    assert fetcher.collect(None) == []
    assert subs.position(TP) == 50
    fetcher._in_flight[0] = {TP: 0}  # a response to a fetch sent before the seek
    fetcher._handle(0, _response(batch(0, [b"a"])))
    assert not fetcher.has_buffered()


def test_out_of_range_resets_or_raises() -> None:
    fetcher, subs = _fetcher(auto_offset_reset="earliest")
    subs.seek(TP, 500)
    fetcher._in_flight[0] = {TP: 500}
    fetcher._handle(0, _response(b"", error_code=1))
    assert subs.position(TP) is None  # auto.offset.reset picks a new one at the next poll

    fetcher, subs = _fetcher(auto_offset_reset="none")
    subs.seek(TP, 500)
    fetcher._in_flight[0] = {TP: 500}
    fetcher._handle(0, _response(b"", error_code=1))
    with pytest.raises(OffsetOutOfRangeError) as info:
        fetcher.collect(None)
    assert (info.value.topic, info.value.partition, info.value.offset) == ("t", 0, 500)


def test_an_error_received_before_a_seek_is_not_raised_after_it() -> None:
    # A consumer raises out-of-range at offset 5; a second fetch at 5 was already out and
    # its answer (out of range again) comes in while the application asks for the log start
    # before seeking there. Raising that answer after the seek would blame the new position.
    fetcher, subs = _fetcher(auto_offset_reset="none")
    subs.seek(TP, 5)
    for _ in range(2):
        fetcher._in_flight[0] = {TP: 5}
        fetcher._handle(0, _response(b"", error_code=1))
    with pytest.raises(OffsetOutOfRangeError):
        fetcher.collect(None)
    subs.seek(TP, 9)
    assert fetcher.collect(None) == []  # the second answer was about offset 5: dropped
    fetcher._in_flight[0] = {TP: 9}
    fetcher._handle(0, _response(batch(9, [b"j"])))
    ((_, table),) = fetcher.collect(None)
    assert table.column("offset").to_pylist() == [9]


def test_an_error_past_buffered_records_comes_after_them() -> None:
    # Records at 0 are buffered and the pipelined fetch at 1 fails: the records are returned
    # first, and the error only once the position has reached it.
    fetcher, subs = _fetcher(auto_offset_reset="none")
    subs.seek(TP, 0)
    fetcher._in_flight[0] = {TP: 0}
    fetcher._handle(0, _response(batch(0, [b"a"])))
    fetcher._in_flight[0] = {TP: 1}
    fetcher._handle(0, _response(b"", error_code=1))
    ((_, table),) = fetcher.collect(None)
    assert table.column("offset").to_pylist() == [0] and subs.position(TP) == 1
    fetcher._in_flight[0] = {TP: 1}  # the fetch from the position, sent again
    fetcher._handle(0, _response(b"", error_code=1))
    with pytest.raises(OffsetOutOfRangeError) as info:
        fetcher.collect(None)
    assert info.value.offset == 1


def test_paused_partitions_keep_their_position() -> None:
    fetcher, subs = _fetcher()
    subs.seek(TP, 0)
    fetcher._in_flight[0] = {TP: 0}
    fetcher._handle(0, _response(batch(0, [b"a"])))
    subs.pause(TP)
    assert fetcher.collect(None) == [] and subs.position(TP) == 0
