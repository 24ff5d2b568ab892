"""The SASL state machine of one connection (spark_mq/broker/sasl/authenticator.py), fed
real exchanges: scramp's client for SCRAM, RFC 4616 messages for PLAIN, against a real
credential store in a temporary log directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import scramp

from spark_mq.broker.sasl.authenticator import (
    TRANSITIONS,
    ExchangeFailedError,
    SaslServerSession,
    SaslState,
)
from spark_mq.broker.sasl.credential_store import CredentialStore, FileCredentialBackend
from spark_mq.errors import CorruptCheckpointError, IllegalSaslStateError
from spark_mq.principal import KafkaPrincipal
from spark_mq.scram import ScramCredential

ALL = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@pytest.fixture
def store(tmp_path: Path) -> CredentialStore:
    store = CredentialStore(FileCredentialBackend(tmp_path))
    store.alter_user(
        "alice",
        [ScramCredential.from_password(m, "pw") for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")],
        [],
    )
    return store


def scram(session: SaslServerSession, mechanism: str, user: str, password: str) -> None:
    client = scramp.ScramClient([mechanism], user, password)
    session.handshake(mechanism)
    first, _ = session.step(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final, _ = session.step(client.get_client_final().encode())
    client.set_server_final(final.decode())  # raises if the server's proof is wrong


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_completes_with_the_right_password(store: CredentialStore, mechanism: str) -> None:
    session = SaslServerSession(store, ALL)
    scram(session, mechanism, "alice", "pw")
    assert session.complete and session.principal == KafkaPrincipal.user("alice")


@pytest.mark.parametrize(("user", "password"), [("alice", "nope"), ("mallory", "pw")])
def test_scram_fails_for_a_wrong_password_or_user(
    store: CredentialStore, user: str, password: str
) -> None:
    session = SaslServerSession(store, ALL)
    with pytest.raises(ExchangeFailedError):
        scram(session, "SCRAM-SHA-256", user, password)
    assert session.state is SaslState.FAILED and not session.complete
    error = session.failure_for_client()
    assert error.user == user and password not in str(error)


def test_plain_checks_the_salted_credential(store: CredentialStore) -> None:
    good = SaslServerSession(store, ALL)
    good.handshake("PLAIN")
    answer, check = good.step(b"\0alice\0pw")
    assert answer == b"" and check is not None and check()
    good.finish_plain(True)
    assert good.complete

    bad = SaslServerSession(store, ALL)
    bad.handshake("PLAIN")
    _, check = bad.step(b"alice\0alice\0wrong")
    assert check is not None and not check()
    with pytest.raises(ExchangeFailedError, match="wrong password"):
        bad.finish_plain(False)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"\0mallory\0pw", "unknown user"),
        (b"bob\0alice\0pw", "impersonation"),
        (b"alice\0pw", "not authzid NUL user NUL password"),
        (b"\0\0pw", "empty user"),
        (b"\0\xff\0pw", "not UTF-8"),
        (b"\0alice\0" + b"p" * 9000, "limit"),
    ],
)
def test_plain_refusals(store: CredentialStore, message: bytes, reason: str) -> None:
    session = SaslServerSession(store, ALL)
    session.handshake("PLAIN")
    with pytest.raises(ExchangeFailedError, match=reason):
        session.step(message)
    assert session.state is SaslState.FAILED


def test_requests_out_of_turn(store: CredentialStore) -> None:
    early = SaslServerSession(store, ALL)
    with pytest.raises(IllegalSaslStateError, match="before SaslHandshake"):
        early.step(b"\0alice\0pw")
    twice = SaslServerSession(store, ALL)
    twice.handshake("PLAIN")
    with pytest.raises(IllegalSaslStateError, match="only once"):
        twice.handshake("PLAIN")
    done = SaslServerSession(store, ALL)
    scram(done, "SCRAM-SHA-512", "alice", "pw")
    with pytest.raises(IllegalSaslStateError):
        done.step(b"more")
    done.fail()  # refusing a request after completion leaves the authentication as it was
    assert done.complete


def test_transition_table() -> None:
    assert TRANSITIONS[SaslState.FAILED] == frozenset()
    assert SaslState.COMPLETE not in TRANSITIONS[SaslState.HANDSHAKE]
    # A completed session only starts over (re-authentication) or fails.
    assert TRANSITIONS[SaslState.COMPLETE] == {SaslState.AUTHENTICATING, SaslState.FAILED}


class Clock:
    """The session's injected clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reauthenticating(
    store: CredentialStore, clock: Clock, lifetime_ms: int = 1000
) -> SaslServerSession:
    session = SaslServerSession(
        store, ALL, max_reauth_ms=dict.fromkeys(ALL, lifetime_ms), clock=clock
    )
    scram(session, "SCRAM-SHA-512", "alice", "pw")
    return session


