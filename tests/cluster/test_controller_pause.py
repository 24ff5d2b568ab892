"""A controller process frozen with SIGSTOP until its ZooKeeper session expires: another
broker becomes controller with the next epoch, and the frozen one, resumed with SIGCONT,
changes nothing (its write is refused) and resigns. Real processes, real ZooKeeper."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.broker.zk.controller_election import ControllerElector, read_controller_epoch

SESSION_TIMEOUT_MS = 2000
HELPER = Path(__file__).with_name("controller_process.py")


class ControllerProcess:
    def __init__(self, connect: str, broker_id: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPER), connect, str(broker_id), str(SESSION_TIMEOUT_MS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def expect(self, *wanted: str, timeout_s: float = 20.0) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if line.startswith(wanted):
                return line

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def controller_process(zk_connect: str) -> Iterator[ControllerProcess]:
    process = ControllerProcess(zk_connect, broker_id=1)
    yield process
    process.close()


@pytest.mark.slow
def test_a_paused_controller_is_replaced_and_cannot_write_after_sigcont(
    zk_connect: str, controller_process: ControllerProcess
) -> None:
    assert controller_process.expect("ELECTED") == "ELECTED 1"
    zk = ZkClient(ZkClientConfig(zk_connect, session_timeout_ms=SESSION_TIMEOUT_MS))
    zk.start()
    try:
        zk.kazoo.create("/data", b"initial")
        controller_process.send("write /data by-1")
        assert controller_process.expect("WRITE") == "WRITE OK"
        assert zk.kazoo.get("/data")[0] == b"by-1"
        elector = ControllerElector(zk, 2)
        elector.start()
        time.sleep(0.5)
        assert not elector.is_active

        os.kill(controller_process.proc.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        deadline = paused_at + 20
        while not elector.is_active:
            assert time.monotonic() < deadline, "nobody took over from the paused controller"
            time.sleep(0.05)
        # The takeover waited for the session to expire. ZooKeeper counts the timeout from
        # the last packet it heard, up to one ping interval (a third of the timeout) before
        # the pause, so half the timeout is a safe lower bound.
        assert time.monotonic() - paused_at >= SESSION_TIMEOUT_MS / 1000 / 2
        assert elector.active_epoch is not None and elector.active_epoch.epoch == 2
        elector.checked_commit(lambda txn: txn.set_data("/data", b"by-2"), "write")

        # The write is queued before the process runs again, so it is the first thing it
        # tries on waking, before it can have learnt anything from ZooKeeper.
        controller_process.send("write /data stale")
        os.kill(controller_process.proc.pid, signal.SIGCONT)
        assert controller_process.expect("WRITE") in ("WRITE MOVED", "WRITE NOCONN")
        assert controller_process.expect("RESIGNED") == "RESIGNED"
        # Once it knows, it keeps refusing rather than writing.
        controller_process.send("write /data stale-again")
        assert controller_process.expect("WRITE") == "WRITE MOVED"
        # An operation that captured the old epoch before the pause and writes after it, on
        # the process's new session, is refused by ZooKeeper itself: the epoch check.
        controller_process.send("stale-write /data stale-epoch")
        assert controller_process.expect("WRITE") == "WRITE MOVED"

        assert zk.kazoo.get("/data")[0] == b"by-2"
        epoch = read_controller_epoch(zk)
        assert epoch is not None and epoch.value == 2
        assert znodes.ControllerRegistration.decode(zk.kazoo.get("/controller")[0]).broker_id == 2
    finally:
        zk.close()
