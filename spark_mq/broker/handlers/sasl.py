"""SaslHandshake (17) and SaslAuthenticate (36): a connection on a SASL listener proves who
it is (the exchange itself is :mod:`spark_mq.broker.sasl.authenticator`).

Every refusal closes the connection, as Kafka's SaslServerAuthenticator does: a mechanism the
listener does not enable (UNSUPPORTED_SASL_MECHANISM, with the enabled ones listed), a request
out of turn (ILLEGAL_SASL_STATE), and a failed exchange (SASL_AUTHENTICATION_FAILED, naming
the mechanism and the user, never the password). Failures are logged with the peer, the
mechanism, the user and the reason, rate-limited (repeats counted) so that a client retrying
in a loop cannot flood the log. A failed exchange is answered only after
``connection.failed.authentication.delay.ms``. On a connection that needs no SASL (a
PLAINTEXT or UNIX listener) both APIs are answered ILLEGAL_SASL_STATE and the connection is
closed.

Re-authentication (``connections.max.reauth.ms``): SaslHandshake on an authenticated
connection starts the exchange again (:mod:`spark_mq.broker.sasl.authenticator` says when it
may). Its outcome is counted in the broker's metrics
(``spark_mq_sasl_reauthentications_total{mechanism, result}``); a failure is logged and
closes the connection as a first authentication's does. The SaslAuthenticate response that
completes an exchange carries the session's lifetime (``session_lifetime_ms``).
"""

from __future__ import annotations

import asyncio
import logging

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import REPEATED
from spark_mq.broker.sasl.authenticator import ExchangeFailedError, SaslServerSession
from spark_mq.errors import IllegalSaslStateError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

logger = logging.getLogger("spark_mq.broker.sasl")

_NOT_SASL = (
    "this listener does not use SASL (connect to the broker's SASL_PLAINTEXT listener, or "
    "leave security.protocol at PLAINTEXT here); the connection is closed"
)


def _log_failure(
    ctx: RequestContext,
    mechanism: str | None,
    user: str | None,
    why: str,
    session: SaslServerSession | None = None,
) -> None:
    reauthenticating = session is not None and session.reauthenticating
    if reauthenticating:
        assert session is not None
        ctx.core.metrics.sasl.reauthenticated(session.mechanism, ok=False)
    REPEATED.log(
        ("sasl failure", ctx.peer.rpartition(":")[0], mechanism, why),
        logging.WARNING,
        "SASL %s %s of user %r from %s failed: %s; closed the connection",
        mechanism,
        "re-authentication" if reauthenticating else "authentication",
        user,
        ctx.peer,
        why,
    )


async def handle_sasl_handshake(
    ctx: RequestContext, request: SaslHandshakeRequest, _: memoryview
) -> Response:
    session = ctx.session.sasl
    if session is None:
        _log_failure(ctx, request.mechanism, None, "SaslHandshake on a listener without SASL")
        return Response(
            SaslHandshakeResponse(int(ErrorCode.ILLEGAL_SASL_STATE), []), close_connection=True
        )
    enabled = list(session.enabled)
    if request.mechanism not in session.enabled:
        _log_failure(ctx, request.mechanism, None, "mechanism not enabled")
        session.fail()
        return Response(
            SaslHandshakeResponse(int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), enabled),
            close_connection=True,
        )
    try:
        session.handshake(request.mechanism)
    except IllegalSaslStateError as exc:
        _log_failure(ctx, request.mechanism, None, str(exc))
        session.fail()
        return Response(
            SaslHandshakeResponse(int(ErrorCode.ILLEGAL_SASL_STATE), enabled),
            close_connection=True,
        )
    except ExchangeFailedError as exc:
        # A re-authentication with another mechanism: the answer names the one this
        # connection may use.
        _log_failure(ctx, request.mechanism, exc.user, str(exc), session)
        assert session.mechanism is not None
        return Response(
            SaslHandshakeResponse(int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), [session.mechanism]),
            close_connection=True,
        )
    return Response(SaslHandshakeResponse(0, enabled))


async def handle_sasl_authenticate(
    ctx: RequestContext, request: SaslAuthenticateRequest, _: memoryview
) -> Response:
    session = ctx.session.sasl
    if session is None:
        _log_failure(ctx, None, None, "SaslAuthenticate on a listener without SASL")
        return Response(
            SaslAuthenticateResponse(int(ErrorCode.ILLEGAL_SASL_STATE), _NOT_SASL),
            close_connection=True,
        )
    try:
        answer, check = session.step(bytes(request.auth_bytes))
        if check is not None:
            session.finish_plain(await ctx.core.run_blocking(check))
    except IllegalSaslStateError as exc:
        _log_failure(ctx, session.mechanism, session.user, str(exc), session)
        session.fail()
        message = f"{exc}; the connection is closed"
        return Response(
            SaslAuthenticateResponse(int(ErrorCode.ILLEGAL_SASL_STATE), message),
            close_connection=True,
        )
    except ExchangeFailedError as exc:
        _log_failure(ctx, session.mechanism, exc.user, str(exc), session)
        # Kafka's connection.failed.authentication.delay.ms: slows down password guessing.
        delay_ms = ctx.core.config.sasl.connection_failed_authentication_delay_ms
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        return _failed(session, exc.for_client)
    if not session.complete:
        return Response(SaslAuthenticateResponse(0, None, answer))
    if session.reauthenticating:
        ctx.core.metrics.sasl.reauthenticated(session.mechanism, ok=True)
        logger.debug(
            "%s re-authenticated as %s with SASL %s", ctx.peer, session.principal, session.mechanism
        )
    else:
        ctx.session.principal = session.principal
        logger.info(
            "%s authenticated as %s with SASL %s", ctx.peer, session.principal, session.mechanism
        )
    return Response(SaslAuthenticateResponse(0, None, answer, session.session_lifetime_ms))


def _failed(session: SaslServerSession, reason: str | None) -> Response:
    error = session.failure_for_client(reason)
    return Response(
        SaslAuthenticateResponse(int(ErrorCode.SASL_AUTHENTICATION_FAILED), str(error)),
        close_connection=True,
    )