def test_a_session_expires_after_its_lifetime_and_reauthenticates(
    store: CredentialStore,
) -> None:
    clock = Clock()
    session = reauthenticating(store, clock)
    assert session.session_lifetime_ms == 1000 and not session.reauthenticating
    assert not session.expired(clock.now + 0.999) and session.expired(clock.now + 1.0)
    # Re-authenticated after the expiry: the same principal, and a new lifetime from now.
    clock.now += 1.5
    scram(session, "SCRAM-SHA-512", "alice", "pw")
    assert session.complete and session.reauthenticating
    assert session.principal == KafkaPrincipal.user("alice")
    assert not session.expired(clock.now + 0.5) and session.expired(clock.now + 1.0)
    # Without a lifetime a session never expires, and a second handshake is out of turn.
    forever = SaslServerSession(store, ALL, clock=clock)
    scram(forever, "SCRAM-SHA-512", "alice", "pw")
    assert forever.session_lifetime_ms == 0 and not forever.expired(clock.now + 1e9)
    with pytest.raises(IllegalSaslStateError, match=r"connections\.max\.reauth\.ms is 0"):
        forever.handshake("SCRAM-SHA-512")


def test_reauthentication_as_another_user_is_refused(store: CredentialStore) -> None:
    store.alter_user("bob", [ScramCredential.from_password("SCRAM-SHA-512", "bob-pw")], [])
    session = reauthenticating(store, Clock())
    with pytest.raises(ExchangeFailedError, match="User:alice to User:bob") as info:
        scram(session, "SCRAM-SHA-512", "bob", "bob-pw")
    assert session.state is SaslState.FAILED
    error = session.failure_for_client(info.value.for_client)
    assert "re-authentication" in str(error) and "User:bob" in str(error)
    assert "bob-pw" not in str(error)


def test_reauthentication_with_another_mechanism_is_refused(store: CredentialStore) -> None:
    session = reauthenticating(store, Clock())
    with pytest.raises(ExchangeFailedError, match="keeps its mechanism"):
        session.handshake("SCRAM-SHA-256")
    assert session.state is SaslState.FAILED and session.mechanism == "SCRAM-SHA-512"


@pytest.mark.parametrize("change", ["removed", "new password"])
def test_a_removed_user_or_changed_password_cannot_reauthenticate(
    store: CredentialStore, change: str
) -> None:
    session = reauthenticating(store, Clock())
    if change == "removed":
        store.alter_user("alice", [], ["SCRAM-SHA-256", "SCRAM-SHA-512"])
    else:
        store.alter_user("alice", [ScramCredential.from_password("SCRAM-SHA-512", "pw2")], [])
    with pytest.raises(ExchangeFailedError):
        scram(session, "SCRAM-SHA-512", "alice", "pw")
    error = session.failure_for_client()
    assert session.state is SaslState.FAILED
    assert error.mechanism == "SCRAM-SHA-512" and error.user == "alice"
    assert "re-authentication of user 'alice' failed" in str(error)


def test_credentials_survive_a_reload_and_a_corrupt_file_is_refused(
    store: CredentialStore, tmp_path: Path
) -> None:
    again = CredentialStore(FileCredentialBackend(tmp_path))
    assert again.credentials("alice") == store.credentials("alice")
    (tmp_path / "scram-credentials.json").write_text('{"version": 9}')
    with pytest.raises(CorruptCheckpointError, match=r"scram-credentials\.json"):
        CredentialStore(FileCredentialBackend(tmp_path))


def test_credentials_file_is_owner_only_even_over_a_leftover_tmp(tmp_path: Path) -> None:
    leftover = tmp_path / "scram-credentials.json.tmp"
    leftover.write_text("torn")
    leftover.chmod(0o644)
    store = CredentialStore(FileCredentialBackend(tmp_path))
    store.alter_user("bob", [ScramCredential.from_password("SCRAM-SHA-256", "pw")], [])
    assert (tmp_path / "scram-credentials.json").stat().st_mode & 0o777 == 0o600
