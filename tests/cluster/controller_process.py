"""A broker-like process that takes part in controller election, for the SIGSTOP tests.

Usage: python controller_process.py ZK_CONNECT BROKER_ID SESSION_TIMEOUT_MS
Prints ``ELECTED <epoch>`` and ``RESIGNED`` as they happen. Reads commands on stdin:
``write <path> <value>`` makes an epoch-checked write and prints ``WRITE OK``,
``WRITE MOVED`` (refused by the epoch check or not controller) or ``WRITE NOCONN``
(no usable session). ``stale-write <path> <value>`` waits for a session and writes with
the epoch this process was first elected with, whatever it knows since: the write of a
controller operation that began before a pause and resumes after it.
"""

from __future__ import annotations

import sys

from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.broker.zk.controller_election import (
    ControllerElector,
    ControllerEpoch,
    checked_commit,
)
from spark_mq.errors import ControllerMovedError, ZooKeeperConnectionError


def main() -> None:
    connect, broker_id, session_timeout_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    zk = ZkClient(ZkClientConfig(connect, session_timeout_ms=session_timeout_ms))
    zk.start()

    def say(line: str) -> None:
        print(line, flush=True)

    elected: list[ControllerEpoch] = []

    def on_elected(epoch: ControllerEpoch) -> None:
        elected.append(epoch)
        say(f"ELECTED {epoch.epoch}")

    elector = ControllerElector(
        zk, broker_id, on_elected=on_elected, on_resigned=lambda: say("RESIGNED")
    )
    elector.start()
    say("READY")
    for line in sys.stdin:
        command, *args = line.split()
        path, value = args
        if command == "stale-write":
            zk.wait_connected(10_000)

            def add_stale(txn: object, path: str = path, value: str = value) -> None:
                txn.set_data(path, value.encode())  # type: ignore[attr-defined]

            try:
                checked_commit(zk, elected[0], add_stale, f"write {path}")
                say("WRITE OK")
            except ControllerMovedError:
                say("WRITE MOVED")
            except ZooKeeperConnectionError:
                say("WRITE NOCONN")
        if command == "write":

            def add(txn: object, path: str = path, value: str = value) -> None:
                txn.set_data(path, value.encode())  # type: ignore[attr-defined]

            try:
                elector.checked_commit(add, f"write {path}")
                say("WRITE OK")
            except ControllerMovedError:
                say("WRITE MOVED")
            except ZooKeeperConnectionError:
                say("WRITE NOCONN")
    zk.close()


if __name__ == "__main__":
    main()
