"""kazoo's connection states handled as Kafka does, against a real ZooKeeper: a controller
whose session expires stops at once, before any new session exists; while the connection is
suspended (ZooKeeper down) agreement is refused and the session survives a short outage."""

from __future__ import annotations

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
def test_a_short_outage_suspends_agreement_and_keeps_the_session(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    # A server of this test's own (the session's server is shared), restarted on the same
    # port and data directory: ZooKeeper keeps sessions across a restart.
    first = ZooKeeperServer(ZooKeeperServerConfig(data_dir=tmp_path / "zk"))
    first.start()
    port = first.port
    assert port is not None
    again = ZooKeeperServer(ZooKeeperServerConfig(data_dir=tmp_path / "zk", client_port=port))
    zk = ZkClient(ZkClientConfig(f"127.0.0.1:{port}", session_timeout_ms=20_000))
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

        first.stop()
        assert recorder.wait_for(SessionEvent.SUSPENDED) is False
        with pytest.raises(ZooKeeperConnectionError, match="needs ZooKeeper's agreement"):
            zk.require_connected("controller election")

        again.start()
        recorder.wait_for(SessionEvent.RECONNECTED)
        assert zk.session_id == session
        assert registrar.broker_epoch == epoch
        stat = zk.kazoo.exists(znodes.broker_path(1))
        assert stat is not None and stat.czxid == epoch
        assert SessionEvent.EXPIRED not in [e for e, _ in recorder.seen]
    finally:
        zk.close()
        first.stop()
        again.stop()
