"""A small JSON document a broker keeps in its log directory: versioned, written whole and
atomically, owner-only when it holds secrets, and refused loudly when it cannot be read.

The form every such file shares::

    {"version": 1, ...the owner's fields...}

The single node's SCRAM credentials (``scram-credentials.json``,
:mod:`spark_mq.broker.sasl.credential_store`), its client quotas (``client-quotas.json``,
:mod:`spark_mq.broker.quotas.store`) and the embedded broker's token
(``embedded-token.json``, :mod:`spark_mq.broker.embedded_token`) are such files. The first two
are maps of named entities (``{"version": 1, "users": {"alice": {...}}}``): a
:class:`JsonStateFile` reads their section with :meth:`~JsonStateFile.read_section` and
:func:`with_entry` is the map after one entity changed.

**Writing** goes through :func:`~spark_mq.storage.checkpoint_file.atomic_write_bytes`: a
temporary file, fsynced, renamed over the old one, the directory fsynced; a crash leaves the
old file or the new one, never a torn one. The mode (0600 by default: these files hold
secrets or who may do what) is set on the temporary file before anything is in it.

**Reading** returns None when the file is missing (nothing stored yet). Anything else that is
not the expected document (not JSON, not an object, another version, a field the owner's
parser refuses) raises :class:`~spark_mq.errors.CorruptCheckpointError` naming the file and
saying what to do, in the owner's words: a broker that cannot read its users or quotas stops
rather than serve without them, and nothing is overwritten.

Threads: the owner orders its writes (each owner holds a lock or is the only writer).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from spark_mq.errors import CorruptCheckpointError
from spark_mq.storage.checkpoint_file import atomic_write_bytes

T = TypeVar("T")

#: Owner read and write only: what a file holding secrets gets.
PRIVATE_FILE_MODE: Final = 0o600
#: What an owner's parser may raise for a document it refuses (ConfigError and
#: UnicodeDecodeError are ValueErrors).
_REFUSALS: Final = (ValueError, KeyError, TypeError, AttributeError)


@dataclasses.dataclass(frozen=True)
class JsonStateFile:
    """One versioned JSON file (see the module docstring)."""

    path: Path
    #: The CorruptCheckpointError's message, with ``{path}`` and ``{reason}`` to fill in: it
    #: says what the file is and what to do when it cannot be read.
    corrupt_message: str
    #: The ``version`` written and the only one read.
    version: int = 1
    #: The file's mode; None: the process's umask decides.
    mode: int | None = PRIVATE_FILE_MODE
    #: Keys sorted when written (the file then reads the same however the map was built).
    sort_keys: bool = True
    #: A file larger than this is refused unread (None: no limit).
    max_bytes: int | None = None

    def read(self, parse: Callable[[dict[str, Any]], T]) -> T | None:
        """``parse(the document)``, None if the file is missing. CorruptCheckpointError if
        it is not this file's document or ``parse`` refuses it (ValueError, KeyError,
        TypeError or AttributeError)."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read() if self.max_bytes is None else f.read(self.max_bytes + 1)
        except FileNotFoundError:
            return None
        try:
            if self.max_bytes is not None and len(raw) > self.max_bytes:
                raise ValueError(f"larger than {self.max_bytes} bytes")
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("version") != self.version:
                raise ValueError(f"version must be {self.version}")
            return parse(doc)
        except _REFUSALS as exc:
            raise CorruptCheckpointError(
                self.corrupt_message.format(path=self.path, reason=exc), path=str(self.path)
            ) from exc

    def read_section(self, section: str, parse: Callable[[dict[str, Any]], T]) -> T | None:
        """``parse(the object under key section)``, as :meth:`read`."""

        def parse_section(doc: dict[str, Any]) -> T:
            entries = doc[section]
            if not isinstance(entries, dict):
                raise ValueError(f"{section} must be an object")
            return parse(entries)

        return self.read(parse_section)

    def write(self, body: Mapping[str, Any]) -> None:
        """Replace the file by ``{"version": <version>, **body}``, atomically."""
        doc = {"version": self.version, **body}
        data = json.dumps(doc, sort_keys=self.sort_keys).encode()
        atomic_write_bytes(self.path, data, mode=self.mode)


def with_entry(
    entries: Mapping[str, dict[str, str]], name: str, config: dict[str, str]
) -> dict[str, dict[str, str]]:
    """A copy of ``entries`` where ``name`` has ``config`` (empty: ``name`` is removed)."""
    out = dict(entries)
    if config:
        out[name] = config
    else:
        out.pop(name, None)
    return out
