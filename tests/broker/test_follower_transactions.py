"""A follower's producer state and transaction index, built by the replica fetcher's follower
path, are the leader's (what a follower needs to lead with Kafka's guarantees).

The leader's log (a real :class:`~spark_mq.storage.log.PartitionLog`) receives idempotent
batches, a committed transaction, an aborted one and one still open, with the coordinator's
markers; the follower copies it fetch by fetch (small fetches, so batches arrive in several
responses) through :func:`~spark_mq.broker.replica_fetcher.append_fetched`. Then, and again
after the follower's log is closed and recovered from disk, the follower has the leader's
producers (ids, epochs, sequences, offsets), open transactions, last stable offset, aborted
transaction index and read_committed view. Finally the follower becomes leader: the open
transaction's commit marker moves its last stable offset as it would have on the old leader.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.broker.replica_fetcher import append_fetched
from spark_mq.storage.log import FetchIsolation, PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import ControlType, encode_batch

TOPIC = "txn"
NOW_MS = 1_700_000_000_000
#: Small segments: the transaction index is per segment, and replication rolls them too.
CONFIG = LogConfig(segment_bytes=1024)
IDEMPOTENT, COMMITTED, ABORTED = 1000, 2000, 3000


def open_log(root: Path) -> tuple[LogManager, PartitionLog]:
    manager = LogManager(root, CONFIG, time_ms=lambda: NOW_MS, high_watermark_follows_log_end=False)
    if not manager.topic_exists(TOPIC):
        manager.create_topic(TOPIC, partitions=1)
    return manager, manager.get_log(TOPIC, 0)


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[dict[str, tuple[LogManager, PartitionLog]]]:
    opened = {"leader": open_log(tmp_path / "leader"), "follower": open_log(tmp_path / "follower")}
    yield opened
    for manager, _ in opened.values():
        if not manager.closed:
            manager.close()


def data(producer_id: int, sequence: int, *, transactional: bool, count: int = 2) -> bytes:
    return encode_batch(
        pa.array([b"%d:%d" % (producer_id, sequence + i) for i in range(count)], pa.binary()),
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        is_transactional=transactional,
        now_ms=NOW_MS,
    )


def marker(leader: PartitionLog, control: ControlType, producer_id: int) -> None:
    leader.append_transaction_marker(
        control, producer_id=producer_id, producer_epoch=0, coordinator_epoch=5
    )


def replicate(leader: PartitionLog, follower: PartitionLog) -> int:
    """The follower fetches until it has the leader's log; how many fetches it took."""
    fetches = 0
    while follower.log_end_offset < leader.log_end_offset:
        info = leader.read(follower.log_end_offset, 300, isolation=FetchIsolation.LOG_END)
        records = b""
        if info.records is not None:
            with info.records as fetched:
                records = fetched.read()
        append_fetched(follower, records, info.high_watermark)
        fetches += 1
    # One more round: the follower learns the high watermark its last fetch moved.
    append_fetched(follower, b"", leader.high_watermark)
    return fetches


def transactional_view(log: PartitionLog) -> dict[str, object]:
    """What a new leader must have as the old one had it."""
    state = log.producer_state
    committed = log.read_records(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    fetched = log.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    if fetched.records is not None:
        fetched.records.close()
    return {
        "producers": {e.producer_id: e for e in state},
        "ongoing": dict(state.ongoing_txns),
        "first_unstable": state.first_unstable_offset(),
        "last_stable_offset": log.last_stable_offset,
        "aborted_index": log.collect_aborted_transactions(0, log.log_end_offset),
        "aborted_in_fetch": fetched.aborted_transactions,
        "read_committed": committed.column("value").to_pylist(),
        "high_watermark": log.high_watermark,
    }


def test_a_follower_rebuilds_the_leaders_producer_state_and_transaction_index(
    logs: dict[str, tuple[LogManager, PartitionLog]], tmp_path: Path
) -> None:
    _, leader = logs["leader"]
    _, follower = logs["follower"]
    leader.leader_epoch = 0
    leader.maybe_assign_epoch_start_offset(0, 0)
    for i in range(3):
        leader.append(data(IDEMPOTENT, 2 * i, transactional=False))
        leader.append(data(COMMITTED, 2 * i, transactional=True))
        leader.append(data(ABORTED, 2 * i, transactional=True))
    marker(leader, ControlType.COMMIT, COMMITTED)
    marker(leader, ControlType.ABORT, ABORTED)
    leader.append(data(IDEMPOTENT, 6, transactional=False))
    open_from = leader.log_end_offset
    leader.append(data(COMMITTED, 6, transactional=True))  # a second transaction, open
    leader.append(data(IDEMPOTENT, 8, transactional=False))
    leader.update_high_watermark(leader.log_end_offset)

    expected = transactional_view(leader)
    # The data the test means: one aborted transaction, one open one bounding the LSO.
    assert [a.producer_id for a in expected["aborted_index"]] == [ABORTED]  # type: ignore[attr-defined]
    assert expected["ongoing"] == {open_from: COMMITTED}  # first offset -> producer
    assert expected["last_stable_offset"] == open_from < leader.high_watermark
    assert leader.num_segments > 1

    assert replicate(leader, follower) > 1
    assert transactional_view(follower) == expected

    # Recovery from disk (snapshots, transaction index files) gives the same state.
    manager, _ = logs["follower"]
    manager.close()
    logs["follower"] = open_log(tmp_path / "follower")
    _, follower = logs["follower"]
    assert transactional_view(follower) == expected

    # The follower becomes leader (epoch 1) and the coordinator completes the open
    # transaction there: its last stable offset moves up to the high watermark.
    follower.leader_epoch = 1
    follower.maybe_assign_epoch_start_offset(1, follower.log_end_offset)
    marker(follower, ControlType.COMMIT, COMMITTED)
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.producer_state.first_unstable_offset() is None
    assert follower.last_stable_offset == follower.high_watermark == follower.log_end_offset
