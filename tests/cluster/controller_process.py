"""A broker-like process that takes part in controller election, for the SIGSTOP tests.

Usage: python controller_process.py ZK_CONNECT BROKER_ID SESSION_TIMEOUT_MS
Prints ``ELECTED <epoch>`` and ``RESIGNED`` as they happen. Reads commands on stdin:
``write <path> <value>`` makes an epoch-checked write and prints ``WRITE OK``,
``WRITE MOVED`` (refused by the epoch check or not controller) or ``WRITE NOCONN``
(no usable session).
"""

from __future__ import annotations

import sys

from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.broker.zk.controller_election import ControllerElector
from spark_mq.errors import ControllerMovedError, ZooKeeperConnectionError


def main() -> None:
    connect, broker_id, session_timeout_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    zk = ZkClient(ZkClientConfig(connect, session_timeout_ms=session_timeout_ms))
    zk.start()

    def say(line: str) -> None:
        print(line, flush=True)

    elector = ControllerElector(
        zk,
        broker_id,
        on_elected=lambda epoch: say(f"ELECTED {epoch.epoch}"),
        on_resigned=lambda: say("RESIGNED"),
    )
    elector.start()
    say("READY")
    for line in sys.stdin:
        command, *args = line.split()
        if command == "write":
            path, value = args

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
