"""Output helpers of the command line: tables, JSON, record formats, progress bar."""

from __future__ import annotations

import csv
import io
import json
from typing import NamedTuple

from spark_mq.cli.format import (
    ProgressBar,
    RecordWriter,
    bytes_to_json,
    json_text,
    render_pairs,
    render_table,
    summary_rows,
)


class Rec(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def test_table_aligns_text_left_and_numbers_right():
    text = render_table(["topic", "partitions", "note"], [["a", 3, None], ["longer", 12, "x"]])
    assert text.splitlines() == [
        "topic   partitions  note",
        "------  ----------  ----",
        "a                3  -",
        "longer          12  x",
    ]


def test_table_with_no_rows_is_just_the_header():
    assert render_table(["a", "b"], []).splitlines() == ["a  b", "-  -"]


def test_pairs_and_summary_rows_flatten_nested_latency():
    rows = summary_rows({"records": 5, "latency_ms": {"p50": 1.5, "max": float("nan")}})
    assert rows == [("records", 5), ("latency_ms p50", 1.5), ("latency_ms max", rows[2][1])]
    assert render_pairs(rows).splitlines() == [
        "records:        5",
        "latency_ms p50: 1.50",
        "latency_ms max: -",
    ]


def test_bytes_to_json_keeps_utf8_and_base64s_the_rest():
    assert bytes_to_json(None) is None
    assert bytes_to_json("é".encode()) == "é"
    assert bytes_to_json(b"\xff\x00") == {"base64": "/wA="}
    assert json.loads(json_text({"v": b"\xff"})) == {"v": {"base64": "/w=="}}


def test_text_records_raw_bytes_with_optional_fields():
    out = io.BytesIO()
    w = RecordWriter(out, "text", print_key=True, print_offset=True, print_headers=True)
    w.write(Rec("t", 1, 7, 1000, b"k", b"v\xff", (("h", b"1"), ("n", None))))
    w.write(Rec("t", 0, 8, 1000, None, None))
    assert out.getvalue() == b"1:7\th=1,n=null\tk\tv\xff\n0:8\t\tnull\tnull\n"


def test_text_records_value_only_by_default():
    out = io.BytesIO()
    RecordWriter(out, "text").write(Rec("t", 0, 0, 5, b"k", b"hello"))
    assert out.getvalue() == b"hello\n"


def test_json_records_one_document_per_line():
    out = io.BytesIO()
    w = RecordWriter(out, "json")
    w.write(Rec("t", 2, 3, 99, b"k", b"\x01\xfe", (("a", b"b"),)))
    lines = out.getvalue().decode().splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "topic": "t",
            "partition": 2,
            "offset": 3,
            "timestamp": 99,
            "key": "k",
            "value": {"base64": "Af4="},
            "headers": [["a", "b"]],
        }
    ]


def test_csv_records_have_a_header_row_and_quote_properly():
    out = io.BytesIO()
    w = RecordWriter(out, "csv")
    w.write(Rec("t", 0, 1, 5, None, b'a,"b"\nc'))
    rows = list(csv.reader(io.StringIO(out.getvalue().decode())))
    assert rows == [
        ["topic", "partition", "offset", "timestamp", "key", "value", "headers"],
        ["t", "0", "1", "5", "", 'a,"b"\nc', "[]"],
    ]


def test_progress_bar_draws_only_when_enabled():
    quiet = io.StringIO()
    bar = ProgressBar(10, enabled=False, stream=quiet)
    bar.update(5)
    bar.finish(10)
    assert quiet.getvalue() == ""
    loud = io.StringIO()
    bar = ProgressBar(10, enabled=True, stream=loud)
    bar.update(5)
    bar.finish(10)
    text = loud.getvalue()
    assert "10/10" in text and "records/s" in text and text.endswith("\n")
    # An unknown total: the count and the rate, no ETA.
    open_ended = io.StringIO()
    bar = ProgressBar(None, enabled=True, stream=open_ended)
    bar.finish(42)
    assert "42 records" in open_ended.getvalue()
    # Bytes are scaled.
    sized = io.StringIO()
    bar = ProgressBar(3 * 1024 * 1024, enabled=True, stream=sized, unit="B")
    bar.finish(3 * 1024 * 1024)
    assert "3.00M/3.00M" in sized.getvalue()
