"""Java ``.properties`` files, the form of Kafka's ``server.properties``, and the
``--override key=value`` flags of ``python -m spark_mq.broker``.

    >>> parse_properties("a=1\\nb: two words\\n# comment\\nc three")
    {'a': '1', 'b': 'two words', 'c': 'three'}
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from spark_mq.errors import ConfigError


def parse_properties(text: str, *, source: str = "<properties>") -> dict[str, str]:
    """Parse Java ``.properties`` text: ``key=value``, ``key: value`` or ``key value``.

    ``#`` and ``!`` start comment lines; a line ending in an odd number of backslashes
    continues on the next one. Escapes (``\\t``, ``\\n``, ``\\\\``, ``\\=``) are decoded. A
    key given twice keeps the last value, as Java does.
    """
    out: dict[str, str] = {}
    logical: list[str] = []
    for line in _logical_lines(text.splitlines()):
        logical.append(line)
    for number, line in enumerate(logical, 1):
        stripped = line.lstrip()
        if not stripped or stripped[0] in "#!":
            continue
        key, value = _split_property(stripped)
        if not key:
            raise ConfigError(f"{source}: line {number} has a value but no key: {line!r}")
        out[_unescape(key)] = _unescape(value)
    return out


def _logical_lines(lines: Iterable[str]) -> Iterable[str]:
    pending = ""
    for raw in lines:
        line = pending + (raw.lstrip() if pending else raw)
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        pending = ""
        yield line
    if pending:
        yield pending


def _split_property(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t":
            key = line[:i]
            rest = line[i:].lstrip(" \t")
            if rest[:1] in ("=", ":") and ch in " \t":
                rest = rest[1:].lstrip(" \t")
            elif ch in "=:":
                rest = line[i + 1 :].lstrip(" \t")
            return key, rest
        i += 1
    return line, ""


_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                try:
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def read_properties_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a ``.properties`` file (UTF-8), naming the file in every error."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read broker config file {path}: {exc.strerror or exc}", key="--config"
        ) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"broker config file {path} is not UTF-8 text: {exc}") from exc
    return parse_properties(text, source=str(path))


def parse_override(text: str) -> tuple[str, str]:
    """``key=value`` from a ``--override`` flag."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(
            f"--override {text!r} must be key=value, e.g. --override log.retention.ms=60000",
            key="--override",
            value=text,
        )
    return key.strip(), value.strip()
