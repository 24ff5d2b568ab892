"""``spark-mq transactions list|describe|abort`` on the session's local broker: an open
transaction and a prepared one are listed (with filters), described, and aborted; errors and
bad options give the documented exit statuses."""

from __future__ import annotations

import json
from typing import Any

from spark_mq import Admin, Producer, TopicPartition
from spark_mq.cli.common import EXIT_ERROR, EXIT_USAGE


def open_transaction(path: str, topic: str, txn_id: str, *, prepare: bool) -> Producer:
    with Admin(path=path) as admin:
        admin.create_topic(topic, partitions=2)
    producer = Producer(path=path, transactional_id=txn_id)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"v", partition=1)
    producer.flush()
    if prepare:
        producer.prepare_transaction()
    return producer


def test_list_describe_and_abort_an_open_transaction(cli: Any, mq_path: str, topic: str) -> None:
    txn_id = f"cli-open-{topic}"
    producer = open_transaction(mq_path, topic, txn_id, prepare=False)
    try:
        listed = cli("transactions", "list", "--path", mq_path, "--prefix", txn_id, "--json")
        assert listed.code == 0, listed.err
        (row,) = json.loads(listed.out)
        assert row["state"] == "Ongoing"
        assert row["duration_ms"] >= 0
        table = cli("transactions", "list", "--path", mq_path, "--duration-ms", "0")
        assert txn_id in table.out and "Ongoing" in table.out
        described = cli("transactions", "describe", "--path", mq_path, "--transactional-id", txn_id)
        assert described.code == 0, described.err
        assert "state: Ongoing" in described.out
        assert f"partitions: {topic}-1" in described.out
        aborted = cli("transactions", "abort", "--path", mq_path, "--transactional-id", txn_id)
        assert aborted.code == 0, aborted.err
        assert f"Aborted the transaction of {txn_id}" in aborted.out
        again = cli("transactions", "abort", "--path", mq_path, "--transactional-id", txn_id)
        assert again.code == EXIT_ERROR
        assert "nothing to abort" in again.err
    finally:
        producer.close()


def test_list_filters_by_state_and_producer_id(cli: Any, mq_path: str, topic: str) -> None:
    txn_id = f"cli-prepared-{topic}"
    producer = open_transaction(mq_path, topic, txn_id, prepare=True)
    producer.close()
    try:
        prepared = json.loads(
            cli("transactions", "list", "--path", mq_path, "--state", "prepared", "--json").out
        )
        assert txn_id in [t["transactional_id"] for t in prepared]
        assert all(t["state"] == "Prepared" for t in prepared)
        pid = next(t["producer_id"] for t in prepared if t["transactional_id"] == txn_id)
        by_pid = json.loads(
            cli("transactions", "list", "--path", mq_path, "--producer-id", str(pid), "--json").out
        )
        assert [t["transactional_id"] for t in by_pid] == [txn_id]
        none = cli("transactions", "list", "--path", mq_path, "--prefix", "no-such-prefix-")
        assert none.code == 0 and "No transactions." in none.out
    finally:
        with Admin(path=mq_path) as admin:
            admin.abort_transaction(txn_id)
            assert admin.describe_transactions([txn_id])[0].state in (
                "PrepareAbort",
                "CompleteAbort",
            )
            end = admin.list_offsets({TopicPartition(topic, 1): "latest"})
            assert end[TopicPartition(topic, 1)].offset >= 1


def test_describe_of_an_unknown_id_fails(cli: Any, mq_path: str) -> None:
    result = cli("transactions", "describe", "--path", mq_path, "--transactional-id", "nope-x")
    assert result.code == EXIT_ERROR
    assert "nope-x" in result.err


def test_bad_options_are_usage_errors(cli: Any, mq_path: str) -> None:
    assert cli("transactions", "list", "--path", mq_path, "--state", "Bogus").code == EXIT_USAGE
    assert cli("transactions", "list", "--path", mq_path, "--duration-ms", "-5").code == EXIT_USAGE
    assert cli("transactions", "describe", "--path", mq_path).code == EXIT_USAGE
