"""Turning exceptions into per-partition ``error_code`` / ``error_message`` pairs."""

from __future__ import annotations

import logging

from spark_mq.errors import PartitionOfflineError
from spark_mq.protocol.error_codes import ErrorCode, code_for

logger = logging.getLogger("spark_mq.broker.handlers")


def error_of(exc: BaseException, what: str) -> tuple[int, str]:
    """The code and message to answer for ``exc`` raised while doing ``what``.

    Errors we raise on purpose carry a message a person can act on and go back as they are.
    Anything unclassified is a broker bug or an environment failure: it is logged with its
    traceback, and the client gets a message pointing at the broker's log. An offline
    partition (:class:`~spark_mq.errors.PartitionOfflineError`) goes back as it is, unlogged:
    the broker logged it when it opened its log directory.
    """
    code = code_for(exc)
    if isinstance(exc, PartitionOfflineError):
        # Logged once, when the broker found the partition could not be opened; every
        # request for it would otherwise log it again.
        return int(code), str(exc)
    if code is ErrorCode.UNKNOWN_SERVER_ERROR or code is ErrorCode.KAFKA_STORAGE_ERROR:
        logger.error("%s failed: %s", what, exc, exc_info=exc)
        detail = f"{type(exc).__name__}: {exc}"
        return int(code), f"{what} failed on the broker ({detail}); see the broker's log"
    return int(code), str(exc)
