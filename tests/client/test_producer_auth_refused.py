"""A producer the broker refuses (spark_mq/client/sender.py, producer.py), as Kafka's does:
the pending sends fail with the typed authentication error, the next ``send()`` and
``flush()`` raise it, ``close()`` works, and no thread dies with a logged traceback. The
consumer raises the typed error from ``poll()``. A real broker (tests/inprocess_broker.py)
refuses with a wrong CA (TLS) and a wrong password (SASL).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from inprocess_broker import InProcessBroker
from tls_certs import BrokerPki

from spark_mq import Admin, Consumer, Producer, UserScramCredentialUpsertion
from spark_mq.errors import AuthenticationError, SslAuthenticationError

TOPIC = "refused"
#: The broker closes a connection idle this long: how the test makes the producer reconnect.
IDLE_MS = 1500


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> BrokerPki:
    return BrokerPki.create(tmp_path_factory.mktemp("auth-pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: BrokerPki) -> Iterator[InProcessBroker]:
    served = InProcessBroker(
        tmp_path_factory.mktemp("auth-broker"),
        pki.broker.cert,
        pki.broker.key,
        **{"connections.max.idle.ms": str(IDLE_MS)},
    )
    with Admin(bootstrap_servers=served.plain) as admin:
        admin.create_topic(TOPIC, 1)
    yield served
    served.close()


def set_password(broker: InProcessBroker, user: str, password: str) -> None:
    with Admin(bootstrap_servers=broker.plain) as admin:
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, "SCRAM-SHA-512", password)]
        )


def sasl(broker: InProcessBroker, user: str, password: str, **extra: object) -> dict[str, Any]:
    return {
        "bootstrap_servers": broker.sasl,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        **extra,
    }


def no_traceback_logged(caplog: pytest.LogCaptureFixture) -> None:
    logged = [r for r in caplog.records if r.exc_info is not None]
    assert not logged, [r.getMessage() for r in logged]


def test_a_producer_refused_by_tls_raises_the_typed_error(
    broker: InProcessBroker, pki: BrokerPki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    producer = Producer(
        bootstrap_servers=broker.ssl,
        **{"security.protocol": "SSL", "ssl.ca.location": str(pki.other_ca)},
    )
    started = time.monotonic()
    with pytest.raises(SslAuthenticationError, match="CA this side does not trust"):
        producer.send(TOPIC, b"a")
    with pytest.raises(SslAuthenticationError):
        producer.send(TOPIC, b"b")
    with pytest.raises(SslAuthenticationError):
        producer.flush()
    producer.close()
    assert time.monotonic() - started < 20, "refused at once, not retried until a timeout"
    no_traceback_logged(caplog)


def test_a_producer_refused_on_reconnecting_fails_its_pending_sends(
    broker: InProcessBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """The password changes while the producer runs, with records lingering in its buffer;
    the broker closes the idle connections; the producer reconnects to be refused: the
    lingering records fail with AuthenticationError at once, not after delivery.timeout.ms."""
    caplog.set_level(logging.WARNING)
    set_password(broker, "dave", "dave-1")
    config = sasl(broker, "dave", "dave-1", linger_ms=20000, delivery_timeout_ms=60000)
    producer = Producer(**config)
    try:
        producer.send(TOPIC, b"before")
        producer.flush()  # sends at once, whatever linger.ms says
        set_password(broker, "dave", "dave-2")
        pending = [producer.send(TOPIC, f"lingering-{i}".encode()) for i in range(3)]
        started = time.monotonic()
        for future in pending:
            with pytest.raises(AuthenticationError, match="dave"):
                future.get(30)
        assert time.monotonic() - started < 15, "failed at once, not after delivery.timeout.ms"
        with pytest.raises(AuthenticationError):
            producer.send(TOPIC, b"next")
        with pytest.raises(AuthenticationError):
            producer.flush()
    finally:
        producer.close()
    no_traceback_logged(caplog)


def test_a_consumer_refused_raises_from_poll(broker: InProcessBroker, pki: BrokerPki) -> None:
    set_password(broker, "erin", "erin-1")
    consumer = Consumer(**sasl(broker, "erin", "wrong"), group_id="g-erin")
    consumer.subscribe([TOPIC])
    started = time.monotonic()
    try:
        with pytest.raises(AuthenticationError, match="erin"):
            consumer.poll(timeout_ms=20000)
    finally:
        consumer.close()
    assert time.monotonic() - started < 15, "refused at once, not retried until a timeout"
    tls = Consumer(
        bootstrap_servers=broker.ssl,
        group_id="g-tls",
        **{"security.protocol": "SSL", "ssl.ca.location": str(pki.other_ca)},
    )
    try:
        tls.subscribe([TOPIC])
        with pytest.raises(SslAuthenticationError):
            tls.poll(timeout_ms=20000)
    finally:
        tls.close()
