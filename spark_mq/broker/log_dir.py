"""What makes a path a log directory, and the check every ``path=DIR`` entry point makes.

Entry points come in two kinds (docs/broker.md, "Reading and creating entry points"):

- *creating* ones (a Producer, ``Admin.create_topic``, ``spark-mq topics create``,
  ``produce``, ``broker start``, the Spark sink) create the directory if it does not exist,
  and start its broker;
- *reading* ones (a Consumer, the other Admin calls, ``spark-mq consume``, ``topics
  list|describe``, ``groups``, the Spark source) require a directory that already holds a
  log, so that a mistyped path fails with :class:`~spark_mq.errors.LogDirectoryNotFoundError`
  instead of starting a broker that creates an empty log and reads nothing from it.

A directory *holds a log* when a broker has used it or is being started in it: it has the
broker's ``broker.meta.json`` (written at every start, before the broker serves), the
storage's ``.lock`` (created when a broker opens it) or ``.start.lock`` (created by a
creating client just before it starts the broker), so a reader that races with the creator
of a new directory waits for its broker instead of failing; or it has broker settings kept
for it (``server.properties``, written by ``spark-mq broker config --add-config``). Either
kind refuses a path that is not a directory.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "mq"
    >>> require_log_dir(d, create=False)
    Traceback (most recent call last):
    ...
    spark_mq.errors.LogDirectoryNotFoundError: no log directory at ... (it does not exist); ...
    >>> require_log_dir(d, create=True)
    >>> d.is_dir()
    True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from spark_mq.broker.dir_files import META_FILE, PRIVATE_DIR_MODE
from spark_mq.broker.persisted_config import PROPERTIES_FILE
from spark_mq.errors import LogDirectoryNotFoundError
from spark_mq.storage.dir_lock import LOCK_FILE_NAME

START_LOCK_FILE: Final = ".start.lock"
#: Any of these at the root of a directory means a broker used it, is being started in it,
#: or has settings kept for it.
LOG_MARKERS: Final = (META_FILE, LOCK_FILE_NAME, START_LOCK_FILE, PROPERTIES_FILE)

_HOW_TO_CREATE: Final = (
    "check the path; a log is created by a producer, by 'spark-mq topics create TOPIC "
    "--path {path}' or by 'spark-mq broker start --path {path}'"
)


def holds_log(root: Path) -> bool:
    """Whether ``root`` is a directory a broker has used or is being started in."""
    return any((root / name).exists() for name in LOG_MARKERS)


def require_log_dir(path: str | os.PathLike[str], *, create: bool) -> None:
    """Check ``path`` before a broker is found or started for it; create it if ``create``.

    Raises :class:`~spark_mq.errors.LogDirectoryNotFoundError` naming the absolute path if
    it is not a directory, or, unless ``create``, if it holds no log.
    """
    root = Path(path).absolute()
    if root.exists() and not root.is_dir():
        raise LogDirectoryNotFoundError(
            f"{root} is a file, not a log directory; give the path of a directory "
            "(it is created if it does not exist)",
            path=str(root),
        )
    if create:
        try:
            # The owner's only, as everything the broker creates in it.
            root.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        except OSError as exc:
            raise LogDirectoryNotFoundError(
                f"cannot create the log directory {root}: {exc.strerror or exc}",
                path=str(root),
            ) from exc
        return
    if not root.exists():
        why = "it does not exist"
    elif not holds_log(root):
        why = "the directory holds no spark_mq log"
    else:
        return
    raise LogDirectoryNotFoundError(
        f"no log directory at {root} ({why}); " + _HOW_TO_CREATE.format(path=root),
        path=str(root),
    )
