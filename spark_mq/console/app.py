"""The console's Flask application: the pages, the admin actions and the error pages.

Errors become pages, never tracebacks: an unknown topic, partition, group or transactional
id answers 404 saying which; a broker that cannot be reached 503 naming the address the
console uses and the client's reason; a bad parameter 400; an action the cluster refuses
(a group with members, a transaction with nothing to abort) 409. Jinja escapes everything
the pages show (autoescape is on for ``.html`` templates), names typed by users included.
"""

from __future__ import annotations

import logging

from flask import Flask, render_template
from werkzeug.exceptions import HTTPException

from spark_mq.console.actions import actions
from spark_mq.console.context import ConsoleContext, context
from spark_mq.console.pages import pages
from spark_mq.errors import (
    GroupIdNotFoundError,
    InvalidTxnStateError,
    NetworkError,
    NonEmptyGroupError,
    RequestTimedOutError,
    SparkMQError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
    UsageError,
)

log = logging.getLogger(__name__)

NOT_FOUND = (UnknownTopicOrPartitionError, GroupIdNotFoundError, TransactionalIdNotFoundError)
CONFLICT = (NonEmptyGroupError, InvalidTxnStateError)
UNREACHABLE = (NetworkError, RequestTimedOutError)


def create_app(ctx: ConsoleContext) -> Flask:
    """The WSGI application of one console (serve it with :mod:`spark_mq.console.server`)."""
    app = Flask(__name__)
    ctx.install(app)
    app.register_blueprint(pages)
    app.register_blueprint(actions)
    app.register_error_handler(SparkMQError, _cluster_error)
    app.register_error_handler(HTTPException, _http_error)
    app.jinja_env.globals["allow_admin"] = ctx.config.allow_admin
    app.jinja_env.globals["endpoint"] = ctx.config.endpoint_text
    return app


def _cluster_error(exc: SparkMQError) -> tuple[str, int]:
    endpoint = context().config.endpoint_text
    if isinstance(exc, NOT_FOUND):
        return _page(404, "Not found", str(exc))
    if isinstance(exc, UsageError):
        return _page(400, "Bad request", str(exc))
    if isinstance(exc, CONFLICT):
        return _page(409, "Refused by the cluster", str(exc))
    log.warning("console: reading %s failed: %s", endpoint, exc)
    if isinstance(exc, UNREACHABLE):
        return _page(
            503,
            "Broker unreachable",
            f"The console could not reach the broker at {endpoint}: {exc}",
        )
    return _page(
        502, "The cluster answered with an error", f"Asking {endpoint}: {type(exc).__name__}: {exc}"
    )


def _http_error(exc: HTTPException) -> tuple[str, int]:
    return _page(exc.code or 500, exc.name, exc.description or "")


def _page(status: int, title: str, message: str) -> tuple[str, int]:
    return render_template("error.html", status=status, title=title, message=message), status
