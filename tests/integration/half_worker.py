"""A producer process of half messages for test_half_messages.py, with a SQLite database as
its local transaction store.

    python half_worker.py DIR DB GROUP MODE [COUNT]

Every local transaction inserts ``(message_id, value)`` into ``orders`` and commits; the
check-back answers COMMIT when the row is there and ROLLBACK when it is not (the local
transaction never committed). MODE:

- ``commit``: send COUNT messages whose local transaction commits, then exit.
- ``rollback``: send COUNT messages whose local transaction rolls back, then exit.
- ``die-after-local-commit``: commit the local transaction, print ``LOCAL-COMMITTED`` and
  wait to be killed: the end request is never sent.
- ``die-before-local-commit``: insert the row without committing, print ``IN-LOCAL-TXN``
  and wait to be killed: SQLite rolls the transaction back.
- ``serve``: send nothing; answer check-backs until killed (prints ``SERVING``).
- ``unknown``: send one message and answer UNKNOWN to it and to every check, until killed
  (prints ``SENT``, then ``CHECKED n`` for each check, ``n`` the check's ``check_count``).
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time

from spark_mq import LocalTransactionState, TransactionalMessage, TransactionalMessageProducer

TOPIC = "payments"


def connect(db: str) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("CREATE TABLE IF NOT EXISTS orders (message_id TEXT PRIMARY KEY, value BLOB)")
    return conn


class Listener:
    def __init__(self, db: str, mode: str) -> None:
        self.db = db
        self.mode = mode
        self.lock = threading.Lock()

    def execute_local_transaction(
        self, message: TransactionalMessage, arg: object
    ) -> LocalTransactionState:
        if self.mode == "unknown":
            return LocalTransactionState.UNKNOWN
        conn = connect(self.db)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO orders VALUES (?, ?)", (message.message_id, message.value))
        if self.mode == "die-before-local-commit":
            print("IN-LOCAL-TXN", flush=True)
            time.sleep(3600)
        if self.mode == "rollback":
            conn.execute("ROLLBACK")
            return LocalTransactionState.ROLLBACK
        conn.execute("COMMIT")
        if self.mode == "die-after-local-commit":
            print("LOCAL-COMMITTED", flush=True)
            time.sleep(3600)
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, message: TransactionalMessage) -> LocalTransactionState:
        if self.mode == "unknown":
            print("CHECKED", message.check_count, flush=True)
            return LocalTransactionState.UNKNOWN
        with self.lock:
            row = (
                connect(self.db)
                .execute("SELECT 1 FROM orders WHERE message_id = ?", (message.message_id,))
                .fetchone()
            )
        return LocalTransactionState.COMMIT if row else LocalTransactionState.ROLLBACK


def main() -> None:
    path, db, group, mode = sys.argv[1:5]
    count = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    connect(db).close()
    producer = TransactionalMessageProducer(path, producer_group=group, listener=Listener(db, mode))
    if mode == "serve":
        print("SERVING", flush=True)
        time.sleep(3600)
    for i in range(count):
        result = producer.send(TOPIC, f"{mode}-{i}".encode(), key=f"{mode}-{i}".encode())
        print(result.state.value, result.offset, flush=True)
    if mode == "unknown":
        print("SENT", flush=True)
        time.sleep(3600)
    producer.close()


if __name__ == "__main__":
    main()
