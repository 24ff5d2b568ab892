"""SASL re-authentication (Kafka's KIP-368, issue 33) on a real broker process with
``connections.max.reauth.ms``: a producer and a consumer keep working across several
re-authentications, counted in the broker's Prometheus metrics; a raw connection that does
not re-authenticate is closed at its first request after expiry, and one that does goes on;
a user removed with ``spark-mq users remove`` (or whose password changed) loses its
connection at the next re-authentication with an AuthenticationError naming mechanism and
user; a re-authentication as another user, or with another mechanism, is refused.

One broker serves the module: sessions last 2 s for SCRAM-SHA-512 (``connections.max.reauth.ms``)
and 1.5 s for PLAIN on the SASL_PLAINTEXT listener (the per-listener, per-mechanism key).
Its authorizer lets everyone do everything (no ACL is the subject here); the tests administer
users as the OS user over the Unix socket.
"""

from __future__ import annotations

import logging
import socket
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from secured_broker import SecuredBroker

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.dir_files import Endpoint
from spark_mq.cli import main as spark_mq_cli
from spark_mq.errors import AuthenticationError
from spark_mq.protocol import metadata
from spark_mq.protocol.api import APIS, encode_request, spec_for_request
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import SIZE, decode_response
from spark_mq.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

SCRAM = "SCRAM-SHA-512"
SCRAM_LIFETIME_MS = 2000
PLAIN_LIFETIME_MS = 1500
FAST = {"request_timeout_ms": 5000}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    served = SecuredBroker.start(
        tmp_path_factory.mktemp("reauth"),
        "SASL_PLAINTEXT",
        {
            "sasl.enabled.mechanisms": f"PLAIN,{SCRAM}",
            "connections.max.reauth.ms": str(SCRAM_LIFETIME_MS),
            "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": str(PLAIN_LIFETIME_MS),
            "allow.everyone.if.no.acl.found": "true",
            "metrics.port": "0",
        },
    )
    yield served
    served.stop()


