"""The topic browser's value formats and page links, and the docstring examples of the
console's modules."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from spark_mq.client.records import ConsumerRecord, TopicPartition
from spark_mq.console import config, log_sizes, record_view
from spark_mq.console.record_view import RecordPage, ShownRecord, parse_time_ms, show_bytes, shown
from spark_mq.errors import UsageError


@pytest.mark.parametrize("module", [config, log_sizes, record_view])
def test_docstring_examples_run(module: ModuleType) -> None:
    assert doctest.testmod(module).failed == 0


def test_formats() -> None:
    assert show_bytes(b"caf\xc3\xa9", "text") == "café"
    assert show_bytes(b"\xff", "text") == "\ufffd"  # undecodable: shown, not an error
    assert show_bytes(b"[1, 2]", "json") == "[\n  1,\n  2\n]"
    assert show_bytes(b"plain", "json") == "(not JSON) plain"
    assert show_bytes(b"", "hex") == ""


def test_a_plain_key_beside_json_values_is_text() -> None:
    record = ConsumerRecord("t", 0, 7, 1500, 0, b"user-1", b'{"a": 1}', (("h", b"\x01"),))
    assert shown(record, "json") == ShownRecord(
        7, 1500, "user-1", '{\n  "a": 1\n}', (("h", "\x01"),)
    )
    assert shown(record, "hex").headers == (("h", "01"),)


def test_bad_time_says_what_to_type() -> None:
    with pytest.raises(UsageError, match="ISO 8601"):
        parse_time_ms("yesterday")


def page(start: int, count: int, log_start: int = 0, log_end: int = 100) -> RecordPage:
    records = tuple(ShownRecord(start + i, 0, "", "", ()) for i in range(count))
    return RecordPage(TopicPartition("t", 0), start, log_start, log_end, records, 10)


def test_page_links() -> None:
    assert (page(0, 10).previous_offset, page(0, 10).next_offset) == (None, 10)
    assert (page(15, 10).previous_offset, page(15, 10).next_offset) == (5, 25)
    assert page(5, 10, log_start=3).previous_offset == 3
    assert page(90, 10).next_offset is None  # the last page
    assert page(100, 0).next_offset is None  # at the end, nothing to show
