"""docs/clients.md lists every client setting with its real default."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from spark_mq.client.config import AdminConfig, ClientConfig, ConsumerConfig, ProducerConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"


def _tables() -> list[dict[str, str]]:
    settings = DOC.read_text().split("## Settings", 1)[1]
    tables: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in settings.splitlines():
        match = re.match(r"\| `([a-z.]+)` \| (.+?) \|", line)
        if match:
            if current is None:
                current = {}
                tables.append(current)
            current[match.group(1)] = match.group(2).strip("`")
        elif not line.startswith("|"):
            current = None
    return tables


def _shown(value: object) -> str:
    if value in ("", ()):
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@pytest.mark.parametrize(
    ("index", "cls"),
    [(0, ClientConfig), (1, ProducerConfig), (2, ConsumerConfig), (3, AdminConfig)],
)
def test_every_setting_is_documented_with_its_default(index: int, cls: type) -> None:
    shared = {f.metadata["key"] for f in dataclasses.fields(ClientConfig)}
    fields = [
        f for f in dataclasses.fields(cls) if cls is ClientConfig or f.metadata["key"] not in shared
    ]
    documented = _tables()[index]
    assert set(documented) == {f.metadata["key"] for f in fields}
    for f in fields:
        shown = documented[f.metadata["key"]]
        if f.metadata["key"] == "acks":
            shown = "-1" if shown == "all" else shown
        assert shown == _shown(f.default), f.metadata["key"]
