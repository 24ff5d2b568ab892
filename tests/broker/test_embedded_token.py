"""The embedded broker's token listener (OpenTokenListener, broker/embedded_token.py): opened
on request over the Unix socket only, kept once open, and open to the directory's token
alone (SCRAM with tokenauth=true), whose principal is the token's owner."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_mq import Admin
from spark_mq.broker.embedded_token import REVOKED, TOKEN_FILE, EmbeddedToken, TokenKeeper
from spark_mq.broker.local import ensure_broker, open_token_listener, stop_broker
from spark_mq.client.sasl import Password
from spark_mq.errors import AuthenticationError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.token_listener import OpenTokenListenerRequest


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    stop_broker(tmp_path)


def _admin(address: BrokerAddress, jaas: Password, mechanism: str = "SCRAM-SHA-512") -> Admin:
    return Admin(
        bootstrap_servers=str(address),
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": jaas,
            "default.api.timeout.ms": 5000,
        },
    )


def test_only_the_directorys_token_opens_the_listener(directory: Path) -> None:
    unix, tcp, token = open_token_listener(directory, "127.0.0.1")
    assert unix.unix_path is not None and tcp.host == "127.0.0.1" and tcp.port > 0
    assert (directory / TOKEN_FILE).stat().st_mode & 0o777 == 0o600
    assert token.hmac not in repr(token)
    # Asked again: the same listener and token, and broker.json is not written again.
    listed = (directory / "broker.json").stat().st_mtime_ns
    assert open_token_listener(directory, "127.0.0.1")[1:] == (tcp, token)
    assert (directory / "broker.json").stat().st_mtime_ns == listed
    assert json.loads((directory / "broker.json").read_text())["token_listeners"] == [str(tcp)]
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        with _admin(tcp, Password(token.jaas_config()), mechanism) as admin:
            admin.create_topic(f"t-{mechanism[-3:]}", partitions=1)
    wrong = Password(token.jaas_config().replace(token.hmac, "y" * 43))
    no_extension = Password(token.jaas_config().replace(' tokenauth="true"', ""))
    for jaas in (wrong, no_extension):
        refused = pytest.raises(AuthenticationError, match="accepts only its log directory's token")
        with refused, _admin(tcp, jaas) as admin:
            admin.list_topics()
    with Admin(path=str(directory)) as admin:
        assert sorted(admin.list_topics()) == ["t-256", "t-512"]


def test_the_token_and_its_owner_outlive_a_broker_restart(directory: Path) -> None:
    _, first, token = open_token_listener(directory, "127.0.0.1")
    assert first.port > 0
    stop_broker(directory)
    _, second, again = open_token_listener(directory, "127.0.0.1")
    assert again == token
    with _admin(second, Password(token.jaas_config())) as admin:
        admin.create_topic("after", partitions=1)
    log = (directory / "broker.log").read_text()
    assert f"authenticated as User:{token.owner} with SASL" in log
    assert EmbeddedToken.read(directory) == token


def test_a_tcp_client_cannot_open_a_token_listener(directory: Path) -> None:
    _, tcp, token = open_token_listener(directory, "127.0.0.1")
    with _admin(tcp, Password(token.jaas_config())) as admin:
        # Authenticated with the token, but over TCP: only the Unix socket's peers may ask.
        response = admin._cluster.request(OpenTokenListenerRequest("0.0.0.0"))
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "Unix socket only" in response.error_message
    assert json.loads((directory / "broker.json").read_text())["token_listeners"] == [str(tcp)]


def test_a_host_the_broker_cannot_bind_is_a_config_error(directory: Path) -> None:
    from spark_mq.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot listen"):
        open_token_listener(directory, "192.0.2.77")  # TEST-NET-1: not this host's
    # A wildcard binds, but executors cannot dial it: refused before anything opens.
    for wildcard in ("0.0.0.0", "::"):
        with pytest.raises(ConfigError, match="wildcard"):
            open_token_listener(directory, wildcard)
    assert json.loads((directory / "broker.json").read_text())["token_listeners"] == []


def test_deleting_the_token_revokes_it_and_the_next_query_gets_a_new_one(
    directory: Path,
) -> None:
    _, tcp, token = open_token_listener(directory, "127.0.0.1")
    with _admin(tcp, Password(token.jaas_config())) as admin:
        admin.create_topic("before", partitions=1)
    (directory / TOKEN_FILE).unlink()
    # Revoked for every new connection at once, with the broker still running.
    refused = pytest.raises(AuthenticationError, match="accepts only its log directory's token")
    with refused, _admin(tcp, Password(token.jaas_config())) as admin:
        admin.list_topics()
    # The next query's driver gets a new token on the same listener, and only it works.
    _, again, fresh = open_token_listener(directory, "127.0.0.1")
    assert again == tcp and fresh.token_id != token.token_id
    assert (directory / TOKEN_FILE).stat().st_mode & 0o777 == 0o600
    with _admin(tcp, Password(fresh.jaas_config())) as admin:
        assert "before" in admin.list_topics()
    with refused, _admin(tcp, Password(token.jaas_config())) as admin:
        admin.list_topics()


DAY_MS = 86_400_000


def test_a_token_is_renewed_when_half_its_lifetime_is_gone_and_replaced_once_expired(
    tmp_path: Path,
) -> None:
    first = EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=1_000)
    assert first.expiry_ms == 1_000 + DAY_MS
    assert (tmp_path / TOKEN_FILE).stat().st_mode & 0o777 == 0o600
    # More than half left: the file is not rewritten.
    mtime = (tmp_path / TOKEN_FILE).stat().st_mtime_ns
    same = EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=1_000 + DAY_MS // 4)
    assert same.expiry_ms == first.expiry_ms and (tmp_path / TOKEN_FILE).stat().st_mtime_ns == mtime
    # Less than half left: renewed, the same token.
    later = 1_000 + DAY_MS * 3 // 4
    renewed = EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=later)
    assert renewed == first and renewed.expiry_ms == later + DAY_MS
    assert EmbeddedToken.read(tmp_path) == renewed
    # A shorter lifetime takes effect at once.
    shortened = EmbeddedToken.issue_or_renew(tmp_path, 1_000, now_ms=later)
    assert shortened == first and shortened.expiry_ms == later + 1_000
    # Expired: a new token.
    fresh = EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=later + 1_000)
    assert fresh.token_id != first.token_id and fresh.hmac != first.hmac


def test_a_token_file_others_can_read_is_replaced(tmp_path: Path) -> None:
    first = EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=1_000)
    (tmp_path / TOKEN_FILE).chmod(0o640)
    fresh = EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=2_000)
    assert fresh.token_id != first.token_id
    assert (tmp_path / TOKEN_FILE).stat().st_mode & 0o777 == 0o600


def test_a_token_on_a_filesystem_that_ignores_chmod_is_kept_and_warned_about_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    first = EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=1_000)
    (tmp_path / TOKEN_FILE).chmod(0o644)
    # As a mount that reports every file 0644 whatever chmod does: replacing the token at
    # every request would fail every other query's tasks.
    monkeypatch.setattr("os.chmod", lambda *_args, **_kw: None)
    for now_ms in (2_000, 3_000):
        assert EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=now_ms) == first
    assert caplog.text.count("does not keep file permissions") == 1


def test_a_token_file_without_an_expiry_is_renewed_at_the_next_request(tmp_path: Path) -> None:
    old = {"version": 1, "token_id": "i" * 22, "hmac": "h" * 43, "owner": "alice"}
    (tmp_path / TOKEN_FILE).write_text(json.dumps(old))
    (tmp_path / TOKEN_FILE).chmod(0o600)
    token = EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=5)
    assert (token.token_id, token.hmac, token.expiry_ms) == ("i" * 22, "h" * 43, 5 + DAY_MS)


def test_the_keeper_refuses_an_expired_token_and_does_not_rederive_a_renewed_one(
    tmp_path: Path,
) -> None:
    now = [1_000]
    keeper = TokenKeeper(tmp_path, wall_ms=lambda: now[0])
    assert keeper.current() is REVOKED  # no token yet
    EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=now[0])
    credentials = keeper.current()
    assert credentials is not REVOKED and set(credentials.by_mechanism) == {
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
    }
    now[0] += DAY_MS * 3 // 4
    EmbeddedToken.issue_or_renew(tmp_path, DAY_MS, now_ms=now[0])
    assert keeper.current() is credentials  # renewed: the same credentials, not derived again
    now[0] += DAY_MS
    assert keeper.current() is REVOKED
    (tmp_path / TOKEN_FILE).write_text("{not json")
    assert keeper.current() is REVOKED


def test_an_expired_token_is_refused_until_a_driver_asks_again(directory: Path) -> None:
    ensure_broker(directory, config={"delegation.token.expiry.time.ms": "2000"})
    _, tcp, token = open_token_listener(directory, "127.0.0.1")
    assert 0 < token.expiry_ms - time.time() * 1000 <= 2000
    with _admin(tcp, Password(token.jaas_config())) as admin:
        admin.create_topic("t", partitions=1)
    time.sleep(max(0.0, token.expiry_ms / 1000 - time.time()) + 0.2)
    refused = pytest.raises(AuthenticationError, match="expired")
    with refused, _admin(tcp, Password(token.jaas_config())) as admin:
        admin.list_topics()
    assert "expired (delegation.token.expiry.time.ms" in (directory / "broker.log").read_text()
    _, again, fresh = open_token_listener(directory, "127.0.0.1")
    assert again == tcp and fresh.token_id != token.token_id
    with _admin(tcp, Password(fresh.jaas_config())) as admin:
        assert admin.list_topics() == ["t"]


def test_drivers_asking_at_once_share_one_listener(directory: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    ensure_broker(directory)
    with ThreadPoolExecutor(4) as pool:
        opened = list(pool.map(lambda _: open_token_listener(directory, "127.0.0.1"), range(4)))
    assert len({tcp for _, tcp, _ in opened}) == 1
    assert len({token.token_id for _, _, token in opened}) == 1


def test_an_unusable_token_file_is_answered_as_the_file_not_as_the_host(directory: Path) -> None:
    """Asked straight over the Unix socket (Spark's driver reads the file first and never
    gets here): a directory where the token file belongs is a storage error naming the file
    and saying to delete it, not "cannot listen on" the host, which would send the user to
    spark.driver.host."""
    ensure_broker(directory)
    (directory / TOKEN_FILE).mkdir()
    with Admin(path=str(directory)) as admin:
        response = admin._cluster.request(OpenTokenListenerRequest("127.0.0.1"))
    assert response.error_code == ErrorCode.KAFKA_STORAGE_ERROR, response
    assert TOKEN_FILE in response.error_message and "delete it" in response.error_message
    assert "cannot listen" not in response.error_message
    assert json.loads((directory / "broker.json").read_text())["token_listeners"] == []
