"""SASL on a real broker process (spark_mq/broker/sasl/, broker/handlers/sasl.py,
client/sasl.py): PLAIN and SCRAM-SHA-256/512 produce and consume, refusals (unknown user,
wrong password, a mechanism not enabled, requests before authenticating), the password kept
out of the log directory and the log, users in the single node's file across a restart, and
a fuzz of the exchange that must never take the broker down.

One broker serves the module (a PLAINTEXT listener for the admin, a SASL_PLAINTEXT one for
the clients under test, the Unix socket for the embedded CLI path); tests add their own
users, named after the test.
"""

from __future__ import annotations

import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_mq import (
    Admin,
    Consumer,
    Producer,
    TopicPartition,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from spark_mq.broker.dir_files import Endpoint
from spark_mq.client.connection import BrokerConnection
from spark_mq.errors import (
    AuthenticationError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from spark_mq.protocol import api_versions, metadata
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import encode_request
from spark_mq.protocol.framing import SIZE
from spark_mq.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


#: The broker's INFO line for a SASL listener, which names its bound address.
_SASL_LISTENER = re.compile(r"listener SASL_PLAINTEXT on 127\.0\.0\.1:(\d+): clients authenticate")


class SaslBroker:
    """``python -m spark_mq.broker`` with PLAINTEXT, SASL_PLAINTEXT and UNIX listeners."""

    def __init__(self, directory: Path, log_path: Path, mechanisms: str) -> None:
        self.dir = directory
        self.log_path = log_path
        self.mechanisms = mechanisms
        self.proc: subprocess.Popen[bytes] | None = None
        self.plain = BrokerAddress(host="127.0.0.1", port=0)
        self.sasl = BrokerAddress(host="127.0.0.1", port=0)

    def start(self) -> None:
        props = {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,UNIX://",
            "sasl.enabled.mechanisms": self.mechanisms,
            "log.retention.check.interval.ms": "300000",
        }
        args = [sys.executable, "-m", "spark_mq.broker", "--log-dir", str(self.dir)]
        for key, value in props.items():
            args += ["--override", f"{key}={value}"]
        with open(self.log_path, "ab") as err:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()
            endpoint = Endpoint.read(self.dir)
            if endpoint is not None and endpoint.pid == self.proc.pid:
                assert endpoint.port is not None
                self.plain = BrokerAddress(host="127.0.0.1", port=endpoint.port)
                # Logged before the endpoint file is written; the last line is this start's.
                ports = _SASL_LISTENER.findall(self.log())
                assert ports, self.log()
                self.sasl = BrokerAddress(host="127.0.0.1", port=int(ports[-1]))
                return
            time.sleep(0.02)
        raise AssertionError(f"broker did not start:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def admin(self) -> Admin:
        return Admin(bootstrap_servers=str(self.plain))

    def add_user(self, user: str, password: str, mechanisms: tuple[str, ...] = ()) -> None:
        with self.admin() as admin:
            admin.alter_user_scram_credentials(
                [
                    UserScramCredentialUpsertion(user, m, password)
                    for m in mechanisms or ("SCRAM-SHA-256", "SCRAM-SHA-512")
                ]
            )

    def client_config(self, mechanism: str, user: str, password: str) -> dict[str, Any]:
        return {
            "bootstrap_servers": str(self.sasl),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }

    def raw(self) -> socket.socket:
        sock = self.sasl.connect(10)
        sock.settimeout(10)
        return sock


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    root = tmp_path_factory.mktemp("sasl")
    served = SaslBroker(root / "mq", root / "broker.log", ",".join(MECHANISMS))
    served.start()
    yield served
    served.stop()


def frame(request: Any, correlation_id: int = 1) -> bytes:
    head, body = encode_request(request, correlation_id=correlation_id)
    return head + body


def read_frame(sock: socket.socket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""
    buf = b""
    while len(buf) < SIZE.size:
        chunk = sock.recv(SIZE.size - len(buf))
        if not chunk:
            return None
        buf += chunk
    (size,) = SIZE.unpack(buf)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def closed(sock: socket.socket) -> bool:
    try:
        return read_frame(sock) is None
    except (ConnectionResetError, BrokenPipeError):
        return True


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_produce_and_consume_over_each_mechanism(broker: SaslBroker, mechanism: str) -> None:
    user = f"user-{mechanism.lower()}"
    broker.add_user(user, "pw-" + mechanism)
    topic = f"t-{mechanism.lower()}"
    config = broker.client_config(mechanism, user, "pw-" + mechanism)
    with Producer(**config) as producer:
        for i in range(5):
            producer.send(topic, f"v{i}".encode()).get(30)
    with Consumer(**config, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 5 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
    assert values == [f"v{i}".encode() for i in range(5)]
    assert f"authenticated as User:{user} with SASL {mechanism}" in broker.log()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_and_unknown_user_are_refused(broker: SaslBroker, mechanism: str) -> None:
    user = f"refused-{mechanism.lower()}"
    broker.add_user(user, "right-password")
    for name, password in ((user, "wrong-password"), ("nobody-" + mechanism, "whatever")):
        conn = BrokerConnection(
            broker.sasl,
            sasl=_credentials(broker, mechanism, name, password),
        )
        with pytest.raises(AuthenticationError) as info:
            conn.connect()
        assert not conn.connected
        assert info.value.mechanism == mechanism and info.value.user == name
        assert mechanism in str(info.value) and repr(name) in str(info.value)
        assert password not in str(info.value)
    # A failure is answered only after connection.failed.authentication.delay.ms (100 ms).
    slow = BrokerConnection(broker.sasl, sasl=_credentials(broker, mechanism, user, "wrong"))
    started = time.monotonic()
    with pytest.raises(AuthenticationError):
        slow.connect()
    assert time.monotonic() - started >= 0.1
    # The broker still serves everyone else.
    good = BrokerConnection(
        broker.sasl, sasl=_credentials(broker, mechanism, user, "right-password")
    )
    good.connect()
    assert good.request(metadata.MetadataRequest([])).brokers
    good.close()
    assert f"authentication of user {user!r}" in broker.log()
    # The log names the user and the reason, never a password (right or wrong).
    assert "right-password" not in broker.log() and "wrong-password" not in broker.log()


def _credentials(broker: SaslBroker, mechanism: str, user: str, password: str) -> Any:
    from spark_mq.client.config import AdminConfig

    config = broker.client_config(mechanism, user, password)
    config["bootstrap.servers"] = config.pop("bootstrap_servers")
    return AdminConfig.from_properties(config).sasl_credentials()


def test_producer_raises_the_typed_error(broker: SaslBroker) -> None:
    broker.add_user("producer-user", "right")
    config = broker.client_config("SCRAM-SHA-512", "producer-user", "wrong")
    with Admin(**config) as admin, pytest.raises(AuthenticationError, match="SCRAM-SHA-512"):
        admin.list_topics()


def test_requests_before_authentication_close_the_connection(broker: SaslBroker) -> None:
    # ApiVersions is answered before authentication...
    sock = broker.raw()
    sock.sendall(frame(api_versions.ApiVersionsRequest()))
    assert read_frame(sock) is not None
    # ...anything else closes the connection unanswered.
    sock.sendall(frame(metadata.MetadataRequest([]), 2))
    assert closed(sock)
    sock.close()
    # As does SaslAuthenticate before SaslHandshake.
    sock = broker.raw()
    sock.sendall(frame(SaslAuthenticateRequest(b"\0u\0p")))
    read_frame(sock)
    assert closed(sock)
    sock.close()
    assert "METADATA before SASL authentication" in broker.log()
    assert f"listener SASL_PLAINTEXT on {broker.sasl}: clients authenticate with SASL" in (
        broker.log()
    )
    # The PLAINTEXT listener of the same broker needs no SASL.
    plain = BrokerConnection(broker.plain)
    plain.connect()
    assert plain.request(metadata.MetadataRequest([])).brokers
    plain.close()


def test_plain_is_refused_unless_enabled(tmp_path: Path) -> None:
    served = SaslBroker(tmp_path / "mq", tmp_path / "broker.log", "SCRAM-SHA-256,SCRAM-SHA-512")
    served.start()
    try:
        served.add_user("carol", "pw")
        conn = BrokerConnection(served.sasl, sasl=_credentials(served, "PLAIN", "carol", "pw"))
        with pytest.raises(UnsupportedSaslMechanismError, match="SCRAM-SHA-256, SCRAM-SHA-512"):
            conn.connect()
        ok = BrokerConnection(
            served.sasl, sasl=_credentials(served, "SCRAM-SHA-256", "carol", "pw")
        )
        ok.connect()
        ok.close()
    finally:
        served.stop()


def test_users_are_described_removed_and_kept_across_a_restart(tmp_path: Path) -> None:
    served = SaslBroker(tmp_path / "mq", tmp_path / "broker.log", ",".join(MECHANISMS))
    served.start()
    password = "Kept-Password-7f3a"
    try:
        served.add_user("dave", password)
        served.add_user("erin", password, ("SCRAM-SHA-256",))
        with served.admin() as admin:
            described = admin.describe_user_scram_credentials()
            assert {u: [i.mechanism for i in infos] for u, infos in described.items()} == {
                "dave": ["SCRAM-SHA-256", "SCRAM-SHA-512"],
                "erin": ["SCRAM-SHA-256"],
            }
            admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion("erin", "SCRAM-SHA-256")]
            )
            with pytest.raises(ResourceNotFoundError, match="erin"):
                admin.describe_user_scram_credentials(["erin"])
            with pytest.raises(UnacceptableCredentialError, match="no SCRAM-SHA-512"):
                admin.alter_user_scram_credentials(
                    [UserScramCredentialDeletion("erin", "SCRAM-SHA-512")]
                )
            with pytest.raises(UnacceptableCredentialError, match="iterations"):
                admin.alter_user_scram_credentials(
                    [UserScramCredentialUpsertion("erin", "SCRAM-SHA-256", "x", iterations=10)]
                )
        served.stop()
        served.start()
        conn = BrokerConnection(
            served.sasl, sasl=_credentials(served, "SCRAM-SHA-512", "dave", password)
        )
        conn.connect()
        conn.close()
        erin = BrokerConnection(served.sasl, sasl=_credentials(served, "PLAIN", "erin", password))
        with pytest.raises(AuthenticationError):
            erin.connect()
    finally:
        served.stop()
    # The password is in neither the log directory nor the broker's log.
    secret = password.encode()
    for path in (tmp_path / "mq").rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes(), path
    assert secret not in (tmp_path / "broker.log").read_bytes()
    stored = (tmp_path / "mq" / "scram-credentials.json").read_text()
    assert "stored_key=" in stored and "iterations=4096" in stored
    assert (tmp_path / "mq" / "scram-credentials.json").stat().st_mode & 0o077 == 0


def test_unauthenticated_large_frames_close_at_once_and_stall_no_one(broker: SaslBroker) -> None:
    """Before authentication a frame may be at most sasl.server.max.receive.size (512 KiB):
    peers that announce 64 MB frames and send nothing more are closed at once, instead of
    holding the queued.max.request.bytes pool (256 MB) until the read timeout while every
    other client waits. After authenticating, a 600 KB record goes through."""
    peers = [broker.raw() for _ in range(6)]
    try:
        for sock in peers:
            sock.sendall(SIZE.pack(64 * 1024 * 1024))
        for sock in peers:
            sock.settimeout(3)
            assert closed(sock), "an unauthenticated 64 MB size prefix was not refused"
    finally:
        for sock in peers:
            sock.close()
    assert "sasl.server.max.receive.size" in broker.log()
    broker.add_user("big", "big-pw")
    config = broker.client_config("SCRAM-SHA-256", "big", "big-pw")
    started = time.monotonic()
    with Producer(**config, max_request_size=2 * 1024 * 1024) as producer:
        producer.send("t-big-frames", b"x" * 600_000).get(30)
    assert time.monotonic() - started < 10


def test_fuzzed_exchanges_never_crash_the_broker(broker: SaslBroker) -> None:
    rng = random.Random(33)
    seed_note = "seed 33"
    broker.add_user("fuzz", "fuzz-pw")
    handshake = frame(SaslHandshakeRequest("SCRAM-SHA-256"))
    for round_no in range(70):
        kind = round_no % 7
        sock = broker.raw()
        try:
            if kind == 0:  # garbage bytes instead of a frame
                sock.sendall(rng.randbytes(rng.randint(1, 200)))
            elif kind == 1:  # a handshake cut short, then the connection dropped
                sock.sendall(handshake[: rng.randint(1, len(handshake) - 1)])
            elif kind == 2:  # a garbage SCRAM client-first
                sock.sendall(handshake)
                read_frame(sock)
                sock.sendall(frame(SaslAuthenticateRequest(rng.randbytes(rng.randint(0, 300))), 2))
            elif kind == 3:  # an oversized message
                sock.sendall(handshake)
                read_frame(sock)
                sock.sendall(frame(SaslAuthenticateRequest(b"n,,n=fuzz,r=" + b"a" * 100_000), 2))
            elif kind == 4:  # a handshake for a mechanism nobody knows
                name = rng.randbytes(rng.randint(0, 40)).decode("latin-1")
                sock.sendall(frame(SaslHandshakeRequest(name)))
            elif kind == 6:  # a size prefix far over socket.request.max.bytes
                sock.sendall(SIZE.pack(2**31 - 1) + rng.randbytes(64))
            else:  # a SCRAM exchange with a garbage client-final
                sock.sendall(handshake)
                read_frame(sock)
                sock.sendall(frame(SaslAuthenticateRequest(b"n,,n=fuzz,r=abcdef"), 2))
                read_frame(sock)
                sock.sendall(frame(SaslAuthenticateRequest(rng.randbytes(80)), 3))
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not closed(sock):
                pass
        except OSError:
            pass
        finally:
            sock.close()
        assert broker.alive, f"{seed_note}, round {round_no}:\n{broker.log()}"
    good = BrokerConnection(
        broker.sasl, sasl=_credentials(broker, "SCRAM-SHA-256", "fuzz", "fuzz-pw")
    )
    good.connect()
    assert good.request(metadata.MetadataRequest([])).brokers
    good.close()
    assert "Traceback" not in broker.log(), seed_note
