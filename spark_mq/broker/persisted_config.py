"""``DIR/server.properties``: the settings of a directory's broker, kept with its log.

A local broker is started again and again: by ``spark-mq broker start``, and on demand by
any client after it idled out or died. Settings given once (``broker start --override
log.retention.ms=60000``, ``broker config --add-config ...``) are written to this file, and
every start of a broker for the directory reads it, so they hold until changed, as Kafka's
``server.properties`` does.

Format: Java properties (Kafka's), UTF-8, one ``key=value`` a line, keys sorted, after a
comment saying what wrote it. Written by replacing the whole file atomically (a temporary
file in the directory, fsynced, renamed over the old one, the directory fsynced), mode 0600:
a crash leaves the old file or the new one, never a torn one. Two writers at once: the last
rename wins (each writes a complete file). ``log.dirs`` is never stored: the directory is
where the file is.

Precedence at a start, lowest first: the embedded broker's defaults (``--local``), this
file, then what that one start is given (``--config FILE``, ``--override``, the ``config``
of :func:`~spark_mq.broker.local.ensure_broker`).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> update_persisted(d, {"log.retention.ms": "60000"}, ())
    {'log.retention.ms': '60000'}
    >>> read_persisted(d)
    {'log.retention.ms': '60000'}
    >>> update_persisted(d, {}, ["log.retention.ms"])
    {}
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.properties_file import parse_properties
from spark_mq.errors import ConfigError
from spark_mq.storage.checkpoint_file import fsync_directory

PROPERTIES_FILE: Final = "server.properties"
#: Keys that name the directory itself; the file's place already says which it is.
DIRECTORY_KEYS: Final = frozenset({"log.dirs", "log.dir"})
#: A settings file is a few kilobytes; anything this large is not one.
MAX_FILE_BYTES: Final = 1024 * 1024

_HEADER: Final = (
    "# Settings of the broker of this log directory, read at every start of it (Kafka keys).\n"
    "# Written by spark-mq broker start --override and spark-mq broker config; see\n"
    '# docs/broker.md, "Settings kept in the directory".\n'
)


def persisted_path(root: str | os.PathLike[str]) -> Path:
    return Path(root) / PROPERTIES_FILE


def read_persisted(root: str | os.PathLike[str]) -> dict[str, str]:
    """The settings stored in ``root``; ``{}`` if it has none. Raises ConfigError naming the
    file for one that cannot be read or parsed (values are checked by :func:`check_persisted`)."""
    path = persisted_path(root)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):
        return {}  # no settings yet (whether the path is a directory is checked elsewhere)
    except OSError as exc:
        raise ConfigError(
            f"cannot read the broker settings file {path}: {exc.strerror or exc}", key=str(path)
        ) from exc
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(
            f"the broker settings file {path} is over {MAX_FILE_BYTES} bytes: not one this "
            "program wrote; move it away",
            key=str(path),
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the broker settings file {path} is not UTF-8 text: {exc}") from exc
    return parse_properties(text, source=str(path))


def check_persisted(root: str | os.PathLike[str], props: Mapping[str, str]) -> None:
    """Raise ConfigError naming the file, the key and the fix if ``props`` (the content of
    ``root``'s file) holds a setting the broker refuses."""
    try:
        ServerConfig.from_properties({**props, "log.dirs": str(Path(root).absolute())})
    except ConfigError as exc:
        raise _in_file(root, exc) from exc


def _in_file(root: str | os.PathLike[str], exc: ConfigError) -> ConfigError:
    fix = ""
    if exc.key:
        fix = (
            f"; change it with 'spark-mq broker config --path {root} --add-config "
            f"{exc.key}=VALUE' or remove it with '--delete-config {exc.key}'"
        )
    return ConfigError(f"{persisted_path(root)}: {exc}{fix}", key=exc.key, value=exc.value)


def load_persisted(root: str | os.PathLike[str]) -> dict[str, str]:
    """:func:`read_persisted` then :func:`check_persisted`: what a starting broker uses."""
    props = read_persisted(root)
    check_persisted(root, props)
    return props


def update_persisted(
    root: str | os.PathLike[str], add: Mapping[str, str], delete: Iterable[str]
) -> dict[str, str]:
    """Set the keys of ``add``, remove those of ``delete``, and write the file (removed when
    nothing is left). Checked before anything is written: a setting the broker would refuse,
    or the removal of a key that is not kept, raises ConfigError and the file stays as it
    was. Returns the new settings."""
    delete = list(delete)
    both = sorted(set(add) & set(delete))
    if both:
        raise ConfigError(
            f"{both[0]} is both set and removed; give it once", key=both[0], value=add[both[0]]
        )
    current = read_persisted(root)
    unknown = [k for k in delete if k not in current]
    if unknown:
        raise ConfigError(
            f"{unknown[0]} is not a kept setting of {root} (kept: "
            f"{', '.join(sorted(current)) or 'none'})",
            key=unknown[0],
        )
    new = {k: v for k, v in current.items() if k not in delete}
    new.update({k: v for k, v in add.items() if k not in DIRECTORY_KEYS})
    try:
        ServerConfig.from_properties({**new, "log.dirs": str(Path(root).absolute())})
    except ConfigError as exc:
        if exc.key in current and exc.key not in add:
            raise _in_file(root, exc) from exc  # a bad setting already in the file
        raise
    if new != current:
        write_persisted(root, new)
    return new


#: Characters Python's ``str.splitlines`` (which the reader uses) ends a line at, besides
#: ``\n`` and ``\r``: written as a four-hex-digit ``\u`` escape (``\u0085`` for NEL) so that a
#: value never spans lines.
_LINE_BREAKS: Final = frozenset("\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
_NAMED_ESCAPES: Final = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(text: str, *, key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif ch in _LINE_BREAKS or ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        elif (key and ch in "=: ") or (i == 0 and ch in "#! "):
            # A separator inside a key, and what would start a comment or be trimmed as
            # leading blank, keep their meaning only escaped.
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str]) -> str:
    """The file's text: the header comment, then ``key=value`` lines, sorted and escaped so
    that :func:`~spark_mq.broker.config.parse_properties` reads back exactly ``props``."""
    lines = [f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in sorted(props.items())]
    return _HEADER + "".join(line + "\n" for line in lines)


def write_persisted(root: str | os.PathLike[str], props: Mapping[str, str]) -> None:
    """Replace the file with ``props`` atomically, mode 0600 (remove it if ``props`` is
    empty)."""
    path = persisted_path(root)
    if not props:
        path.unlink(missing_ok=True)
        fsync_directory(path.parent)
        return
    # mkstemp creates the file 0600 with a unique name, so concurrent writers never share
    # a temporary file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{PROPERTIES_FILE}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(format_properties(props).encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)
