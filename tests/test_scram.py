"""SCRAM credentials (spark_mq/scram.py): Kafka's text form, and keys equal to an independent
implementation's (scramp's) for the same password, salt and iterations."""

from __future__ import annotations

import base64

import pytest
import scramp

from spark_mq.errors import ConfigError
from spark_mq.scram import ScramCredential, salted_password


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_keys_match_scramp(mechanism: str) -> None:
    salt = b"0123456789abcdef"
    ours = ScramCredential.from_password(mechanism, "pencil", salt=salt, iterations=4096)
    their_salt, stored, server, _ = scramp.ScramMechanism(mechanism).make_auth_info(
        "pencil", iteration_count=4096, salt=salt
    )
    assert (ours.salt, ours.stored_key, ours.server_key) == (their_salt, stored, server)


def test_kafka_text_form_round_trips() -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-512", "pw", salt=b"s" * 32)
    text = cred.to_kafka_string()
    assert text.startswith(f"salt={base64.b64encode(b's' * 32).decode()},stored_key=")
    assert text.endswith(",iterations=4096")
    assert ScramCredential.parse(text, "SCRAM-SHA-512") == cred


def test_password_is_verified_and_never_in_the_text() -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "correct horse")
    assert cred.verify_password("correct horse")
    assert not cred.verify_password("correct hors")
    assert "correct horse" not in cred.to_kafka_string()


def test_salted_password_is_the_salting_of_the_credential() -> None:
    salt = b"x" * 32
    salted = salted_password("SCRAM-SHA-256", "pw", salt, 4096)
    assert ScramCredential.from_salted_password(
        "SCRAM-SHA-256", salted, salt, 4096
    ) == ScramCredential.from_password("SCRAM-SHA-256", "pw", salt=salt)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("salt=AA==,stored_key=AA==", "lacks iterations, server_key"),
        ("salt,stored_key=AA==", "not name=value"),
        ("salt=!!,stored_key=AA==,server_key=AA==,iterations=4096", "SCRAM-SHA-256"),
        ("salt=AA==,stored_key=AA==,server_key=AA==,iterations=many", "SCRAM-SHA-256"),
    ],
)
def test_bad_text_is_a_config_error(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ScramCredential.parse(text, "SCRAM-SHA-256")


def test_other_mechanisms_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"SCRAM-SHA-1.*not a SCRAM mechanism"):
        ScramCredential.from_password("SCRAM-SHA-1", "pw")
