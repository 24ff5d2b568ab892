"""The values of ``__half_ops`` (spark_mq/broker/half/records.py): what this broker writes
reads back, and an op written before ops carried their time still reads, without one."""

from __future__ import annotations

import msgspec
import pytest

from spark_mq.broker.half.records import HalfOp, decode_op, encode_op
from spark_mq.errors import CorruptRecordError
from spark_mq.protocol.half_messages import HalfState


def test_an_op_round_trips_with_its_time() -> None:
    op = HalfOp(0, "m-1", HalfState.COMMITTED, 2, 41, 1_700_000_000_000)
    assert decode_op(encode_op(op)) == op


def test_an_op_without_a_time_reads_as_minus_one() -> None:
    # The layout before time_ms: [version, message_id, state, check_count, offset].
    old = msgspec.msgpack.encode([0, "m-1", int(HalfState.ROLLED_BACK), 0, -1])
    assert decode_op(old) == HalfOp(0, "m-1", HalfState.ROLLED_BACK, 0, -1, -1)


def test_an_op_of_an_unknown_version_is_refused() -> None:
    newer = msgspec.msgpack.encode([1, "m-1", 1, 0, 5, 0])
    with pytest.raises(CorruptRecordError, match="version 1"):
        decode_op(newer)
