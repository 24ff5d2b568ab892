"""The topic browser's reading: one page of a partition's records from an offset or a time,
and a key or value shown as text, hex or JSON.

A page is read by a short-lived :class:`~spark_mq.Consumer` without a group (``assign`` and
``seek``; ``offsets_for_times`` for a time), so browsing never commits anything and never
joins a group. It reads with ``read_committed`` (the consumer's default): records of open or
aborted transactions are not shown.
"""

from __future__ import annotations

import binascii
import dataclasses
import datetime
import json
import time
from collections.abc import Callable
from typing import Final, Literal

from spark_mq.client.consumer import Consumer
from spark_mq.client.records import ConsumerRecord, TopicPartition
from spark_mq.errors import UsageError

Format = Literal["text", "hex", "json"]
FORMATS: Final[tuple[Format, ...]] = ("text", "hex", "json")

#: What a value shown as JSON starts with when it is not JSON (then shown as text).
NOT_JSON: Final = "(not JSON) "

#: How long one page waits for records it knows are there (between the offset asked for
#: and the end) before showing what it has.
PAGE_WAIT_S = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class ShownRecord:
    """One record as the browser shows it."""

    offset: int
    timestamp_ms: int
    key: str
    value: str
    headers: tuple[tuple[str, str], ...]

    @property
    def time_text(self) -> str:
        return format_time_ms(self.timestamp_ms)


@dataclasses.dataclass(frozen=True, slots=True)
class RecordPage:
    """Records of one partition from ``start_offset``, with the partition's bounds so the
    page can link to the previous and the next page."""

    tp: TopicPartition
    start_offset: int
    log_start: int
    log_end: int
    records: tuple[ShownRecord, ...]
    limit: int

    @property
    def next_offset(self) -> int | None:
        after = self.records[-1].offset + 1 if self.records else self.start_offset
        return after if after < self.log_end else None

    @property
    def previous_offset(self) -> int | None:
        if self.start_offset <= self.log_start:
            return None
        return max(self.log_start, self.start_offset - self.limit)


def format_time_ms(timestamp_ms: int) -> str:
    """A record timestamp as UTC ISO 8601 (``-`` for none).

    >>> format_time_ms(1500)
    '1970-01-01T00:00:01.500Z'
    """
    if timestamp_ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{timestamp_ms % 1000:03d}Z"


def parse_time_ms(text: str) -> int:
    """An ISO 8601 date-time as ms since the epoch; without a zone it is UTC, as the
    browser shows timestamps.

    >>> parse_time_ms("1970-01-01T00:00:01.5"), parse_time_ms("1970-01-01T02:00+02:00")
    (1500, 0)
    """
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"time {text!r} is not an ISO 8601 date-time, e.g. 2026-11-21T14:00:00 (UTC) "
            "or 2026-11-21T14:00:00+02:00"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return round(moment.timestamp() * 1000)


def show_bytes(data: bytes | None, fmt: Format) -> str:
    """``data`` as text (UTF-8, undecodable bytes as U+FFFD), hex, or indented JSON (with
    a note when it is not JSON); ``null`` for a null key or value.

    >>> show_bytes(b'{"a":1}', "json")
    '{\\n  "a": 1\\n}'
    >>> show_bytes(b"\\x00\\xff", "hex"), show_bytes(None, "text")
    ('00ff', 'null')
    """
    if data is None:
        return "null"
    if fmt == "hex":
        return binascii.hexlify(data).decode("ascii")
    text = data.decode("utf-8", errors="replace")
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return f"{NOT_JSON}{text}"
    return text


def shown(record: ConsumerRecord, fmt: Format) -> ShownRecord:
    headers = tuple(
        (k, show_bytes(v, "hex" if fmt == "hex" else "text")) for k, v in record.headers
    )
    # A key is often a plain string even when the values are JSON: shown as text then.
    key = show_bytes(record.key, fmt)
    if fmt == "json" and key.startswith(NOT_JSON):
        key = show_bytes(record.key, "text")
    return ShownRecord(
        record.offset,
        record.timestamp,
        key,
        show_bytes(record.value, fmt),
        headers,
    )


def read_page(
    open_consumer: Callable[[], Consumer],
    tp: TopicPartition,
    *,
    offset: int | None = None,
    timestamp_ms: int | None = None,
    limit: int,
    fmt: Format = "text",
    wait_s: float = PAGE_WAIT_S,
) -> RecordPage:
    """Up to ``limit`` records of ``tp`` from ``offset`` (default the log start) or from the
    first record at or after ``timestamp_ms``; an offset outside the log moves to its
    nearest end."""
    with open_consumer() as consumer:
        consumer.assign([tp])
        log_start = consumer.beginning_offsets([tp])[tp]
        log_end = consumer.end_offsets([tp])[tp]
        if timestamp_ms is not None:
            found = consumer.offsets_for_times({tp: timestamp_ms})[tp]
            start = log_end if found is None else found.offset
        else:
            start = log_start if offset is None else offset
        start = min(max(start, log_start), log_end)
        records: list[ConsumerRecord] = []
        if start < log_end:
            consumer.seek(tp, start)
            deadline = time.monotonic() + wait_s
            want = min(limit, log_end - start)
            while len(records) < want and time.monotonic() < deadline:
                got = consumer.poll(timeout_ms=200, max_records=want - len(records))
                records.extend(r for r in got.get(tp, ()) if r.offset < start + limit)
                if consumer.position(tp) >= log_end:
                    break
    return RecordPage(
        tp, start, log_start, log_end, tuple(shown(r, fmt) for r in records[:limit]), limit
    )
