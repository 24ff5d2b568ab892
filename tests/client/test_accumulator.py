"""The record accumulator: batching by size, linger on an injected clock, back-pressure,
retry ordering, and header stamping."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from spark_mq.client.accumulator import (
    ProducerBatch,
    RecordAccumulator,
    record_size,
    stamp_header,
)
from spark_mq.client.errors import BufferExhaustedError
from spark_mq.errors import AuthenticationError
from spark_mq.storage.batch_decoder import decode_records, validate_batch
from spark_mq.storage.record_batch import HEADER_SIZE, encode_batch_parts


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _acc(clock: Clock, **kw: int) -> RecordAccumulator:
    options = {"batch_size": 1000, "linger_ms": 5, "buffer_memory": 1 << 20, "max_block_ms": 0}
    options.update(kw)
    return RecordAccumulator(clock=clock, **options)


def _append(acc: RecordAccumulator, partition: int = 0, value: bytes = b"v" * 76) -> object:
    size = record_size(None, value)
    return acc.append("t", partition, 5.0, None, value, None, size, None)


def _send_all(tp: tuple[str, int]) -> int:
    return 100


def test_a_batch_waits_for_linger_then_is_drained() -> None:
    clock = Clock()
    acc = _acc(clock)
    _append(acc)
    assert acc.drain(_send_all, 1 << 20) == []
    assert acc.next_ready_in(_send_all) == pytest.approx(0.005)
    clock.now += 0.005
    assert acc.next_ready_in(_send_all) == 0.0
    (batch,) = acc.drain(_send_all, 1 << 20)
    assert batch.record_count == 1 and batch.tp == ("t", 0)


def test_a_full_batch_is_ready_without_linger() -> None:
    clock = Clock()
    acc = _acc(clock)
    for _ in range(10):  # 10 x 110 bytes passes batch.size=1000
        _append(acc)
    drained = acc.drain(_send_all, 1 << 20)
    assert [b.record_count for b in drained] == [9]  # the 10th opened a new batch
    clock.now += 1
    assert [b.record_count for b in acc.drain(_send_all, 1 << 20)] == [1]


def test_batches_grow_past_batch_size_while_earlier_ones_wait() -> None:
    clock = Clock()
    acc = _acc(clock, max_batch_bytes=3000)
    for _ in range(30):
        _append(acc)
    # The first batch closed at batch.size; with it still queued the next one kept filling.
    drained = acc.drain(lambda tp: 1, 1 << 20)
    assert [b.record_count for b in drained] == [9]
    drained = acc.drain(lambda tp: 1, 1 << 20)
    assert [b.record_count for b in drained] == [21]


def test_drain_respects_can_send_and_request_size() -> None:
    clock = Clock()
    acc = _acc(clock)
    for partition in range(3):
        for _ in range(10):
            _append(acc, partition)
    clock.now += 1
    assert acc.drain(lambda tp: 0, 1 << 20) == []
    one_per_partition = acc.drain(lambda tp: 1, 1 << 20)
    assert sorted(b.partition for b in one_per_partition) == [0, 1, 2]
    first_only = acc.drain(_send_all, 1)  # the first batch always goes, whole
    assert len(first_only) == 1


def test_flush_makes_everything_ready() -> None:
    clock = Clock()
    acc = _acc(clock, linger_ms=10_000)
    future = _append(acc)
    pending = acc.begin_flush()
    assert len(pending) == 1
    (batch,) = acc.drain(_send_all, 1 << 20)
    acc.end_flush()
    batch.result.complete(7)
    acc.complete(batch)
    assert future.get().offset == 7  # type: ignore[attr-defined]
    assert acc.buffered_bytes == 0


def test_back_pressure_raises_after_max_block_ms() -> None:
    clock = Clock()
    acc = _acc(clock, buffer_memory=300, max_block_ms=0)
    _append(acc)
    _append(acc)
    with pytest.raises(BufferExhaustedError, match=r"buffer\.memory=300"):
        _append(acc)
    # Completing a batch releases its bytes and appends go through again.
    clock.now += 1
    (batch,) = acc.drain(_send_all, 1 << 20)
    batch.result.complete(0)
    acc.complete(batch)
    _append(acc)


class _CountingCondition(threading.Condition):
    def __init__(self, lock: threading.Lock) -> None:
        super().__init__(lock)
        self.notified = 0

    def notify_all(self) -> None:
        self.notified += 1
        super().notify_all()


def _append_encoded(acc: RecordAccumulator, size: int = 100) -> None:
    acc.append_encoded("t", 0, bytes(HEADER_SIZE), [bytes(size - HEADER_SIZE)], 1)


def _blocked_append(
    acc: RecordAccumulator, size: int = 100
) -> tuple[threading.Thread, list[BaseException]]:
    """An append of ``size`` bytes on another thread, once it waits for buffer space."""
    errors: list[BaseException] = []
    waiting = len(acc._resume_at)

    def run() -> None:
        try:
            _append_encoded(acc, size)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while len(acc._resume_at) == waiting and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(acc._resume_at) == waiting + 1, "the append did not wait for space"
    return thread, errors


def test_a_blocked_producer_resumes_once_a_quarter_of_the_buffer_is_free() -> None:
    """Not on every completed batch: it would wake to queue one batch each time."""
    acc = RecordAccumulator(batch_size=1, linger_ms=0, buffer_memory=1000, max_block_ms=60_000)
    space = acc._space = _CountingCondition(acc.lock)
    for _ in range(10):
        _append_encoded(acc)
    thread, errors = _blocked_append(acc)
    batches = acc.drain(_send_all, 1 << 20)
    assert len(batches) == 10
    # It waits for 1000 - 100 (its batch) - 250 (a quarter) = 650 bytes in use at most.
    for done, batch in enumerate(batches[:4], start=1):
        acc.complete(batch)
        assert acc.buffered_bytes == 1000 - 100 * done
        assert space.notified == (1 if done == 4 else 0)
    thread.join(10)
    assert not thread.is_alive() and not errors
    assert acc.buffered_bytes == 700
    assert len(acc.drain(_send_all, 1 << 20)) == 1


def test_while_one_append_waits_a_later_one_that_fits_waits_too() -> None:
    """Else later callers would take the room the first one waits for."""
    acc = RecordAccumulator(batch_size=1, linger_ms=0, buffer_memory=1000, max_block_ms=60_000)
    for _ in range(10):
        _append_encoded(acc)
    first, first_errors = _blocked_append(acc)
    batches = acc.drain(_send_all, 1 << 20)
    acc.complete(batches[0])  # 900 in use: 50 more bytes would fit
    second, second_errors = _blocked_append(acc, size=HEADER_SIZE + 1)
    for batch in batches[1:4]:  # down to 600: both resume
        acc.complete(batch)
    for thread in (first, second):
        thread.join(10)
        assert not thread.is_alive()
    assert not first_errors and not second_errors
    assert acc.buffered_bytes == 600 + 100 + HEADER_SIZE + 1


def test_at_max_block_ms_room_for_the_batch_alone_is_enough() -> None:
    acc = RecordAccumulator(batch_size=1, linger_ms=0, buffer_memory=1000, max_block_ms=200)
    for _ in range(10):
        _append_encoded(acc)
    thread, errors = _blocked_append(acc)
    acc.complete(acc.drain(_send_all, 1 << 20)[0])  # 900 in use: its 100 bytes fit
    thread.join(10)
    assert not thread.is_alive() and not errors
    assert acc.buffered_bytes == 1000
    assert acc._resume_at == []


def test_reenqueued_batches_go_back_in_sequence_order() -> None:
    clock = Clock()
    acc = _acc(clock, batch_size=100)
    for _ in range(4):
        _append(acc)  # one record per batch
    clock.now += 1
    batches = [acc.drain(lambda tp: 1, 1 << 20)[0] for _ in range(3)]
    for seq, batch in enumerate(batches):
        batch.base_sequence = seq
    acc.reenqueue(batches[1], clock.now)
    acc.reenqueue(batches[0], clock.now)
    acc.reenqueue(batches[2], clock.now + 5)
    assert acc.has_earlier_queued(("t", 0), 2)
    order = [acc.drain(lambda tp: 1, 1 << 20) for _ in range(3)]
    assert [b[0].base_sequence for b in order[:2]] == [0, 1]
    assert order[2] == []  # batch 2 waits for its backoff, the unsent one waits behind it
    clock.now += 5
    assert acc.drain(lambda tp: 1, 1 << 20)[0].base_sequence == 2


def test_delivery_timeout_expires_queued_batches() -> None:
    clock = Clock()
    acc = _acc(clock)
    _append(acc)
    clock.now += 2
    assert [b.record_count for b in acc.expired(1.0)] == [1]
    assert not acc.has_unsent()


def test_keys_and_headers_are_padded_for_records_without_them() -> None:
    clock = Clock()
    acc = _acc(clock)
    acc.append("t", 0, 1.0, None, b"a", None, 30, None)
    acc.append("t", 0, 2.0, b"k", b"b", [("h", b"1")], 30, None)
    acc.append("t", 0, 3.0, None, b"c", None, 30, None)
    clock.now += 1
    (batch,) = acc.drain(_send_all, 1 << 20)
    batch.encode("none", -1, -1, -1)
    table = decode_records(b"".join(bytes(b) for b in batch.wire))
    assert table.column("key").to_pylist() == [None, b"k", None]
    assert table.column("timestamp").to_pylist() == [1, 2, 3]
    assert table.column("headers").to_pylist() == [None, [{"key": "h", "value": b"1"}], None]


def test_stamp_header_sets_producer_fields_and_a_valid_crc() -> None:
    header, body = encode_batch_parts(pa.array([b"x", b"y"]), codec="lz4")
    stamped = stamp_header(bytes(header), body, 42, 3, 17) + bytes(body)
    parsed = validate_batch(stamped)
    assert (parsed.producer_id, parsed.producer_epoch, parsed.base_sequence) == (42, 3, 17)
    assert decode_records(stamped).column("value").to_pylist() == [b"x", b"y"]


def test_encoded_batches_are_restamped_not_reencoded() -> None:
    batch = ProducerBatch("t", 0, 0.0)
    batch.values = [b"a"]
    batch.timestamps = [1.0]
    batch.record_count = 1
    batch.encode("none", 5, 0, 0)
    first = batch.body
    batch.encode("none", 5, 1, 0)  # a new epoch renumbers
    assert batch.body is first
    wire = b"".join(bytes(b) for b in batch.wire)
    assert validate_batch(wire).producer_epoch == 1


def test_with_linger_0_a_batch_that_cannot_go_out_keeps_filling() -> None:
    """linger.ms=0 while the partition's requests are in flight (can_send 0): the open batch
    is neither closed nor waited for (the sender would spin); once it may go, it goes as one
    batch of every record that came meanwhile, not as a batch per record."""
    clock = Clock()
    acc = _acc(clock, linger_ms=0)
    _append(acc)
    assert acc.next_ready_in(lambda tp: 0) is None
    assert acc.drain(lambda tp: 0, 1 << 20) == []
    for _ in range(4):
        _append(acc)
        assert acc.drain(lambda tp: 0, 1 << 20) == []
    assert acc.next_ready_in(lambda tp: 1) == 0.0
    (batch,) = acc.drain(lambda tp: 1, 1 << 20)
    assert batch.record_count == 5


def test_after_the_sender_stops_for_good_appends_raise_its_error() -> None:
    """A send() that passed the producer's closed check just before its sender stopped must
    not add a record whose future would never complete: the accumulator raises the error
    that stopped the sender, for both kinds of append."""
    acc = _acc(Clock())
    pending = _append(acc)
    refused = AuthenticationError("SCRAM-SHA-512 authentication of user 'u' failed")
    assert [b.record_count for b in acc.shut(refused)] == [1]
    assert pending is not None
    with pytest.raises(AuthenticationError) as raised:
        _append(acc)
    assert raised.value is refused
    with pytest.raises(AuthenticationError):
        _append_encoded(acc)
    assert not acc.has_unsent()
