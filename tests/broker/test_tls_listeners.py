"""TLS listeners against real clients: a broker (its BrokerServer on an event loop thread)
with an SSL listener beside a PLAINTEXT one, certificates made by a CA generated in the
test (tests/tls_certs.py), and the spark_mq clients over real sockets.

Checked: produce and consume over SSL; plaintext bytes on the SSL listener close that
connection and nothing else; an expired certificate, an unknown CA and a host name mismatch
are refused on the client with SslAuthenticationError saying which broker and why (the host
check off accepts the mismatch); ssl.client.auth=required refuses a client without a
certificate and gives one with a certificate the principal User:<subject DN>; Metadata over
the SSL listener answers with the SSL endpoint; bad settings are ConfigErrors naming the key
and file; a fuzz of garbage and truncated handshakes leaves the broker serving.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tls_certs import Issued, TestCa

from spark_mq import UserScramCredentialUpsertion
from spark_mq.broker.config import ServerConfig
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.server import BrokerServer
from spark_mq.client import Admin, Consumer, Producer, TopicPartition
from spark_mq.errors import (
    AuthenticationError,
    ClusterAuthorizationError,
    ConfigError,
    NetworkError,
    SslAuthenticationError,
    TopicAuthorizationError,
)
from spark_mq.principal import ANONYMOUS
from spark_mq.storage.log_manager import LogManager


class TlsBroker:
    """A broker with listeners PLAINTEXT and SSL on loopback, serving on a thread."""

    def __init__(
        self,
        root: Path,
        props: dict[str, str],
        listeners: str = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    ) -> None:
        self.logs = LogManager(root)
        config = ServerConfig.from_properties(
            {
                "log.dirs": str(root),
                "listeners": listeners,
                "socket.request.read.timeout.ms": "2000",
                **props,
            }
        )
        self.core = BrokerCore(config, self.logs, BrokerMeta.take_over(root))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = BrokerServer(
            self.core, config.broker.parsed_listeners(), default_unix_path=str(root / "b.sock")
        )
        try:
            self.call(self.server.start())
        except BaseException:
            self.close(started=False)
            raise
        self.by_name = {listener.scheme: address for listener, address in self.server.bound}
        self.plain = self.by_name["PLAINTEXT"]
        self.ssl = self.by_name["SSL"]

    def call(self, coro: Any, timeout_s: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def principals(self) -> list[str]:
        async def read() -> list[str]:
            return sorted(str(c.session.principal) for c in self.server.connections)

        return list(self.call(read()))

    def close(self, *, started: bool = True) -> None:
        if started:
            self.call(self.server.close(5.0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        self.core.close()
        self.logs.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("pki")
    ca = TestCa.create(root / "ca")
    other_ca = TestCa.create(root / "other", name="some other CA")
    now = datetime.datetime.now(datetime.UTC)
    return {
        "ca": ca,
        "broker": ca.issue(root, "broker", hosts=("127.0.0.1", "localhost")),
        "client": ca.issue(root, "client", subject_extra=(("O", "spark_mq"),), hosts=()),
        "expired": ca.issue(
            root,
            "expired",
            not_before=now - datetime.timedelta(days=10),
            not_after=now - datetime.timedelta(days=1),
        ),
        "stranger": other_ca.issue(root / "other", "stranger"),
        "elsewhere": ca.issue(root, "elsewhere", hosts=("broker.example.com",)),
    }


def broker_props(cert: Issued, **extra: str) -> dict[str, str]:
    return {"ssl.certificate.location": str(cert.cert), "ssl.key.location": str(cert.key), **extra}


@pytest.fixture
def broker(tmp_path: Path, pki: dict[str, Any]) -> Iterator[TlsBroker]:
    served = TlsBroker(tmp_path / "mq", broker_props(pki["broker"]))
    yield served
    served.close()


def ssl_client(pki: dict[str, Any], **extra: str) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(pki["ca"].cert), **extra}


def list_topics(servers: str, config: dict[str, str] | None = None, **kwargs: Any) -> list[str]:
    with Admin(bootstrap_servers=servers, config=config or {}, **kwargs) as admin:
        return admin.list_topics()


def produce_and_read(servers: str, client: dict[str, str], topic: str, count: int) -> list[bytes]:
    with Admin(bootstrap_servers=servers, config=client) as admin:
        admin.create_topic(topic, 1)
    with Producer(bootstrap_servers=servers, acks="all", config=client) as producer:
        futures = [producer.send(topic, f"v{i}".encode() * 50) for i in range(count)]
        producer.flush()
        assert [f.get(10).offset for f in futures] == list(range(count))
    out: list[bytes] = []
    with Consumer(
        bootstrap_servers=servers, auto_offset_reset="earliest", config=client
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 20
        while len(out) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(r.value for r in records)
    return out


def test_produce_and_consume_over_ssl(broker: TlsBroker, pki: dict[str, Any]) -> None:
    values = produce_and_read(str(broker.ssl), ssl_client(pki), "secure", 300)
    assert values == [f"v{i}".encode() * 50 for i in range(300)]
    # Without client authentication every TLS connection is ANONYMOUS.
    assert set(broker.principals()) <= {str(ANONYMOUS)}


def test_metadata_answers_with_the_listener_connected_through(
    broker: TlsBroker, pki: dict[str, Any]
) -> None:
    with Admin(bootstrap_servers=str(broker.ssl), config=ssl_client(pki)) as admin:
        nodes = admin.describe_cluster().brokers
    assert [(host, port) for _, host, port, _ in nodes] == [("127.0.0.1", broker.ssl.port)]
    with Admin(bootstrap_servers=str(broker.plain)) as admin:
        nodes = admin.describe_cluster().brokers
    assert [(host, port) for _, host, port, _ in nodes] == [("127.0.0.1", broker.plain.port)]


def test_plaintext_client_on_ssl_listener_is_closed(broker: TlsBroker, pki: dict[str, Any]) -> None:
    with socket.create_connection((broker.ssl.host, broker.ssl.port), timeout=10) as sock:
        # An ApiVersions frame as a PLAINTEXT client sends it: not a TLS record.
        sock.sendall(b"\x00\x00\x00\x0c" + bytes(12))
        # The broker answers no frame: at most TLS alert bytes, then it closes.
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        assert len(received) < 64 and (not received or received[0] == 0x15)  # 0x15: alert
    # A PLAINTEXT-speaking spark_mq client gets a failure within its timeout, not a hang.
    started = time.monotonic()
    with pytest.raises(NetworkError):
        list_topics(str(broker.ssl), request_timeout_ms=3000)
    assert time.monotonic() - started < 10
    # Still serving TLS and plaintext.
    assert list_topics(str(broker.ssl), ssl_client(pki)) == []
    assert list_topics(str(broker.plain)) == []


@pytest.mark.parametrize(
    ("cert", "ca", "reason"),
    [
        ("expired", "ca", "expired"),
        ("stranger", "ca", "CA this side does not trust"),
        ("broker", "other", "CA this side does not trust"),
    ],
)
def test_untrusted_broker_certificate_is_refused(
    tmp_path: Path, pki: dict[str, Any], cert: str, ca: str, reason: str
) -> None:
    served = TlsBroker(tmp_path / "mq", broker_props(pki[cert]))
    try:
        ca_file = pki["ca"].cert if ca == "ca" else pki["stranger"].cert.parent / "ca.pem"
        client = {"security.protocol": "SSL", "ssl.ca.location": str(ca_file)}
        started = time.monotonic()
        with pytest.raises(SslAuthenticationError) as caught:
            list_topics(str(served.ssl), client)
        assert time.monotonic() - started < 10, "refused at once, not retried"
        assert reason in str(caught.value)
        assert caught.value.broker == str(served.ssl)
        assert str(served.ssl) in str(caught.value)
    finally:
        served.close()


def test_hostname_mismatch_refused_by_default_accepted_with_check_off(
    tmp_path: Path, pki: dict[str, Any]
) -> None:
    served = TlsBroker(tmp_path / "mq", broker_props(pki["elsewhere"]))
    try:
        with pytest.raises(SslAuthenticationError, match="does not name the host"):
            list_topics(str(served.ssl), ssl_client(pki))
        off = ssl_client(pki, **{"ssl.endpoint.identification.algorithm": ""})
        assert list_topics(str(served.ssl), off) == []
    finally:
        served.close()


def test_client_auth_required(tmp_path: Path, pki: dict[str, Any]) -> None:
    props = broker_props(
        pki["broker"], **{"ssl.client.auth": "required", "ssl.ca.location": str(pki["ca"].cert)}
    )
    served = TlsBroker(tmp_path / "mq", props)
    try:
        with pytest.raises(SslAuthenticationError, match=r"requires one|client certificate"):
            list_topics(str(served.ssl), ssl_client(pki))
        client = pki["client"]
        with_cert = ssl_client(
            pki,
            **{
                "ssl.certificate.location": str(client.cert),
                "ssl.key.location": str(client.key),
            },
        )
        with Admin(bootstrap_servers=str(served.ssl), config=with_cert) as admin:
            admin.list_topics()
            assert "User:CN=client,O=spark_mq" in served.principals()
        # The PLAINTEXT listener is not affected (and is ANONYMOUS).
        with Admin(bootstrap_servers=str(served.plain)) as admin:
            admin.list_topics()
            assert str(ANONYMOUS) in served.principals()
    finally:
        served.close()


def test_the_certificate_principal_is_what_acls_check(tmp_path: Path, pki: dict[str, Any]) -> None:
    """The TLS principal reaches authorization: the client certificate's DN is a super user
    and may create a topic; the same listener's client without a certificate is ANONYMOUS
    and is refused."""
    dn = "User:CN=client,O=spark_mq"
    props = broker_props(
        pki["broker"],
        **{
            "ssl.client.auth": "requested",
            "ssl.ca.location": str(pki["ca"].cert),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": dn,
        },
    )
    served = TlsBroker(tmp_path / "mq", props)
    try:
        client = pki["client"]
        with_cert = ssl_client(
            pki,
            **{
                "ssl.certificate.location": str(client.cert),
                "ssl.key.location": str(client.key),
            },
        )
        with Admin(bootstrap_servers=str(served.ssl), config=with_cert) as admin:
            admin.create_topic("by-certificate", 1)
            assert admin.list_topics() == ["by-certificate"]
        with (
            pytest.raises((ClusterAuthorizationError, TopicAuthorizationError)),
            Admin(bootstrap_servers=str(served.ssl), config=ssl_client(pki)) as admin,
        ):
            admin.create_topic("anonymous", 1)
    finally:
        served.close()


def test_client_auth_requested_accepts_both(tmp_path: Path, pki: dict[str, Any]) -> None:
    props = broker_props(
        pki["broker"], **{"ssl.client.auth": "requested", "ssl.ca.location": str(pki["ca"].cert)}
    )
    served = TlsBroker(tmp_path / "mq", props)
    try:
        with Admin(bootstrap_servers=str(served.ssl), config=ssl_client(pki)) as admin:
            admin.list_topics()
            assert served.principals() == [str(ANONYMOUS)]
    finally:
        served.close()


def test_bad_broker_tls_settings_are_config_errors(tmp_path: Path, pki: dict[str, Any]) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError, match=r"ssl\.certificate\.location: file .*nope\.pem") as e:
        TlsBroker(tmp_path / "a", {"ssl.certificate.location": str(missing)})
    assert e.value.key == "ssl.certificate.location"
    # A key that is not the certificate's.
    with pytest.raises(ConfigError, match="does not belong") as e:
        TlsBroker(
            tmp_path / "b",
            {
                "ssl.certificate.location": str(pki["broker"].cert),
                "ssl.key.location": str(pki["client"].key),
            },
        )
    assert e.value.key == "ssl.key.location"
    with pytest.raises(ConfigError, match="is not set"):
        TlsBroker(tmp_path / "c", {})
    with pytest.raises(ConfigError, match=r"TLS 1\.2 is the oldest"):
        ServerConfig.from_properties({"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"})
    # A per-listener override names its own key.
    with pytest.raises(ConfigError) as e:
        TlsBroker(
            tmp_path / "d",
            {
                **broker_props(pki["broker"]),
                "listener.name.ssl.ssl.certificate.location": str(missing),
            },
        )
    assert e.value.key == "listener.name.ssl.ssl.certificate.location"


def test_per_listener_override_wins(tmp_path: Path, pki: dict[str, Any]) -> None:
    # The base ssl.* certificate is the expired one; the SSL listener's own is valid.
    props = {
        **broker_props(pki["expired"]),
        "listener.name.ssl.ssl.certificate.location": str(pki["broker"].cert),
        "listener.name.ssl.ssl.key.location": str(pki["broker"].key),
    }
    served = TlsBroker(tmp_path / "mq", props)
    try:
        with Admin(bootstrap_servers=str(served.ssl), config=ssl_client(pki)) as admin:
            assert admin.list_topics() == []
    finally:
        served.close()


def test_sasl_ssl_authenticates_inside_tls(tmp_path: Path, pki: dict[str, Any]) -> None:
    """A SASL_SSL listener: the TLS handshake, then SCRAM inside it; the principal is the
    SASL user, and a wrong password is refused as on SASL_PLAINTEXT."""
    served = TlsBroker(
        tmp_path / "mq",
        broker_props(pki["broker"]),
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
    )
    try:
        with Admin(bootstrap_servers=str(served.plain)) as admin:
            admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion("alice", "SCRAM-SHA-512", "alice-secret")]
            )
        servers = str(served.by_name["SASL_SSL"])
        alice = ssl_client(
            pki,
            **{
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "alice",
                "sasl.password": "alice-secret",
            },
        )
        with Admin(bootstrap_servers=servers, config=alice) as admin:
            assert admin.list_topics() == []
            assert "User:alice" in served.principals()
        with pytest.raises(AuthenticationError, match="alice"):
            list_topics(servers, {**alice, "sasl.password": "wrong"})
        # Without TLS the SASL_SSL listener is not reached.
        with pytest.raises(NetworkError):
            list_topics(
                servers, {**alice, "security.protocol": "SASL_PLAINTEXT"}, request_timeout_ms=3000
            )
    finally:
        served.close()


def test_encrypted_client_key(tmp_path: Path, pki: dict[str, Any]) -> None:
    """ssl.key.password opens an encrypted key; a wrong one is a ConfigError naming it."""
    props = broker_props(
        pki["broker"], **{"ssl.client.auth": "required", "ssl.ca.location": str(pki["ca"].cert)}
    )
    served = TlsBroker(tmp_path / "mq", props)
    try:
        issued = pki["ca"].issue(tmp_path / "locked", "locked", hosts=(), key_password="s3cret")
        locked = ssl_client(
            pki,
            **{
                "ssl.certificate.location": str(issued.cert),
                "ssl.key.location": str(issued.key),
            },
        )
        with pytest.raises(ConfigError) as caught:
            list_topics(str(served.ssl), {**locked, "ssl.key.password": "wrong"})
        assert caught.value.key == "ssl.key.password"
        assert "s3cret" not in str(caught.value)
        opened = {**locked, "ssl.key.password": "s3cret"}
        with Admin(bootstrap_servers=str(served.ssl), config=opened) as admin:
            assert admin.list_topics() == []
            assert "User:CN=locked" in served.principals()
    finally:
        served.close()


def test_client_tls_settings_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ssl\.ca\.location: file"):
        Admin(
            bootstrap_servers="127.0.0.1:9",
            config={"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "x.pem")},
        )
    with pytest.raises(ConfigError, match=r"security\.protocol"):
        Admin(bootstrap_servers="127.0.0.1:9", security_protocol="TLS")


def test_handshake_fuzz_never_crashes_the_broker(broker: TlsBroker, pki: dict[str, Any]) -> None:
    """Garbage, truncated and stalled TLS hellos: each ends its own connection only."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    # A real ClientHello to cut short and to corrupt.
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    hello_obj = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="x")
    with pytest.raises(ssl.SSLWantReadError):
        hello_obj.do_handshake()
    hello = outgoing.read()
    cases: list[bytes] = [b"", b"\x16", b"\x16\x03\x01\xff\xff", bytes(64)]
    for _ in range(40):
        kind = rng.randrange(3)
        if kind == 0:
            cases.append(hello[: rng.randrange(1, len(hello))])
        elif kind == 1:
            data = bytearray(hello)
            for _ in range(rng.randrange(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            cases.append(bytes(data))
        else:
            cases.append(rng.randbytes(rng.randrange(1, 2000)))
    socks = []
    for data in cases:
        sock = socket.create_connection((broker.ssl.host, broker.ssl.port), timeout=10)
        if data:
            sock.sendall(data)
        if rng.random() < 0.5:
            sock.close()  # gone mid-handshake
        else:
            socks.append(sock)  # left hanging: the handshake timeout closes it
    # The broker still serves TLS and plaintext clients meanwhile.
    with Admin(bootstrap_servers=str(broker.ssl), config=ssl_client(pki)) as admin:
        assert admin.list_topics() is not None, f"seed {seed}"
    with Admin(bootstrap_servers=str(broker.plain)) as admin:
        assert admin.list_topics() is not None, f"seed {seed}"
    # Stalled handshakes are closed by the handshake timeout (2 s here).
    deadline = time.monotonic() + 15
    for sock in socks:
        sock.settimeout(max(deadline - time.monotonic(), 0.1))
        try:
            while sock.recv(4096):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
        finally:
            sock.close()
    assert time.monotonic() < deadline, f"a stalled handshake was never closed (seed {seed})"
    assert broker.principals() == [], f"seed {seed}"
