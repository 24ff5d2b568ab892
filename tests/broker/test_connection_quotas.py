"""ConnectionQuotas in isolation, with the descriptor count and the clock injected; the limits
on a real broker are in tests/integration/test_broker_limits.py."""

from __future__ import annotations

import logging

import pytest

from spark_mq.broker.connection_quotas import (
    REFUSAL_LOG_INTERVAL_S,
    UNIX_PEER,
    ConnectionQuotas,
    auto_fd_headroom,
    count_open_fds,
    normalize_host,
    peer_host,
)

INT_MAX = 2**31 - 1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def quotas(**kw: object) -> ConnectionQuotas:
    args: dict[str, object] = {
        "max_connections": INT_MAX,
        "max_per_ip": INT_MAX,
        "fd_limit": None,
        "clock": Clock(),
    }
    args.update(kw)
    return ConnectionQuotas(**args)  # type: ignore[arg-type]


def test_peers_count_under_their_ip_and_unix_clients_under_one_name() -> None:
    assert peer_host(("127.0.0.1", 5555)) == "127.0.0.1"
    assert peer_host(("::ffff:10.1.2.3", 5555, 0, 0)) == "10.1.2.3"
    assert peer_host(("::1", 5555, 0, 0)) == "::1"
    assert peer_host("") == UNIX_PEER and peer_host(None) == UNIX_PEER
    assert normalize_host("0:0::1") == "::1"


def test_per_ip_limit_with_overrides_and_the_broker_wide_limit() -> None:
    q = quotas(max_connections=6, max_per_ip=2, per_ip_overrides={"unix": 3, "::ffff:10.0.0.9": 0})
    assert [q.admit("10.0.0.1", "p") for _ in range(3)] == [True, True, False]
    assert [q.admit(UNIX_PEER, "p") for _ in range(4)] == [True, True, True, False]
    assert not q.admit("10.0.0.9", "p")  # an override of 0, given as IPv4-in-IPv6
    assert q.admit("10.0.0.2", "p")
    assert not q.admit("10.0.0.3", "p")  # six open: max.connections
    q.release("10.0.0.1")
    assert q.count == 5 and q.per_ip["10.0.0.1"] == 1
    assert q.admit("10.0.0.3", "p")
    for host in ("10.0.0.1", "10.0.0.2", "10.0.0.3", UNIX_PEER, UNIX_PEER, UNIX_PEER):
        q.release(host)
    assert q.count == 0 and not q.per_ip


def test_refusals_are_logged_once_then_summarized(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    q = quotas(max_connections=1, clock=clock)
    assert q.admit("10.0.0.1", "first")
    with caplog.at_level(logging.WARNING, logger="spark_mq.broker.connection_quotas"):
        for i in range(50):
            assert not q.admit("10.0.0.1", f"peer{i}")
            clock.now += 0.1
        q.refresh()  # 5 s after the first: not due yet
        assert len(caplog.records) == 1 and "peer0" in caplog.records[0].getMessage()
        clock.now += REFUSAL_LOG_INTERVAL_S
        q.refresh()
        assert len(caplog.records) == 2
        assert "refused 49 more connections" in caplog.records[1].getMessage()
        assert "max.connections (1) reached: 49" in caplog.records[1].getMessage()
        # A quiet spell: the next refusal is logged in full again.
        clock.now += REFUSAL_LOG_INTERVAL_S
        q.refresh()
        assert not q.admit("10.0.0.1", "later")
    assert len(caplog.records) == 3 and "later" in caplog.records[2].getMessage()


def test_descriptors_leave_the_headroom_free() -> None:
    clock = Clock()
    open_fds = [40]
    measured: list[float] = []

    def count() -> int:
        measured.append(clock.now)
        return open_fds[0]

    def connect() -> bool:
        """A socket is accepted (one more descriptor), then admitted or closed."""
        open_fds[0] += 1
        if q.admit("10.0.0.1", "p"):
            return True
        open_fds[0] -= 1
        return False

    q = quotas(fd_limit=100, fd_headroom=10, count_fds=count, clock=clock)
    assert q.fd_cap == 90 and len(measured) == 1
    clock.now += 1
    # 40 open: 50 connections fit below the cap.
    admitted = 0
    while connect():
        admitted += 1
    assert admitted == 50 and q.open_fds_estimate == 90
    assert len(measured) == 2  # measured again before refusing
    # Refusals in a burst do not measure each time.
    assert not connect() and len(measured) == 2
    # The logs closed 5 files: once measured again, five more connections fit.
    open_fds[0] -= 5
    clock.now += 1
    assert [connect() for _ in range(6)] == [True] * 5 + [False]
    # The logs opened 20 files into the headroom: the excess the server closes connections for.
    open_fds[0] += 20
    q.refresh()
    assert q.fd_excess() == 20
    for _ in range(20):
        q.release("10.0.0.1")
        open_fds[0] -= 1
    assert q.fd_excess() == 0


def test_without_a_descriptor_limit_nothing_is_counted() -> None:
    q = quotas(fd_limit=None, count_fds=lambda: pytest.fail("counted"))
    assert all(q.admit("10.0.0.1", "p") for _ in range(1000))
    assert q.fd_excess() == 0 and q.fd_cap is None


def test_automatic_headroom() -> None:
    assert auto_fd_headroom(300) == 150
    assert auto_fd_headroom(1024) == 256
    assert auto_fd_headroom(20_000) == 2_000
    assert auto_fd_headroom(1_048_576) == 104_857


def test_count_open_fds_sees_a_new_descriptor(tmp_path: object) -> None:
    before = count_open_fds()
    with open(__file__, "rb"):
        assert count_open_fds() == before + 1
