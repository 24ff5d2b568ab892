"""Tests for spark_mq.protocol.address: parsing and printing broker addresses, and connect()
failing with a retriable BrokerNotAvailableError. Sockets are real but local (loopback and a
Unix socket in tmp_path), and nothing waits on a timeout.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import FAST

from spark_mq.errors import BrokerNotAvailableError, ConfigError, NetworkError
from spark_mq.protocol.address import BrokerAddress


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("localhost:9092", BrokerAddress("localhost", 9092)),
        ("10.0.0.1:1", BrokerAddress("10.0.0.1", 1)),
        ("broker-1.example.com:65535", BrokerAddress("broker-1.example.com", 65535)),
        ("[::1]:9092", BrokerAddress("::1", 9092)),
        ("[fe80::1%eth0]:9093", BrokerAddress("fe80::1%eth0", 9093)),
        ("[localhost]:9092", BrokerAddress("localhost", 9092)),
        ("  localhost:9092\n", BrokerAddress("localhost", 9092)),
        ("unix:/tmp/mq/broker.sock", BrokerAddress(unix_path="/tmp/mq/broker.sock")),
        ("unix:/path with spaces/b.sock", BrokerAddress(unix_path="/path with spaces/b.sock")),
        ("unix:relative.sock", BrokerAddress(unix_path="relative.sock")),
    ],
)
def test_parse(text: str, expected: BrokerAddress) -> None:
    assert BrokerAddress.parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "localhost:9092",
        "10.0.0.1:1",
        "[::1]:9092",
        "[2001:db8::7]:19092",
        "unix:/tmp/mq/broker.sock",
    ],
)
def test_str_round_trip(text: str) -> None:
    assert str(BrokerAddress.parse(text)) == text


HOSTNAMES = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)
PORTS = st.integers(1, 65535)
ADDRESSES = st.one_of(
    st.builds(BrokerAddress, host=HOSTNAMES, port=PORTS),
    st.builds(BrokerAddress, host=st.ip_addresses().map(str), port=PORTS),
    st.builds(BrokerAddress, unix_path=st.from_regex(r"/[a-zA-Z0-9_./-]{1,40}", fullmatch=True)),
)


@FAST
@given(address=ADDRESSES)
def test_parse_str_round_trip(address: BrokerAddress) -> None:
    assert BrokerAddress.parse(str(address)) == address


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "localhost",
        "localhost:",
        ":9092",
        "localhost:0",
        "localhost:65536",
        "localhost:-1",
        "localhost:+1",
        "localhost:90 92",
        "localhost:abc",
        "localhost:9092:",
        "localhost:²",  # isdigit() but not an int
        "localhost:٩٠٩٢",  # Arabic-Indic digits
        "[]:9092",
        "[::1:9092",
        "::1]:9092",
        "::1:9092",  # IPv6 without brackets: the port cannot be told apart
        "unix:",
        "unix:   ",
    ],
)
def test_bad_addresses_name_bootstrap_servers(text: str) -> None:
    with pytest.raises(ConfigError, match=r"unix:|host:port") as info:
        BrokerAddress.parse(text)
    assert info.value.key == "bootstrap.servers"
    assert info.value.value == text.strip()
    assert isinstance(info.value, ValueError)


def test_parse_list() -> None:
    expected = [BrokerAddress("a", 1), BrokerAddress("::1", 2), BrokerAddress(unix_path="/s")]
    assert BrokerAddress.parse_list("a:1,[::1]:2,unix:/s") == expected
    assert BrokerAddress.parse_list(" a:1 , [::1]:2 ,unix:/s,") == expected
    assert BrokerAddress.parse_list(["a:1", "[::1]:2", "unix:/s"]) == expected
    assert BrokerAddress.parse_list(("a:1",)) == expected[:1]


@pytest.mark.parametrize("value", ["", " , ", [], ()])
def test_parse_list_empty(value: str | list[str] | tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers is empty") as info:
        BrokerAddress.parse_list(value)
    assert info.value.key == "bootstrap.servers"


def test_parse_list_names_the_bad_entry() -> None:
    with pytest.raises(ConfigError, match="'b'") as info:
        BrokerAddress.parse_list("a:1,b")
    assert (info.value.key, info.value.value) == ("bootstrap.servers", "b")


# ---------------------------------------------------------------------------------------------
# connect()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound (so nobody else takes it) but not
    listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def test_connect_to_a_closed_port(closed_port: int) -> None:
    address = BrokerAddress("127.0.0.1", closed_port)
    with pytest.raises(BrokerNotAvailableError, match=f"127.0.0.1:{closed_port}") as info:
        address.connect(timeout_s=2.0)
    assert info.value.retriable
    assert isinstance(info.value, NetworkError)
    assert isinstance(info.value.__cause__, OSError)


def test_connect_to_a_missing_unix_socket(tmp_path: Path) -> None:
    address = BrokerAddress(unix_path=str(tmp_path / "no-broker.sock"))
    with pytest.raises(BrokerNotAvailableError, match=r"no-broker\.sock") as info:
        address.connect(timeout_s=2.0)
    assert info.value.retriable
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_connect_tcp() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        sock = BrokerAddress("127.0.0.1", port).connect(timeout_s=2.0)
        try:
            assert sock.gettimeout() is None
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            peer, _ = server.accept()
            peer.close()
        finally:
            sock.close()


def test_connect_unix(tmp_path: Path) -> None:
    path = tmp_path / "b.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()
        sock = BrokerAddress.parse(f"unix:{path}").connect(timeout_s=2.0)
        try:
            assert sock.family == socket.AF_UNIX
            assert sock.gettimeout() is None
        finally:
            sock.close()
