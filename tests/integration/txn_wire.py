"""Raw wire helpers for the transaction coordinator tests (a RawConnection and the
transaction requests, one call each, asserting no frame error)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from spark_mq.protocol import fetch, group_offsets
from spark_mq.protocol.groups import COORDINATOR_TRANSACTION, FindCoordinatorRequest
from spark_mq.protocol.producer_id import InitProducerIdRequest
from spark_mq.protocol.transactions import (
    AbortTxnsRequest,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    CommitPreparedTxnsRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    ListTransactionsRequest,
    OwnerSequenceRequest,
    PreparedTxnRef,
    PrepareTxnRequest,
    TransactionState,
    TxnCommitOwner,
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitTopic,
    TxnOwnerScope,
    TxnTopic,
)
from spark_mq.storage.batch_decoder import decode_records, iter_batches
from spark_mq.storage.record_batch import encode_batch


def body(conn: Any, request: Any) -> Any:
    reply = conn.call(request)
    assert reply.frame_error == 0, reply.error_message
    return reply.body


#: pyarrow's first ``pa.array`` of a Python list imports pandas (its pandas shim checks the
#: input), about 0.4 s: done at import, so that it never falls between a producer's
#: InitProducerId and its first AddPartitionsToTxn, where a test's 200 ms
#: transactional.id.expiration.ms would expire the id.
_WARM = pa.array([b""], pa.binary())


class TxnProducer:
    """One incarnation of a transactional producer, over a raw connection."""

    def __init__(self, conn: Any, transactional_id: str, timeout_ms: int = 60_000) -> None:
        self.conn = conn
        self.tid = transactional_id
        init = body(conn, InitProducerIdRequest(transactional_id, timeout_ms))
        assert init.error_code == 0, init.error_message
        self.pid, self.epoch = init.producer_id, init.producer_epoch
        self.sequence: dict[tuple[str, int], int] = {}

    def add(self, topic: str, *partitions: int) -> list[int]:
        parts = list(partitions) or [0]
        response = body(
            self.conn,
            AddPartitionsToTxnRequest(self.tid, self.pid, self.epoch, [TxnTopic(topic, parts)]),
        )
        return [p.error_code for t in response.results for p in t.partitions]

    def _batch(self, topic: str, partition: int, values: tuple[bytes, ...]) -> bytes:
        return encode_batch(
            pa.array(list(values), pa.binary()),
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.sequence.get((topic, partition), 0),
            is_transactional=True,
        )

    def send(self, topic: str, partition: int, *values: bytes, data: bytes | None = None) -> Any:
        if data is None:
            data = self._batch(topic, partition, values)
        part = self.conn.produce(topic, partition, data, acks=-1, transactional_id=self.tid)
        if part.error_code == 0:
            key = (topic, partition)
            self.sequence[key] = self.sequence.get(key, 0) + len(values)
        return part

    def write(self, topic: str, partition: int, *values: bytes) -> None:
        # Encoded before the transaction is added to: a first encode in a fresh process
        # loads modules for longer than the short timeouts some tests use (see _WARM too).
        data = self._batch(topic, partition, values)
        added = self.add(topic, partition)
        assert added == [0], added
        part = self.send(topic, partition, *values, data=data)
        assert part.error_code == 0, part.error_message

    def add_offsets(self, group: str) -> Any:
        return body(self.conn, AddOffsetsToTxnRequest(self.tid, self.pid, self.epoch, group))

    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> list[int]:
        response = body(
            self.conn,
            TxnOffsetCommitRequest(
                self.tid,
                group,
                self.pid,
                self.epoch,
                [
                    TxnOffsetCommitTopic(
                        topic, [TxnOffsetCommitPartition(p, o) for p, o in offsets.items()]
                    )
                ],
            ),
        )
        return [p.error_code for t in response.topics for p in t.partitions]

    def end(self, commit: bool) -> Any:
        return body(self.conn, EndTxnRequest(self.tid, self.pid, self.epoch, commit))

    def prepare(self, owner_prefix: str | None = None) -> Any:
        return body(self.conn, PrepareTxnRequest(self.tid, self.pid, self.epoch, owner_prefix))

    def ref(self) -> PreparedTxnRef:
        return PreparedTxnRef(self.tid, self.pid, self.epoch)


def find_coordinator(conn: Any, tid: str) -> Any:
    return body(conn, FindCoordinatorRequest(tid, COORDINATOR_TRANSACTION))


def describe(conn: Any, tid: str) -> TransactionState:
    state: TransactionState = body(conn, DescribeTransactionsRequest([tid])).transaction_states[0]
    return state


def list_transactions(conn: Any, **filters: Any) -> list[TransactionState]:
    response = body(conn, ListTransactionsRequest(**filters))
    assert response.error_code == 0, response.error_message
    return list(response.transaction_states)


def commit(
    conn: Any,
    refs: list[PreparedTxnRef],
    *,
    owner: str | None = None,
    sequence: int = -1,
    scope: str | None = None,
) -> Any:
    """CommitPreparedTxns, tagged ``(owner, sequence)`` when ``owner`` is given."""
    tag = None if owner is None else TxnCommitOwner(owner, sequence)
    prefix = None if scope is None else TxnOwnerScope(scope)
    return body(conn, CommitPreparedTxnsRequest(refs, tag, prefix))


def abort(conn: Any, refs: list[PreparedTxnRef]) -> Any:
    """AbortTxns of ``refs`` alone."""
    return body(conn, AbortTxnsRequest(refs))


def owner_sequence(conn: Any, owner: str) -> int:
    response = body(conn, OwnerSequenceRequest(owner))
    assert response.error_code == 0, response.error_message
    return int(response.last_sequence)


def read_values(conn: Any, topic: str, partition: int = 0, *, committed: bool = True) -> list[Any]:
    """Every value of the partition, read_committed (the default) or read_uncommitted."""
    level = fetch.READ_COMMITTED if committed else fetch.READ_UNCOMMITTED
    out: list[Any] = []
    offset = 0
    while True:
        part, records = conn.fetch(topic, partition, offset, isolation_level=level)
        assert part.error_code == 0, part.error_message
        bound = part.last_stable_offset if committed else part.high_watermark
        if records:
            table = decode_records(
                records,
                start_offset=offset,
                end_offset=bound,
                aborted_transactions=part.aborted_transactions if committed else None,
            )
            out.extend(table.column("value").to_pylist())
        if not records or offset >= bound:
            return out
        last = None
        for header, _ in iter_batches(records):
            last = header
        assert last is not None
        offset = min(last.next_offset, bound)
        if offset >= bound:
            return out


def stable_offset(conn: Any, topic: str, partition: int = 0) -> int:
    part, _ = conn.fetch(topic, partition, 0, isolation_level=fetch.READ_COMMITTED)
    return int(part.last_stable_offset)


def fetch_offset(conn: Any, group: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(committed offset, error code) of the group's partition, require_stable."""
    response = body(
        conn,
        group_offsets.OffsetFetchRequest(
            group, [group_offsets.OffsetFetchTopic(topic, [partition])], require_stable=True
        ),
    )
    part = response.topics[0].partitions[0]
    return part.committed_offset, part.error_code


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail (naming ``what``) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
