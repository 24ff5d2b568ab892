"""A transactional copier process for ``test_txn_copier.py`` (Kafka's TransactionalMessageCopier).

``python txn_copier.py DIR COPIER_ID INPUT OUTPUT GROUP`` joins consumer group GROUP (static
member ``copier-COPIER_ID``, read_committed) on the local broker of DIR, and for every batch
``poll()`` returns: begins a transaction, sends each input value to OUTPUT as
``value,token,size`` (``token`` names the transaction, ``size`` is its record count, so a
reader can tell whether it saw a transaction whole), adds the consumed positions with
``send_offsets_to_transaction(offsets, consumer.group_metadata())`` and commits.

Any failure of a transaction (the broker was killed, a rebalance fenced the consumer's
generation, the coordinator aborted the transaction) aborts it and rewinds the consumer to
the group's committed offsets, so the records are copied again in a new transaction; a fenced
producer is replaced by a new one (whose ``init_transactions()`` aborts whatever the old one
left open). The transactional id is fixed per copier, so a copier restarted after SIGKILL
fences its previous incarnation. SIGTERM stops the loop and exits 0.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

from spark_mq import Consumer, Producer, ProducerFencedError, SparkMQError, TopicPartition


def new_producer(path: str, copier_id: str) -> Producer:
    while True:
        producer = Producer(path=path, transactional_id=f"copier-{copier_id}", linger_ms=2)
        try:
            producer.init_transactions()
        except SparkMQError as exc:
            logging.warning("init_transactions failed (%s); retrying", exc)
            producer.close()
            time.sleep(0.2)
            continue
        return producer


def rewind(consumer: Consumer) -> None:
    """Every assigned partition back to the group's committed offset (or the beginning)."""
    while True:
        try:
            assigned = sorted(consumer.assignment())
            committed = consumer.committed(assigned)
            for tp in assigned:
                found = committed.get(tp)
                if found is None:
                    consumer.seek_to_beginning([tp])
                else:
                    consumer.seek(tp, found.offset)
        except SparkMQError as exc:
            logging.warning("rewind failed (%s); retrying", exc)
            time.sleep(0.2)
            continue
        return


def main() -> int:
    path, copier_id, source, sink, group = sys.argv[1:6]
    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    consumer = Consumer(
        path=path,
        group_id=group,
        group_instance_id=f"copier-{copier_id}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
        max_poll_records=100,
    )
    consumer.subscribe([source])
    producer = new_producer(path, copier_id)
    number = 0
    pid = os.getpid()
    while not stop:
        try:
            batch = consumer.poll(timeout_ms=200)
        except SparkMQError as exc:
            logging.warning("poll failed (%s)", exc)
            time.sleep(0.1)
            continue
        if not batch:
            continue
        size = sum(len(records) for records in batch.values())
        number += 1
        token = f"{copier_id}.{pid}.{number}"
        try:
            producer.begin_transaction()
            for records in batch.values():
                for r in records:
                    value = r.value or b""
                    producer.send(sink, value + f",{token},{size}".encode())
            offsets = {
                TopicPartition(tp.topic, tp.partition): records[-1].offset + 1
                for tp, records in batch.items()
            }
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            producer.commit_transaction()
        except ProducerFencedError as exc:
            logging.warning("fenced (%s): a new producer", exc)
            producer.close()
            producer = new_producer(path, copier_id)
            rewind(consumer)
        except SparkMQError as exc:
            logging.warning("transaction %s failed (%s): abort and rewind", token, exc)
            try:
                producer.abort_transaction()
            except SparkMQError as abort_exc:
                logging.warning("abort failed (%s): a new producer", abort_exc)
                producer.close()
                producer = new_producer(path, copier_id)
            rewind(consumer)
    producer.close()
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
