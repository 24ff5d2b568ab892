"""Broker registration against a real ZooKeeper: the ephemeral znode and its JSON, the broker
epoch (czxid), a duplicate broker.id refused, and re-registration after a session expiry."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
from waiting import wait_for

from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.broker_registration import BrokerRegistrar
from spark_mq.broker.zk.client import SessionEvent, ZkClient
from spark_mq.errors import BrokerIdInUseError, ZooKeeperConnectionError


def _registration(
    broker_id: int, port: int = 9092, rack: str | None = "r1"
) -> Callable[[], znodes.BrokerRegistration]:
    return lambda: znodes.BrokerRegistration(
        broker_id=broker_id,
        endpoints=(znodes.EndPoint("PLAINTEXT", "127.0.0.1", port),),
        rack=rack,
        timestamp_ms=time.time_ns() // 1_000_000,
    )


def test_registration_writes_kafkas_json_and_the_epoch_is_the_czxid(
    clients: Callable[[], ZkClient],
) -> None:
    zk = clients()
    epoch = BrokerRegistrar(zk, _registration(1)).register()
    data, stat = zk.kazoo.get("/brokers/ids/1")
    assert stat.ephemeralOwner == zk.session_id
    assert epoch == stat.czxid
    obj = json.loads(data)
    assert obj["version"] == 5
    assert obj["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
    assert (obj["host"], obj["port"], obj["rack"]) == ("127.0.0.1", 9092, "r1")
    assert obj["timestamp"].isdigit()
    assert znodes.BrokerRegistration.decode(1, data).endpoint().port == 9092
    # A later registration (another broker) has a larger epoch.
    assert BrokerRegistrar(clients(), _registration(2)).register() > epoch


def test_a_second_broker_with_the_same_id_is_refused(clients: Callable[[], ZkClient]) -> None:
    BrokerRegistrar(clients(), _registration(1)).register()
    with pytest.raises(BrokerIdInUseError, match=r"same broker\.id"):
        BrokerRegistrar(clients(), _registration(1, port=9093)).register()


def test_registering_again_on_the_same_session_is_accepted(
    clients: Callable[[], ZkClient],
) -> None:
    # A create whose answer was lost is retried: the znode is ours, so that is not a conflict.
    zk = clients()
    registrar = BrokerRegistrar(zk, _registration(1))
    assert registrar.register() == registrar.register()


def test_session_expiry_unregisters_and_the_new_session_registers_again(
    zk_connect: str,
    clients: Callable[[], ZkClient],
    expire_session: Callable[[str, tuple[int, bytes]], None],
) -> None:
    zk = clients()
    events: list[SessionEvent] = []
    seen_new_session = threading.Event()

    class Recorder:
        def on_session_event(self, event: SessionEvent) -> None:
            events.append(event)
            if event is SessionEvent.NEW_SESSION:
                seen_new_session.set()

    zk.add_handler(Recorder())
    registrar = BrokerRegistrar(zk, _registration(1))
    first_epoch = registrar.register()
    old_session = zk.session_id
    watcher = clients()
    assert watcher.kazoo.exists("/brokers/ids/1") is not None

    expire_session(zk_connect, zk.kazoo.client_id)

    assert seen_new_session.wait(15)
    assert SessionEvent.EXPIRED in events
    wait_for(lambda: registrar.broker_epoch is not None, timeout_s=15.0)
    stat = watcher.kazoo.exists("/brokers/ids/1")
    assert stat is not None and stat.ephemeralOwner == zk.session_id != old_session
    assert registrar.broker_epoch == stat.czxid > first_epoch


def test_operations_needing_agreement_are_refused_while_not_connected(
    clients: Callable[[], ZkClient],
) -> None:
    zk = clients()
    zk.close()
    with pytest.raises(ZooKeeperConnectionError, match="retry"):
        zk.require_connected("controller election")
