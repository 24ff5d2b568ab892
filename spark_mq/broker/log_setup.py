"""Structured logging for the broker: one JSON object per line.

Each line has ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``, ``msg`` and
``pid``, plus ``exc`` with the traceback when there is one and any ``extra=`` fields. A
foreground broker logs to stderr; the embedded local broker logs to ``broker.log`` in its
directory, rotated at :data:`MAX_LOG_BYTES` with :data:`LOG_BACKUPS` old files kept, so a
long-lived directory never fills its disk with logs.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Final

LOG_FILE: Final = "broker.log"
#: Starts the one line a broker that cannot start or go on writes last to stderr, after
#: logging it: the cause, which the client that started it reports (see broker/main.py).
FAILURE_PREFIX: Final = "spark_mq broker: "
MAX_LOG_BYTES: Final = 10 * 1024 * 1024
LOG_BACKUPS: Final = 3

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        out: dict[str, object] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = (
                    value if isinstance(value, str | int | float | bool | None) else repr(value)
                )
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def setup_logging(*, log_dir: str | os.PathLike[str] | None, level: str = "INFO") -> None:
    """Send spark_mq's logs as JSON lines to ``<log_dir>/broker.log`` (rotated) if given,
    else to stderr. Replaces handlers installed by an earlier call."""
    handler: logging.Handler
    if log_dir is not None:
        handler = logging.handlers.RotatingFileHandler(
            Path(log_dir) / LOG_FILE,
            maxBytes=MAX_LOG_BYTES,
            backupCount=LOG_BACKUPS,
            encoding="utf-8",
        )
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level.upper())
    # asyncio reports every connection reset at ERROR; the broker logs what matters itself.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
