"""kazoo's connection states handled as Kafka does, against a real ZooKeeper: a controller
whose session expires stops at once, before any new session exists; while the connection is
suspended (ZooKeeper frozen) agreement is refused, and the session survives."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.broker_registration import BrokerRegistrar
from spark_mq.broker.zk.client import SessionEvent, ZkClient, ZkClientConfig
from spark_mq.broker.zk.controller_election import ControllerElector
from spark_mq.cluster.zookeeper_server import ZooKeeperServer, ZooKeeperServerConfig
from spark_mq.errors import ZooKeeperConnectionError


class Recorder:
    def __init__(self, probe: Callable[[], object]) -> None:
        self.probe = probe
        self.seen: list[tuple[SessionEvent, object]] = []
        self.changed = threading.Condition()

    def on_session_event(self, event: SessionEvent) -> None:
        with self.changed:
            self.seen.append((event, self.probe()))
            self.changed.notify_all()

    def wait_for(self, event: SessionEvent, timeout_s: float = 20) -> object:
        with self.changed:
            assert self.changed.wait_for(
                lambda: any(e is event for e, _ in self.seen), timeout_s
            ), f"no {event} in {self.seen}"
            return next(p for e, p in self.seen if e is event)


def test_a_controller_stops_at_once_when_its_session_expires(
    zk_connect: str, expire_session: Callable[[str, tuple[int, bytes]], None]
) -> None:
    zk = ZkClient(ZkClientConfig(zk_connect, session_timeout_ms=4000))
    zk.start()
    try:
        resigned = threading.Event()
        elector = ControllerElector(zk, 1, on_resigned=resigned.set)
        elector.start()
        deadline = time.monotonic() + 15
        while not elector.is_active:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # Added after the elector, so it runs after the elector's handler for each event:
        # it sees what the elector did with the expiry, before any new session.
        recorder = Recorder(lambda: elector.is_active)
        zk.add_handler(recorder)

        expire_session(zk_connect, zk.kazoo.client_id)

        assert recorder.wait_for(SessionEvent.EXPIRED) is False
        assert resigned.is_set()
        # On its new session the lone broker wins again, with the next epoch.
        recorder.wait_for(SessionEvent.NEW_SESSION)
        deadline = time.monotonic() + 15
        while not elector.is_active:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert elector.active_epoch is not None and elector.active_epoch.epoch == 2
    finally:
        zk.close()


@pytest.mark.slow
def test_a_frozen_zookeeper_suspends_agreement_and_the_session_survives(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    # A server of this test's own (the session's server is shared), frozen with SIGSTOP for
    # less than the session timeout. (A restart would also do, but a client that connects
    # while the restarted server loads its data can hang in the handshake for a whole
    # session timeout: ZooKeeper 3.8 accepts connections before it is ready.)
    server = ZooKeeperServer(ZooKeeperServerConfig(data_dir=tmp_path / "zk"))
    server.start()
    assert server.pid is not None
    # kazoo notices a silent server within 2/3 of the session timeout (its read timeout);
    # ZooKeeper expires the session only after the whole timeout: 4 s of margin.
    zk = ZkClient(ZkClientConfig(server.connect_string, session_timeout_ms=12_000))
    zk.start()
    try:
        recorder = Recorder(lambda: zk.connected)
        zk.add_handler(recorder)
        registrar = BrokerRegistrar(
            zk,
            lambda: znodes.BrokerRegistration(
                1, (znodes.EndPoint("PLAINTEXT", "127.0.0.1", 9092),), None, 0
            ),
        )
        epoch = registrar.register()
        session = zk.session_id

        os.kill(server.pid, signal.SIGSTOP)
        try:
            assert recorder.wait_for(SessionEvent.SUSPENDED, timeout_s=15) is False
            with pytest.raises(ZooKeeperConnectionError, match="needs ZooKeeper's agreement"):
                zk.require_connected("controller election")
        finally:
            os.kill(server.pid, signal.SIGCONT)

        recorder.wait_for(SessionEvent.RECONNECTED)
        assert zk.session_id == session
        assert registrar.broker_epoch == epoch
        stat = zk.kazoo.exists(znodes.broker_path(1))
        assert stat is not None and stat.czxid == epoch
        assert SessionEvent.EXPIRED not in [e for e, _ in recorder.seen]
    finally:
        zk.close()
        server.stop()


def test_a_slow_handler_does_not_hold_up_the_connection(
    zk_connect: str, expire_session: Callable[[str, tuple[int, bytes]], None]
) -> None:
    # Handlers run on the event thread, not on kazoo's connection thread: while one blocks,
    # kazoo still reconnects and keeps the new session alive past its timeout.
    zk = ZkClient(ZkClientConfig(zk_connect, session_timeout_ms=2000))
    zk.start()
    release = threading.Event()
    blocked = threading.Event()

    class Slow:
        def on_session_event(self, event: SessionEvent) -> None:
            if event is SessionEvent.EXPIRED:
                blocked.set()
                release.wait(30)

    zk.add_handler(Slow())
    try:
        old = zk.session_id
        expire_session(zk_connect, zk.kazoo.client_id)
        assert blocked.wait(15)
        deadline = time.monotonic() + 15
        while not (zk.connected and zk.session_id not in (0, old)):
            assert time.monotonic() < deadline, "kazoo did not reconnect while a handler blocked"
            time.sleep(0.05)
        new = zk.session_id
        time.sleep(3)  # longer than the session timeout: pings must have gone on
        assert zk.kazoo.exists("/") is not None and zk.session_id == new
    finally:
        release.set()
        zk.close()
