"""Output of the ``spark-mq`` command line: tables for people, JSON for scripts, records.

Three shapes of output, one place that writes them:

- :func:`render_table`: columns aligned for a terminal, numbers right-aligned, an underline
  below the header, no borders (what ``kafka-topics --describe`` users expect to ``grep``).
- :func:`json_text`: one JSON document (``--json``), with keys in a stable order;
  :func:`print_result` and :func:`print_listing` print it or the text for people, so every
  command chooses between them the same way.
- :class:`RecordWriter`: consumed records as text lines (value, optionally preceded by
  partition:offset, timestamp, key and headers), JSON lines, or CSV.

Keys, values and header values are bytes. In text output they are written as they are (a
value is not re-encoded, so binary payloads survive a pipe); ``null`` stands for a missing key
or value, as in Kafka's console consumer. In JSON and CSV a valid UTF-8 byte string becomes a
string; anything else becomes ``{"base64": "..."}`` (JSON) or ``base64:...`` (CSV), so nothing
is lost and nothing is guessed.

>>> print(render_table(["topic", "partitions"], [["events", 3], ["audit", 12]]))
topic   partitions
------  ----------
events           3
audit           12
>>> bytes_to_json(b"caf\\xc3\\xa9"), bytes_to_json(b"\\xff")
('café', {'base64': '/w=='})
>>> plural(1, "partition"), plural(3, "bad batch", "es")
('1 partition', '3 bad batches')
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any, Final, Literal, Protocol

from tqdm import tqdm

RecordFormat = Literal["text", "json", "csv"]
RECORD_FORMATS: Final = ("text", "json", "csv")

#: What text output prints for a missing key or value (Kafka's console consumer does the same).
NULL_TEXT: Final = b"null"

CSV_COLUMNS: Final = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


class RecordLike(Protocol):
    """What the record writer needs of a consumed record (``ConsumerRecord`` has it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


# ---------------------------------------------------------------------------------------------
# Scalars


def bytes_to_json(data: bytes | None) -> str | dict[str, str] | None:
    """A UTF-8 string when ``data`` decodes as UTF-8, else ``{"base64": ...}``."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def bytes_to_csv(data: bytes | None) -> str:
    """The CSV cell of a key or value: the UTF-8 text, ``base64:...`` for other bytes, and an
    empty cell for null (CSV has no null; ``--format json`` keeps the difference)."""
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")


def format_cell(value: object) -> str:
    """Integers as they are (offsets and ids are copied into commands), floats with two
    decimals and thousands separators, ``-`` for None and NaN."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):  # nothing measured
            return "-"
        return f"{value:,.2f}"
    if value is None:
        return "-"
    return str(value)


def plural(count: int, word: str, suffix: str = "s") -> str:
    """``count`` and ``word``, with ``suffix`` unless ``count`` is 1: "1 record", "2 records"."""
    return f"{count} {word}{'' if count == 1 else suffix}"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------------
# Tables and documents


def render_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numeric columns right-aligned."""
    raw_rows = [list(r) for r in rows]
    cells = [[format_cell(v) for v in r] for r in raw_rows]
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    numeric = [
        bool(raw_rows) and all(_is_number(r[i]) or r[i] is None for r in raw_rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def render_pairs(pairs: Iterable[tuple[str, object]]) -> str:
    """``name: value`` lines with the names aligned (one object described)."""
    items = list(pairs)
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{k + ':':<{width + 1}} {format_cell(v)}" for k, v in items)


def json_text(document: object) -> str:
    """One JSON document, compact but readable: what ``--json`` prints."""
    return json.dumps(document, ensure_ascii=False, default=_json_default)


def print_result(as_json: bool, document: object, text: str) -> None:
    """Print what a command found or did: ``document`` as JSON with ``--json``, else ``text``
    (its lines for people)."""
    print(json_text(document) if as_json else text)


def print_listing(
    as_json: bool,
    documents: Sequence[object],
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    empty: str,
) -> None:
    """Print a list of things (topics, groups, ...): ``documents`` as one JSON array with
    ``--json``, else ``rows`` as a table, or ``empty`` (a sentence) when there are none."""
    if as_json:
        print(json_text(documents))
    elif rows:
        print(render_table(headers, rows))
    else:
        print(empty)


def _json_default(obj: object) -> Any:
    if isinstance(obj, bytes | bytearray | memoryview):
        return bytes_to_json(bytes(obj))
    if hasattr(obj, "_asdict"):
        return obj._asdict()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


# ---------------------------------------------------------------------------------------------
# Records


def record_to_json(record: RecordLike) -> dict[str, object]:
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": bytes_to_json(record.key),
        "value": bytes_to_json(record.value),
        "headers": [[k, bytes_to_json(v)] for k, v in record.headers],
    }


class RecordWriter:
    """Writes consumed records to a binary stream in one of :data:`RECORD_FORMATS`.

    ``print_*`` flags apply to text output only; JSON and CSV always carry every field.
    """

    def __init__(
        self,
        out: IO[bytes],
        fmt: RecordFormat,
        *,
        print_key: bool = False,
        print_offset: bool = False,
        print_timestamp: bool = False,
        print_headers: bool = False,
        separator: bytes = b"\t",
    ) -> None:
        self.out = out
        self.fmt = fmt
        self.print_key = print_key
        self.print_offset = print_offset
        self.print_timestamp = print_timestamp
        self.print_headers = print_headers
        self.separator = separator
        self._csv_buffer = io.StringIO()
        self._csv = csv.writer(self._csv_buffer, lineterminator="\n")
        if fmt == "csv":
            self._csv.writerow(CSV_COLUMNS)
            self._drain_csv()

    def write(self, record: RecordLike) -> None:
        if self.fmt == "json":
            self.out.write(json_text(record_to_json(record)).encode("utf-8") + b"\n")
        elif self.fmt == "csv":
            self._csv.writerow(
                (
                    record.topic,
                    record.partition,
                    record.offset,
                    record.timestamp,
                    bytes_to_csv(record.key),
                    bytes_to_csv(record.value),
                    json_text([[k, bytes_to_json(v)] for k, v in record.headers]),
                )
            )
            self._drain_csv()
        else:
            self.out.write(self._text_line(record))

    def _text_line(self, record: RecordLike) -> bytes:
        sep = self.separator
        parts: list[bytes] = []
        if self.print_offset:
            parts.append(f"{record.partition}:{record.offset}".encode())
        if self.print_timestamp:
            parts.append(str(record.timestamp).encode())
        if self.print_headers:
            parts.append(
                b",".join(
                    k.encode("utf-8") + b"=" + (NULL_TEXT if v is None else v)
                    for k, v in record.headers
                )
            )
        if self.print_key:
            parts.append(NULL_TEXT if record.key is None else record.key)
        parts.append(NULL_TEXT if record.value is None else record.value)
        return sep.join(parts) + b"\n"

    def _drain_csv(self) -> None:
        self.out.write(self._csv_buffer.getvalue().encode("utf-8"))
        self._csv_buffer.seek(0)
        self._csv_buffer.truncate()

    def flush(self) -> None:
        self.out.flush()


# ---------------------------------------------------------------------------------------------
# Progress


class ProgressBar:
    """Progress of long CLI work on stderr: done/total, rate and ETA (done and rate alone when
    the total is unknown), drawn by tqdm, redrawn at most 10 times a second.

    ``enabled`` False makes every call a no-op, so callers need no conditionals: commands
    enable it only when stderr is a terminal (or ``--progress`` asks), never with ``--json``
    unless asked, so piped and machine-read output stays clean (:func:`progress_wanted`).
    ``unit="B"`` counts bytes and shows them scaled (KiB, MiB).
    """

    def __init__(
        self,
        total: int | None,
        *,
        enabled: bool,
        stream: IO[str] | None = None,
        unit: str = "records",
    ) -> None:
        scaled = unit == "B"
        self._bar = tqdm(
            total=total,
            disable=not enabled,
            file=stream if stream is not None else sys.stderr,
            unit=unit if scaled else f" {unit}",
            unit_scale=scaled,
            unit_divisor=1024 if scaled else 1000,
            mininterval=0.1,
            dynamic_ncols=True,
        )

    def update(self, done: int) -> None:
        """``done`` units are done in all (not since the last call)."""
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)

    def finish(self, done: int) -> None:
        """Draw the final state and end the line."""
        self.update(done)
        self._bar.close()


def progress_wanted(args: Any, *, output_is_data: bool = False) -> bool:
    """Whether a command draws its progress bar: ``--progress`` asks for it; otherwise only
    when stderr is a terminal, ``--json`` was not asked, and (``output_is_data``: records go
    to stdout) stdout is not that terminal too, where the bar would tear the records."""
    if getattr(args, "progress", False):
        return True
    if getattr(args, "json", False) or not sys.stderr.isatty():
        return False
    return not (output_is_data and sys.stdout.isatty())


def summary_rows(summary: Mapping[str, object]) -> list[tuple[str, object]]:
    """Flatten a perf summary (nested ``latency_ms``) into ``name: value`` pairs."""
    rows: list[tuple[str, object]] = []
    for key, value in summary.items():
        if isinstance(value, Mapping):
            rows.extend((f"{key} {k}", v) for k, v in value.items())
        else:
            rows.append((key, value))
    return rows