def config(broker: SecuredBroker, user: str, password: str, mechanism: str = SCRAM) -> Any:
    return {
        "bootstrap_servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def scrape(broker: SecuredBroker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    endpoint = Endpoint.read(broker.root)
    assert endpoint is not None and endpoint.metrics_port is not None
    url = f"http://127.0.0.1:{endpoint.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def reauths(samples: Any, mechanism: str, result: str) -> float:
    key = (
        "spark_mq_sasl_reauthentications_total",
        (("mechanism", mechanism), ("result", result)),
    )
    return float(samples[key])


def killed(samples: Any) -> float:
    return float(samples[("spark_mq_expired_connections_killed_total", ())])


# -- raw connections ----------------------------------------------------------------------


class Raw:
    """A bare socket to the SASL listener that sends exactly what the test says."""

    def __init__(self, broker: SecuredBroker) -> None:
        host, _, port = broker.bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self._cid = 0

    def call(self, request: Any) -> Any:
        """The decoded response, or None when the broker closed the connection instead."""
        self._cid += 1
        head, body = encode_request(request, correlation_id=self._cid)
        try:
            self.sock.sendall(head + body)
            size_bytes = self._read(SIZE.size)
            if size_bytes is None:
                return None
            (size,) = SIZE.unpack(size_bytes)
            frame = self._read(size)
        except (ConnectionResetError, BrokenPipeError):
            return None
        if frame is None:
            return None
        parsed = decode_response(memoryview(frame))
        return APIS[spec_for_request(request).key].decode_response(parsed.body)

    def _read(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def plain(self, user: str, password: str) -> Any:
        """SaslHandshake and SaslAuthenticate with PLAIN; the SaslAuthenticate response."""
        handshake = self.call(SaslHandshakeRequest("PLAIN"))
        assert handshake.error_code == 0, handshake
        return self.call(SaslAuthenticateRequest(f"\0{user}\0{password}".encode()))

    def close(self) -> None:
        self.sock.close()


def test_producer_and_consumer_keep_working_across_reauthentications(
    broker: SecuredBroker, caplog: pytest.LogCaptureFixture
) -> None:
    broker.add_user("alice", "alice-secret", SCRAM)
    before = scrape(broker)
    settings = config(broker, "alice", "alice-secret")
    sent: list[bytes] = []
    received: list[bytes] = []
    with (
        caplog.at_level(logging.WARNING, logger="spark_mq.client"),
        Producer(**settings, linger_ms=0, **FAST) as producer,
        Consumer(**settings, auto_offset_reset="earliest", **FAST) as consumer,
    ):
        consumer.assign([TopicPartition("reauth", 0)])
        producer.send("reauth", b"first", partition=0).get(10)
        sent.append(b"first")
        # The consumer finds its position first (the short polls below leave a first
        # ListOffsets too little time).
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                received += [r.value for r in records]
        # 4.2 s of traffic: every connection's 2 s session is re-authenticated at least
        # twice, between a producer's sends and a consumer's long polls.
        deadline = time.monotonic() + 4.2
        while time.monotonic() < deadline:
            value = f"v{len(sent)}".encode()
            producer.send("reauth", value, partition=0)
            sent.append(value)
            for records in consumer.poll(timeout_ms=40).values():
                received += [r.value for r in records]
        producer.flush()
        deadline = time.monotonic() + 20
        while len(received) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                received += [r.value for r in records]
    after = scrape(broker)
    assert received == sent and len(sent) > 20
    # Both clients' data and metadata connections re-authenticated: at least two each for
    # the producer's and the consumer's data connections.
    assert reauths(after, SCRAM, "success") - reauths(before, SCRAM, "success") >= 4
    assert reauths(after, SCRAM, "failure") == reauths(before, SCRAM, "failure")
    # No connection outlived its session: every one re-authenticated in time, and the
    # clients saw nothing (no connection lost, no request retried).
    assert killed(after) == killed(before)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_a_connection_that_does_not_reauthenticate_is_closed(broker: SecuredBroker) -> None:
    broker.add_user("bystander", "bystander-secret", SCRAM)
    before = scrape(broker)
    idle, diligent = Raw(broker), Raw(broker)
    try:
        for raw in (idle, diligent):
            answer = raw.plain("bystander", "bystander-secret")
            # The listener's PLAIN lifetime (listener.name.sasl_plaintext.plain...).
            assert answer.error_code == 0 and answer.session_lifetime_ms == PLAIN_LIFETIME_MS
            assert raw.call(metadata.MetadataRequest([])).brokers
        time.sleep(PLAIN_LIFETIME_MS / 1000 + 0.1)
        # Past its session, anything but SaslHandshake closes the connection unanswered...
        assert idle.call(metadata.MetadataRequest([])) is None
        # ...while a connection that re-authenticates first goes on, with a new lifetime.
        again = diligent.plain("bystander", "bystander-secret")
        assert again.error_code == 0 and again.session_lifetime_ms == PLAIN_LIFETIME_MS
        assert diligent.call(metadata.MetadataRequest([])).brokers
    finally:
        idle.close()
        diligent.close()
    after = scrape(broker)
    assert killed(after) - killed(before) == 1
    assert reauths(after, "PLAIN", "success") - reauths(before, "PLAIN", "success") == 1
    assert "its SASL session expired" in broker.log()


def test_a_removed_user_loses_its_connection_at_the_next_reauthentication(
    broker: SecuredBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.add_user("leaving", "leaving-secret", SCRAM)
    broker.add_user("rotated", "old-secret", SCRAM)
    before = scrape(broker)
    leaving = config(broker, "leaving", "leaving-secret")
    with (
        Producer(**leaving, linger_ms=0, **FAST) as producer,
        Consumer(**leaving, auto_offset_reset="earliest", **FAST) as consumer,
        Admin(**config(broker, "rotated", "old-secret"), **FAST) as admin,
    ):
        producer.send("leaving", b"before", partition=0).get(10)
        consumer.assign([TopicPartition("leaving", 0)])
        deadline = time.monotonic() + 10
        while not consumer.poll(timeout_ms=200) and time.monotonic() < deadline:
            pass
        assert admin.list_topics()
        assert spark_mq_cli(["users", "remove", "leaving", "--path", str(broker.root)]) == 0
        assert "Removed SCRAM-SHA-512 credentials of user 'leaving'" in capsys.readouterr().out
        broker.add_user("rotated", "new-secret", SCRAM)
        # Each keeps its connections until their next re-authentication, then fails it.
        calls: dict[str, Any] = {
            "producer": lambda: producer.send("leaving", b"after", partition=0).get(10),
            "consumer": lambda: consumer.poll(timeout_ms=50),
            "admin": admin.list_topics,
        }
        errors: dict[str, AuthenticationError] = {}
        deadline = time.monotonic() + 10
        while len(errors) < len(calls) and time.monotonic() < deadline:
            for client, call in calls.items():
                if client not in errors:
                    try:
                        call()
                    except AuthenticationError as exc:
                        errors[client] = exc
            time.sleep(0.05)
        # From then on every call is refused the same way (a new connection authenticates
        # afresh and is refused): none quietly returns nothing.
        for call in calls.values():
            with pytest.raises(AuthenticationError, match=r"user '(leaving|rotated)'"):
                call()
    assert sorted(errors) == sorted(calls)
    for client, user, secret in (
        ("producer", "leaving", "leaving-secret"),
        ("consumer", "leaving", "leaving-secret"),
        ("admin", "rotated", "old-secret"),
    ):
        error = errors[client]
        assert error.mechanism == SCRAM and error.user == user
        text = str(error)
        assert f"{SCRAM} re-authentication of user {user!r}" in text
        assert secret not in text
    after = scrape(broker)
    assert reauths(after, SCRAM, "failure") - reauths(before, SCRAM, "failure") >= 3
    assert "leaving-secret" not in broker.log() and "old-secret" not in broker.log()


def test_reauthentication_as_another_user_or_mechanism_is_refused(
    broker: SecuredBroker,
) -> None:
    broker.add_user("carol", "carol-secret", SCRAM)
    broker.add_user("dave", "dave-secret", SCRAM)
    before = scrape(broker)
    impostor, switcher = Raw(broker), Raw(broker)
    try:
        # Dave's password is right, but the connection is Carol's.
        assert impostor.plain("carol", "carol-secret").error_code == 0
        refused = impostor.plain("dave", "dave-secret")
        assert refused.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "User:carol to User:dave" in refused.error_message
        assert impostor.call(metadata.MetadataRequest([])) is None
        # A connection keeps its mechanism: the answer names the one it may use.
        assert switcher.plain("carol", "carol-secret").error_code == 0
        handshake = switcher.call(SaslHandshakeRequest(SCRAM))
        assert handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert handshake.mechanisms == ["PLAIN"]
        assert switcher.call(metadata.MetadataRequest([])) is None
    finally:
        impostor.close()
        switcher.close()
    after = scrape(broker)
    assert reauths(after, "PLAIN", "failure") - reauths(before, "PLAIN", "failure") == 2
    assert "may not change the principal (User:carol to User:dave)" in broker.log()
