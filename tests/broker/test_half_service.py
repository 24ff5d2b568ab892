"""The half-message service in-process: a BrokerCore over a LogManager in tmp_path, a
controlled wall clock, requests through the dispatcher. Restarts are a new core over the
same directory, which is what a broker restart reads."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import RequestContext
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.half.expiry import tombstone_batches
from spark_mq.broker.half.records import encode_record
from spark_mq.broker.half.service import DISCARD_TOPIC
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.handlers.errors import answer
from spark_mq.broker.internal_topics import HALF_MESSAGES_TOPIC, HALF_OPS_TOPIC
from spark_mq.broker.txn.log_reader import read_batches
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import spec_for_request
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import RequestHeader
from spark_mq.protocol.half_messages import (
    CheckHalfMessagesRequest,
    EndHalfMessageRequest,
    HalfAction,
    HalfHeader,
    HalfState,
    ListHalfMessagesRequest,
    SendHalfMessageRequest,
)
from spark_mq.storage.log_manager import LogManager

GROUP = "orders"
RETENTION_MS = 3_600_000
SETTINGS = {
    "transaction.check.interval.ms": "1000",
    "transaction.half.timeout.ms": "5000",
    "transaction.check.max": "2",
    "transaction.half.op.retention.ms": str(RETENTION_MS),
    # Small segments, so that a cleaning pass has whole segments to compact.
    "transaction.half.log.segment.bytes": "1024",
}


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms


class Broker:
    """A core that can be restarted over the same directory."""

    def __init__(self, root: Path, clock: Clock) -> None:
        self.root, self.clock = root, clock
        self.logs: LogManager | None = None
        self.core: BrokerCore | None = None

    def start(self) -> BrokerCore:
        self.logs = LogManager(self.root)
        config = ServerConfig.from_properties({"log.dirs": str(self.root), **SETTINGS})
        self.core = BrokerCore(config, self.logs, BrokerMeta.take_over(self.root), clock=self.clock)
        self.core.half_messages._ready.start()
        return self.core

    def stop(self) -> None:
        assert self.core is not None and self.logs is not None
        self.core.half_messages.close()
        self.core.close()
        self.logs.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "mq", Clock())
    yield b
    if b.core is not None and b.logs is not None:
        b.stop()


async def call(core: BrokerCore, request: Any) -> Any:
    spec = spec_for_request(request)
    ctx = RequestContext(
        core, RequestHeader(spec.key, 0, 1, "test"), BrokerAddress("127.0.0.1", 9092), "test"
    )
    response = await answer(spec, HANDLERS[spec.key], ctx, request, memoryview(b""))
    assert response is not None
    return response.body


def values(core: BrokerCore, topic: str) -> list[bytes | None]:
    log = core.logs.get_log(topic, 0)
    return [v for batch in read_batches(log, 1 << 20) for _, v in batch.records]


def send(message_id: str, value: bytes = b"v", **kw: Any) -> SendHalfMessageRequest:
    return SendHalfMessageRequest(
        GROUP, message_id, "payments", 0, b"k", value, [HalfHeader("h", b"1")], **kw
    )


def end(message_id: str, action: HalfAction, **kw: Any) -> EndHalfMessageRequest:
    return EndHalfMessageRequest(GROUP, message_id, action, **kw)


def test_commit_writes_once_and_a_repeat_answers_the_same(broker: Broker) -> None:
    async def scenario() -> None:
        core = broker.start()
        assert (await call(core, send("m1", b"one"))).error_code == 0
        assert (await call(core, send("m1", b"one"))).error_code == 0  # a retried send
        assert (await call(core, send("m2", b"two"))).error_code == 0
        assert values(core, "payments") == []  # consumers see no half message
        first = await call(core, end("m1", HalfAction.COMMIT))
        assert (first.error_code, first.state, first.offset) == (0, HalfState.COMMITTED, 0)
        again = await call(core, end("m1", HalfAction.COMMIT))
        assert (again.error_code, again.offset) == (0, 0)
        rolled = await call(core, end("m2", HalfAction.ROLLBACK))
        assert (rolled.error_code, rolled.state) == (0, HalfState.ROLLED_BACK)
        wrong = await call(core, end("m2", HalfAction.COMMIT))
        assert wrong.error_code == ErrorCode.INVALID_TXN_STATE
        assert wrong.state == HalfState.ROLLED_BACK
        assert values(core, "payments") == [b"one"]
        unknown = await call(core, end("never-sent", HalfAction.COMMIT))
        assert unknown.error_code == ErrorCode.HALF_MESSAGE_NOT_FOUND
        assert (await call(core, ListHalfMessagesRequest())).messages == []

    asyncio.run(scenario())


def test_a_crash_between_the_real_write_and_the_op_neither_loses_nor_doubles(
    broker: Broker,
) -> None:
    async def first_life() -> None:
        core = broker.start()
        await call(core, send("m1", b"one"))
        service = core.half_messages
        # What COMMIT does before its op is appended; the process dies here.
        service._write_real(service.pending["m1"].record)

    async def second_life() -> None:
        core = broker.start()
        pending = await call(core, ListHalfMessagesRequest())
        assert [m.message_id for m in pending.messages] == ["m1"]
        committed = await call(core, end("m1", HalfAction.COMMIT, from_check=True))
        assert (committed.error_code, committed.offset) == (0, 0)
        assert values(core, "payments") == [b"one"]

    asyncio.run(first_life())
    broker.stop()
    asyncio.run(second_life())


def test_checks_are_handed_out_counted_and_end_in_the_discard_topic(broker: Broker) -> None:
    clock = broker.clock

    async def first_life() -> None:
        core = broker.start()
        await call(core, send("m1", b"one"))
        await call(core, send("m2", b"two", check_immunity_ms=60_000))
        poll = CheckHalfMessagesRequest(GROUP, max_wait_ms=0)
        assert (await call(core, poll)).messages == []  # not yet 5 s old
        clock.now_ms += 5_000
        handed = (await call(core, poll)).messages
        assert [(m.message_id, m.check_count) for m in handed] == [("m1", 1)]
        assert (await call(core, poll)).messages == []  # the next check waits an interval
        other = CheckHalfMessagesRequest("another-group", max_wait_ms=0)
        assert (await call(core, other)).messages == []
        service = core.half_messages
        assert service.pending["m1"].check_count == 0  # out, its answer not due yet
        clock.now_ms += 1_000
        service.run_checks()  # the answer is overdue: now the check counts
        assert service.pending["m1"].check_count == 1
        handed = (await call(core, poll)).messages
        assert [(m.message_id, m.check_count) for m in handed] == [("m1", 2)]
        # The broker stops with this (the last allowed) check out, before its answer is due.

    async def second_life() -> None:
        core = broker.start()
        await core.half_messages.ready()
        service = core.half_messages
        # The counted check survived the restart; the one out when it stopped cost nothing.
        assert service.pending["m1"].check_count == 1
        poll = CheckHalfMessagesRequest(GROUP, max_wait_ms=0)
        handed = (await call(core, poll)).messages
        assert [(m.message_id, m.check_count) for m in handed] == [("m1", 2)]
        assert service.run_checks() == 0  # the last check has its interval to be answered
        clock.now_ms += 1_000
        assert (await call(core, poll)).messages == []  # no check past the maximum
        assert service.run_checks() == 1
        discarded = await call(core, ListHalfMessagesRequest(discarded=True))
        assert [m.message_id for m in discarded.messages] == ["m1"]
        assert discarded.discarded_count == 1
        assert values(core, DISCARD_TOPIC) == [b"one"]
        assert values(core, "payments") == []
        late = await call(core, end("m1", HalfAction.COMMIT, from_check=True))
        assert (late.error_code, late.state) == (ErrorCode.INVALID_TXN_STATE, HalfState.DISCARDED)
        pending = await call(core, ListHalfMessagesRequest())
        assert [m.message_id for m in pending.messages] == ["m2"]

    async def third_life() -> None:
        core = broker.start()
        discarded = await call(core, ListHalfMessagesRequest(discarded=True))
        assert [m.message_id for m in discarded.messages] == ["m1"]
        assert values(core, DISCARD_TOPIC) == [b"one"]

    asyncio.run(first_life())
    broker.stop()
    clock.now_ms += 500
    asyncio.run(second_life())
    broker.stop()
    asyncio.run(third_life())


def test_a_waiting_poll_wakes_when_a_check_falls_due(broker: Broker) -> None:
    async def scenario() -> None:
        core = broker.start()
        await call(core, send("m1"))
        waiting = asyncio.create_task(call(core, CheckHalfMessagesRequest(GROUP, 20_000)))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        broker.clock.now_ms += 5_000
        core.half_messages.run_checks()
        response = await asyncio.wait_for(waiting, 5)
        assert [m.message_id for m in response.messages] == ["m1"]

    asyncio.run(scenario())


def test_bad_requests_are_refused(broker: Broker) -> None:
    async def scenario() -> None:
        core = broker.start()
        bad_partition = SendHalfMessageRequest(GROUP, "m", "payments", -1, None, b"v")
        assert (await call(core, bad_partition)).error_code == ErrorCode.INVALID_REQUEST
        own = SendHalfMessageRequest(GROUP, "m", "__half_ops", 0, None, b"v")
        assert (await call(core, own)).error_code == ErrorCode.INVALID_REQUEST
        await call(core, send("m1"))
        other_group = EndHalfMessageRequest("not-orders", "m1", HalfAction.COMMIT)
        assert (await call(core, other_group)).error_code == ErrorCode.INVALID_REQUEST
        bad_action = end("m1", 7)  # type: ignore[arg-type]
        assert (await call(core, bad_action)).error_code == ErrorCode.INVALID_REQUEST

    asyncio.run(scenario())


def records_by_key(core: BrokerCore, topic: str) -> dict[str, list[bytes | None]]:
    """Every record the partition still holds (after compaction), by key, in log order."""
    out: dict[str, list[bytes | None]] = {}
    for batch in read_batches(core.logs.get_log(topic, 0), 1 << 20):
        for key, value in batch.records:
            assert key is not None
            out.setdefault(key.decode(), []).append(value)
    return out


def clean(core: BrokerCore, now_ms: int) -> None:
    """One pass of the log cleaner over both topics, their active segments rolled first
    (the cleaner never touches an active segment)."""
    for topic in (HALF_MESSAGES_TOPIC, HALF_OPS_TOPIC):
        core.logs.get_log(topic, 0).roll()
    core.logs.clean_logs(now_ms=now_ms)


def test_ended_outcomes_are_forgotten_after_the_retention(broker: Broker) -> None:
    clock = broker.clock
    ended = [f"c{i}" for i in range(20)] + [f"r{i}" for i in range(20)] + ["left", "gone"]
    poll = CheckHalfMessagesRequest(GROUP, max_wait_ms=0)

    async def first_life() -> None:
        core = broker.start()
        service = core.half_messages
        for i in range(20):
            await call(core, send(f"c{i}", f"c{i}".encode()))
            assert (await call(core, end(f"c{i}", HalfAction.COMMIT))).error_code == 0
            await call(core, send(f"r{i}"))
            assert (await call(core, end(f"r{i}", HalfAction.ROLLBACK))).error_code == 0
        # A crash between an end's op and its tombstone leaves the half record live.
        await call(core, send("left", b"left"))
        record = service.pending["left"].record
        await call(core, end("left", HalfAction.COMMIT))
        service.halves.append("left", [(b"left", encode_record(record))], clock())
        # A message discarded after its two checks went unanswered keeps its record.
        await call(core, send("gone", b"gone", check_immunity_ms=0))
        for _ in range(2):
            assert [m.message_id for m in (await call(core, poll)).messages] == ["gone"]
            clock.now_ms += 1_000
            service.run_checks()
        assert list(service.discarded) == ["gone"]
        # A message that stays pending all along: expiry is for ended ones only.
        await call(core, send("open", b"open", check_immunity_ms=100 * RETENTION_MS))
        assert sorted(service.ended) == sorted(ended)

        clock.now_ms += RETENTION_MS - 2_000  # "gone" ended 2 s after the others
        assert await service.expire_outcomes() == 41
        assert sorted(service.ended) == ["gone"]
        clock.now_ms += 2_000
        assert await service.expire_outcomes() == 1
        # Memory holds the pending message and nothing of the 42 that ended.
        assert (service.ended, service.discarded, list(service.pending)) == ({}, {}, ["open"])

        # A late end of a forgotten message is answered, and writes nothing.
        for message_id, action in (("c0", HalfAction.COMMIT), ("left", HalfAction.COMMIT)):
            late = await call(core, end(message_id, action))
            assert late.error_code == ErrorCode.HALF_MESSAGE_NOT_FOUND
            assert "transaction.half.op.retention.ms" in late.error_message
        late = await call(core, end("gone", HalfAction.ROLLBACK, from_check=True))
        assert late.error_code == ErrorCode.HALF_MESSAGE_NOT_FOUND
        assert values(core, "payments") == [f"c{i}".encode() for i in range(20)] + [b"left"]
        listing = await call(core, ListHalfMessagesRequest(discarded=True))
        assert (listing.messages, listing.discarded_count) == ([], 1)
        assert values(core, DISCARD_TOPIC) == [b"gone"]

        # A cleaning pass removes every record of the forgotten messages: only tombstones
        # are left of them, and the pending message's record.
        clean(core, clock.now_ms)
        halves = records_by_key(core, HALF_MESSAGES_TOPIC)
        ops = records_by_key(core, HALF_OPS_TOPIC)
        assert halves.pop("open") == [encode_record(service.pending["open"].record)]
        assert sorted(halves) == sorted(ended) and sorted(ops) == sorted(ended)
        assert {v for vs in [*halves.values(), *ops.values()] for v in vs} == {None}

    async def second_life() -> None:
        core = broker.start()
        service = core.half_messages
        await service.ready()
        # Nothing forgotten comes back: not pending, not ended, not discarded.
        assert (service.ended, service.discarded, list(service.pending)) == ({}, {}, ["open"])
        pending = await call(core, ListHalfMessagesRequest())
        assert [m.message_id for m in pending.messages] == ["open"]
        late = await call(core, end("left", HalfAction.COMMIT, from_check=True))
        assert late.error_code == ErrorCode.HALF_MESSAGE_NOT_FOUND
        assert values(core, "payments") == [f"c{i}".encode() for i in range(20)] + [b"left"]

    asyncio.run(first_life())
    broker.stop()
    asyncio.run(second_life())


def test_a_crash_between_the_two_expiry_tombstones_forgets_at_the_next_pass(
    broker: Broker,
) -> None:
    clock = broker.clock

    async def first_life() -> None:
        core = broker.start()
        service = core.half_messages
        await call(core, send("m1", b"one"))
        await call(core, end("m1", HalfAction.COMMIT))
        clock.now_ms += RETENTION_MS
        # What expiry appends before it fsyncs and tombstones the op; the process dies here.
        for batch in tombstone_batches(["m1"], 1024):
            service.halves.append(HALF_MESSAGES_TOPIC, batch, clock())

    async def second_life() -> None:
        core = broker.start()
        service = core.half_messages
        await service.ready()
        # The op without its record: ended, not pending, and its outcome still answered.
        assert list(service.pending) == []
        again = await call(core, end("m1", HalfAction.COMMIT))
        assert (again.error_code, again.state, again.offset) == (0, HalfState.COMMITTED, 0)
        assert await service.expire_outcomes() == 1
        assert service.ended == {}
        late = await call(core, end("m1", HalfAction.COMMIT))
        assert late.error_code == ErrorCode.HALF_MESSAGE_NOT_FOUND
        assert values(core, "payments") == [b"one"]

    asyncio.run(first_life())
    broker.stop()
    asyncio.run(second_life())
