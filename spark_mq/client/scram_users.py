"""The admin side of SCRAM users (Kafka's Admin.alterUserScramCredentials and
describeUserScramCredentials): ``Admin.alter_user_scram_credentials`` and
``Admin.describe_user_scram_credentials``.

The client salts the password itself (RFC 5802's SaltedPassword, with a fresh random salt)
and sends that, never the password, as Kafka's Admin does; the broker derives and keeps the
stored and server keys (protocol/sasl.py).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.sasl import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialInfo,
    ScramCredentialUpsertion,
)
from spark_mq.scram import MIN_ITERATIONS, SALT_BYTES, salted_password


@dataclasses.dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Set ``user``'s credential for ``mechanism`` from ``password`` (Kafka's
    UserScramCredentialUpsertion). The repr hides the password."""

    user: str
    mechanism: str
    password: str = dataclasses.field(repr=False)
    iterations: int = MIN_ITERATIONS


@dataclasses.dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    """Remove ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str


Alteration = UserScramCredentialUpsertion | UserScramCredentialDeletion


def alter_request(alterations: Sequence[Alteration]) -> AlterUserScramCredentialsRequest:
    deletions = []
    upsertions = []
    for item in alterations:
        if isinstance(item, UserScramCredentialDeletion):
            deletions.append(ScramCredentialDeletion(item.user, item.mechanism))
            continue
        salt = os.urandom(SALT_BYTES)
        salted = salted_password(item.mechanism, item.password, salt, item.iterations)
        upsertions.append(
            ScramCredentialUpsertion(item.user, item.mechanism, item.iterations, salt, salted)
        )
    return AlterUserScramCredentialsRequest(deletions, upsertions)


def alter_user_scram_credentials(
    request_fn: Callable[[Any], Any], alterations: Sequence[Alteration]
) -> None:
    """Send the alterations; raise the first user's error (UnacceptableCredentialError,
    say) after all were tried: a user's alterations succeed or fail together."""
    response: AlterUserScramCredentialsResponse = request_fn(alter_request(alterations))
    for result in response.results:
        if result.error_code != ErrorCode.NONE:
            raise error_from_code(result.error_code, result.error_message)


def describe_user_scram_credentials(
    request_fn: Callable[[Any], Any], users: Sequence[str] | None = None
) -> dict[str, list[ScramCredentialInfo]]:
    """Each user's credentials (mechanism and iterations). ``users`` None: every user;
    a named user without a credential raises ResourceNotFoundError."""
    response: DescribeUserScramCredentialsResponse = request_fn(
        DescribeUserScramCredentialsRequest(None if users is None else list(users))
    )
    if response.error_code != ErrorCode.NONE:
        raise error_from_code(response.error_code, response.error_message)
    out: dict[str, list[ScramCredentialInfo]] = {}
    for result in response.results:
        if result.error_code != ErrorCode.NONE:
            raise error_from_code(result.error_code, result.error_message)
        out[result.user] = list(result.credential_infos)
    return out
