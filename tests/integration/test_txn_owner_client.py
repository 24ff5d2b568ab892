"""``Admin.txn_owner``: one owner's decisions against a real broker, one call per intent
(commit a batch, a replayed batch, abort and close the scope), with the owner's binding to
an instance."""

from __future__ import annotations

from typing import Any

import pytest

from spark_mq import Admin, OwnerInstanceConflictError, Producer, ProducerFencedError, UsageError
from spark_mq.client.transactions import PreparedTransaction


def _prepared(servers: str, txn_id: str, value: bytes) -> PreparedTransaction:
    producer = Producer(bootstrap_servers=servers, transactional_id=txn_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", value, partition=0).get(timeout=10)
        return producer.prepare_transaction()
    finally:
        producer.close()  # keeps the transaction prepared


def test_an_owner_commits_replays_and_closes_its_scope(broker: Any) -> None:
    servers = str(broker.address)
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic("t", partitions=1)
        job = admin.txn_owner("job", instance="run-1")
        batch = [_prepared(servers, f"job/{n}", b"v%d" % n) for n in range(2)]
        leftover = _prepared(servers, "job/old", b"stale")
        done = job.commit(batch, 0)
        assert done.committed and done.last_sequence == 0
        assert done.aborted_others == (leftover.transactional_id,)
        assert job.last_sequence() == 0
        # The same batch again (a driver that died before recording it): aborted instead.
        replay = job.commit([_prepared(servers, "job/2", b"again")], 0)
        assert replay.already_committed and not replay.committed
        assert admin.describe_transactions(["job/2"])[0].state == "CompleteAbort"
        # Another instance of the owner decides nothing, commit or abort.
        other = admin.txn_owner("job", instance="run-2")
        waiting = _prepared(servers, "job/3", b"other")
        with pytest.raises(OwnerInstanceConflictError, match="belongs to instance 'run-1'"):
            other.commit([waiting], 1)
        with pytest.raises(OwnerInstanceConflictError):
            other.abort([waiting], close=True)
        assert admin.describe_transactions(["job/3"])[0].state == "Prepared"
        # Closing the scope ends what is open under it, and no attempt can start again.
        closed = job.abort([], close=True)
        assert closed.aborted_others == ("job/3",) and not closed.committed
    refused = Producer(bootstrap_servers=servers, transactional_id="job/4")
    with pytest.raises(ProducerFencedError, match="owner 'job', which is closed"):
        refused.init_transactions()
    refused.close()


def test_an_owner_needs_a_name_and_a_non_empty_instance(broker: Any) -> None:
    with Admin(bootstrap_servers=str(broker.address)) as admin:
        with pytest.raises(UsageError, match="non-empty name"):
            admin.txn_owner("")
        with pytest.raises(UsageError, match="instance of owner 'o'"):
            admin.txn_owner("o", instance="")
        with pytest.raises(UsageError, match="sequence >= 0"):
            admin.txn_owner("o").commit([], -1)
