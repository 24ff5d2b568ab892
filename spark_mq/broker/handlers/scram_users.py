"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): the SCRAM users of
the broker (a single node: its log directory; a cluster: ZooKeeper, applied by every broker
through a change notification; see :mod:`spark_mq.broker.sasl.credential_store`).

An upsertion carries the salted password (RFC 5802's SaltedPassword) that the client
computed; the broker derives the stored and server keys and keeps only those. A user's
alterations succeed or fail together; the users of one request are applied one by one, each
answered on its own. Refused with UNACCEPTABLE_CREDENTIAL (93): an empty user name, a
mechanism other than SCRAM-SHA-256/512, iterations outside 4096..16384 (Kafka's bounds), an
empty salt or salted password, two alterations of one mechanism of one user, and deleting
a credential that is not there.

Who may call these is the authorizer's business (Kafka: Alter / Describe on the Cluster);
without one, any connection that may send requests may.
"""

from __future__ import annotations

import logging

from spark_mq.broker.context import RequestContext, Response
from spark_mq.errors import ConfigError, UnacceptableCredentialError
from spark_mq.protocol.error_codes import ErrorCode, code_for
from spark_mq.protocol.sasl import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
    ScramCredentialDeletion,
    ScramCredentialInfo,
    ScramCredentialUpsertion,
)
from spark_mq.scram import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_HASHES, ScramCredential

logger = logging.getLogger("spark_mq.broker.sasl")


async def handle_describe_user_scram_credentials(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest, _: memoryview
) -> Response:
    store = ctx.core.credentials
    users = store.users() if request.users is None else list(dict.fromkeys(request.users))
    results = []
    for user in users:
        creds = store.credentials(user)
        if not creds:
            results.append(
                DescribeUserScramCredentialsResult(
                    user,
                    int(ErrorCode.RESOURCE_NOT_FOUND),
                    f"user {user!r} has no SCRAM credential (add one with spark-mq users add)",
                    [],
                )
            )
            continue
        infos = [ScramCredentialInfo(m, c.iterations) for m, c in sorted(creds.items())]
        results.append(DescribeUserScramCredentialsResult(user, 0, None, infos))
    return Response(DescribeUserScramCredentialsResponse(0, None, results))


def _unacceptable(user: str, what: str) -> UnacceptableCredentialError:
    return UnacceptableCredentialError(f"user {user!r}: {what}; nothing was changed for it")


def _validated(
    request: AlterUserScramCredentialsRequest,
) -> dict[str, tuple[list[ScramCredential], list[str]] | UnacceptableCredentialError]:
    """Each user's alterations, or why they are refused."""
    out: dict[str, tuple[list[ScramCredential], list[str]] | UnacceptableCredentialError] = {}
    seen: set[tuple[str, str]] = set()
    items: list[ScramCredentialDeletion | ScramCredentialUpsertion] = [
        *request.deletions,
        *request.upsertions,
    ]
    for item in items:
        user, mechanism = item.name, item.mechanism
        entry = out.setdefault(user, ([], []))
        if isinstance(entry, UnacceptableCredentialError):
            continue
        error = None
        if not user:
            error = _unacceptable(user, "the user name is empty")
        elif mechanism not in SCRAM_HASHES:
            error = _unacceptable(
                user, f"{mechanism!r} is not a SCRAM mechanism ({', '.join(SCRAM_HASHES)})"
            )
        elif (user, mechanism) in seen:
            error = _unacceptable(user, f"{mechanism} is altered twice in one request")
        seen.add((user, mechanism))
        if error is None and isinstance(item, ScramCredentialUpsertion):
            if not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
                error = _unacceptable(
                    user,
                    f"iterations {item.iterations} is outside {MIN_ITERATIONS}..{MAX_ITERATIONS}",
                )
            elif not item.salt or not item.salted_password:
                error = _unacceptable(user, "the salt and the salted password must not be empty")
            else:
                entry[0].append(
                    ScramCredential.from_salted_password(
                        mechanism, item.salted_password, item.salt, item.iterations
                    )
                )
        elif error is None:
            entry[1].append(mechanism)
        if error is not None:
            out[user] = error
    return out


async def handle_alter_user_scram_credentials(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest, _: memoryview
) -> Response:
    store = ctx.core.credentials
    results = []
    for user, work in sorted(_validated(request).items()):
        if isinstance(work, UnacceptableCredentialError):
            results.append(AlterUserScramCredentialsResult(user, work.error_code, str(work)))
            continue
        upserts, deletions = work
        try:
            await ctx.core.run_blocking(store.alter_user, user, upserts, deletions)
        except ConfigError as exc:
            error = _unacceptable(user, str(exc))
            results.append(AlterUserScramCredentialsResult(user, error.error_code, str(error)))
            continue
        except Exception as exc:
            logger.exception("altering the SCRAM credentials of user %r failed", user)
            results.append(AlterUserScramCredentialsResult(user, int(code_for(exc)), str(exc)))
            continue
        logger.info(
            "%s (%s) altered the SCRAM credentials of user %r",
            ctx.session.principal,
            ctx.peer,
            user,
        )
        results.append(AlterUserScramCredentialsResult(user, 0))
    return Response(AlterUserScramCredentialsResponse(results))
