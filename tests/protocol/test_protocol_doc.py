"""docs/protocol.md is the single truth of the wire format: these tests parse it and compare
it with spark_mq.protocol, so neither can drift from the other.

Checked: the frame layout tables (byte by byte against encoded frames), the frame size limit,
every message schema (field names, order, types and defaults), the API table, the error-code
table (every code, its name, ``retriable`` and class) and the worked hex examples.
"""

from __future__ import annotations

import enum
import json
import re
import struct
import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from spark_mq.protocol.api import (
    APIS,
    ApiKey,
    FrameErrorBody,
    encode_frame_error,
    encode_request,
    encode_response,
)
from spark_mq.protocol.error_codes import _CLASS_BY_CODE, ErrorCode
from spark_mq.protocol.fetch import FetchPartitionResponse
from spark_mq.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from spark_mq.protocol.metadata import MetadataRequest
from spark_mq.protocol.produce import ProducePartition, ProduceResponse

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
DOC = DOC_PATH.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Parsing the document


def section(heading: str) -> str:
    """The text under ``heading`` (a whole line, e.g. '### Request frame') up to the next
    heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    lines = DOC.splitlines()
    start = lines.index(heading) + 1
    end = len(lines)
    for i in range(start, len(lines)):
        hashes = lines[i].split(" ", 1)[0]
        if set(hashes) == {"#"} and len(hashes) <= len(level):
            end = i
            break
    return "\n".join(lines[start:end])


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the Markdown tables in ``text``, cells stripped (header and rule
    rows dropped)."""
    rows = []
    lines = [line for line in text.splitlines() if line.startswith("|")]
    for i, line in enumerate(lines):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        is_rule = all(re.fullmatch(r":?-+:?", cell) for cell in cells)
        next_is_rule = i + 1 < len(lines) and re.fullmatch(r"[|:\- ]+", lines[i + 1])
        if not is_rule and not next_is_rule:
            rows.append(cells)
    return rows


def code_blocks(language: str | None = None) -> list[str]:
    pattern = r"^```" + (re.escape(language) if language else r"\w*") + r"\n(.*?)^```"
    return re.findall(pattern, DOC, flags=re.DOTALL | re.MULTILINE)


def hex_blocks() -> list[bytes]:
    """The bytes of every ```hex block: each line starts with hex bytes, then two or more
    spaces and a comment."""
    out = []
    for block in code_blocks("hex"):
        data = bytearray()
        for line in block.splitlines():
            match = re.fullmatch(r"((?:[0-9a-f]{2} )*[0-9a-f]{2})(?: {2,}.*)?", line)
            assert match, f"not a hex line in docs/protocol.md: {line!r}"
            data += bytes.fromhex(match.group(1))
        out.append(bytes(data))
    return out


def documented_schemas() -> dict[str, list[tuple[str, str, str | None]]]:
    """Every ``Name = [ ... ]`` schema in the document: name -> [(field, type, default)]."""
    schemas: dict[str, list[tuple[str, str, str | None]]] = {}
    for block in code_blocks():
        current: list[tuple[str, str, str | None]] | None = None
        for line in block.splitlines():
            if match := re.fullmatch(r"(\w+) = \[", line):
                assert match.group(1) not in schemas, f"{match.group(1)} documented twice"
                current = schemas[match.group(1)] = []
            elif line == "]":
                current = None
            elif current is not None:
                field = re.fullmatch(r" {4}(\w+): (.+?)(?: = (.+))?", line)
                assert field, f"not a schema field line in docs/protocol.md: {line!r}"
                current.append((field.group(1), field.group(2), field.group(3)))
    return schemas


# ---------------------------------------------------------------------------------------------
# What the code says


def wire_type(tp: Any) -> str:
    """A field type in the document's notation."""
    origin = typing.get_origin(tp)
    if tp in (int, str, bool, float):
        return str(tp.__name__)
    if isinstance(tp, type) and issubclass(tp, enum.IntEnum):
        return "int"  # the ACL messages' enums travel as Kafka's numbers
    if tp is bytes:
        return "bin"
    if tp is type(None):
        return "nil"
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp.__name__
    if origin is list:
        return f"[{wire_type(typing.get_args(tp)[0])}]"
    if origin is dict:
        key, value = typing.get_args(tp)
        return f"{{{wire_type(key)}: {wire_type(value)}}}"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(wire_type(arg) for arg in typing.get_args(tp))
    raise TypeError(f"no notation for {tp!r}")


def wire_default(field: msgspec.structs.FieldInfo) -> str | None:
    if field.required:
        return None
    value = field.default
    if field.default_factory is not msgspec.NODEFAULT:
        value = field.default_factory()
    if isinstance(value, bytes):
        return f"b{json.dumps(value.decode('latin-1'))}"
    return "nil" if value is None else json.dumps(value)


def message_structs() -> dict[str, type[msgspec.Struct]]:
    """Every struct that can appear in a body, by name."""
    found: dict[str, type[msgspec.Struct]] = {}

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            if found.setdefault(tp.__name__, tp) is not tp:
                raise AssertionError(f"two message structs are named {tp.__name__}")
            for field in msgspec.structs.fields(tp):
                visit(field.type)
        for arg in typing.get_args(tp):
            visit(arg)

    visit(FrameErrorBody)
    for spec in APIS.values():
        visit(spec.request_type)
        visit(spec.response_type)
    return found


# ---------------------------------------------------------------------------------------------
# Frames


def _check_layout(rows: list[list[str]], frame: bytes, expected: dict[str, bytes]) -> None:
    """Each row (offset, size, field, type, meaning) must locate exactly ``expected[field]``
    in ``frame``, the rows must tile the frame, and int types must match their sizes."""
    # `body_len` first: its name contains an "n".
    variables = {"`body_len`": len(expected["body"]), "n": len(expected.get("client_id", b""))}

    def evaluate(expr: str) -> int:
        for name, value in variables.items():
            expr = expr.replace(name, str(value))
        assert re.fullmatch(r"\d+( \+ \d+)*", expr), f"cannot evaluate {expr!r}"
        return sum(int(term) for term in expr.split(" + "))

    position = 0
    assert [row[2].strip("`") for row in rows] == list(expected)
    for offset_text, size_text, field, type_text, _ in rows:
        name = field.strip("`")
        offset = evaluate(offset_text)
        assert offset == position, f"{name} documented at {offset}, follows at {position}"
        size = len(frame) - offset if size_text == "rest" else evaluate(size_text)
        if type_text.startswith("int"):
            assert size * 8 == int(type_text[3:]), name
        assert frame[offset : offset + size] == expected[name], name
        position = offset + size
    assert position == len(frame)


def test_request_frame_layout() -> None:
    body_request = MetadataRequest(topics=["t"])
    records = b"RECORDS"
    head, body = encode_request(
        body_request, correlation_id=7, client_id="cli", records_len=len(records)
    )
    frame = head + body + records
    expected = {
        "size": struct.pack(">i", len(frame) - 4),
        "api_key": struct.pack(">h", 3),
        "api_version": struct.pack(">h", 0),
        "correlation_id": struct.pack(">i", 7),
        "client_id_len": struct.pack(">h", 3),
        "client_id": b"cli",
        "body_len": struct.pack(">i", len(body)),
        "body": body,
        "records": records,
    }
    _check_layout(table_rows(section("### Request frame")), frame, expected)


def test_response_frame_layout() -> None:
    response = ProduceResponse(topics=[])
    records = b"RECORDS"
    head, body = encode_response(response, correlation_id=9, records_len=len(records))
    frame = head + body + records
    expected = {
        "size": struct.pack(">i", len(frame) - 4),
        "correlation_id": struct.pack(">i", 9),
        "frame_error": struct.pack(">h", 0),
        "body_len": struct.pack(">i", len(body)),
        "body": body,
        "records": records,
    }
    _check_layout(table_rows(section("### Response frame")), frame, expected)


def test_frame_size_limit() -> None:
    limits = section("### Limits")
    assert f"{DEFAULT_MAX_FRAME_BYTES:,}" in limits
    assert "socket.request.max.bytes" in limits


def test_records_size_fields_are_the_documented_ones() -> None:
    carriers = {
        name for name, cls in message_structs().items() if "records_size" in cls.__struct_fields__
    }
    assert carriers == {ProducePartition.__name__, FetchPartitionResponse.__name__}
    records_section = section("### The records section")
    for name in carriers:
        assert f"`{name}`" in records_section


# ---------------------------------------------------------------------------------------------
# Bodies


def test_every_message_struct_is_documented_exactly() -> None:
    schemas = documented_schemas()
    structs = message_structs()
    assert set(schemas) == set(structs)
    for name, cls in structs.items():
        fields = [(f.name, wire_type(f.type), wire_default(f)) for f in msgspec.structs.fields(cls)]
        assert schemas[name] == fields, f"docs/protocol.md schema of {name}"


def test_api_table() -> None:
    rows = [row for row in table_rows(section("## APIs")) if row[0].isdigit()]
    assert len(rows) == len(APIS)
    for key_text, name, versions, request, response, module in rows:
        spec = APIS[ApiKey(int(key_text))]
        assert name.replace(" ", "").lower() == spec.key.name.replace("_", "").lower()
        assert versions == f"{spec.min_version}-{spec.max_version}"
        assert request == f"`{spec.request_type.__name__}`"
        assert response == f"`{spec.response_type.__name__}`"
        for cls in (spec.request_type, spec.response_type):
            assert module == f"`{cls.__module__.rsplit('.', 1)[-1]}`"
        assert f"({int(key_text)})" in DOC, f"no section for API {name}"


# ---------------------------------------------------------------------------------------------
# Error codes


def test_error_table_lists_every_code() -> None:
    rows = table_rows(section("## Error codes"))
    by_code = {int(row[0]): row for row in rows if re.fullmatch(r"-?\d+", row[0])}
    assert set(by_code) == {int(code) for code in ErrorCode}
    for code in ErrorCode:
        _, name, retriable, cls, _ = by_code[code]
        assert name == f"`{code.name}`"
        assert retriable == ("yes" if code.retriable else "no"), code.name
        if code is ErrorCode.NONE:
            assert cls == "-"
        else:
            assert cls == f"`{_CLASS_BY_CODE[code].__name__}`", code.name


# ---------------------------------------------------------------------------------------------
# Worked examples


def test_hex_examples() -> None:
    request, frame_error = hex_blocks()
    head, body = encode_request(MetadataRequest(topics=["t"]), correlation_id=7, client_id="cli")
    assert request == head + body
    assert len(request) == 26
    assert frame_error == encode_frame_error(7, 35, "version 9")


@pytest.mark.parametrize("heading", ["## Connections", "## Frames", "## Bodies", "## APIs"])
def test_sections_exist(heading: str) -> None:
    assert section(heading).strip()
