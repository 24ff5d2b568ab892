"""docs/groups.md, section "Assignors", agrees with the code it describes."""

from __future__ import annotations

import re
from pathlib import Path

from spark_mq.client.assignors import (
    ASSIGNORS,
    Assignment,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
    metadata,
)

DOC = (Path(__file__).parents[3] / "docs" / "groups.md").read_text()
SECTION = DOC[DOC.index("## Assignors") :]


def layout_lines(text: str) -> list[str]:
    return [
        " ".join(line.split())
        for line in text.splitlines()
        if re.match(r"\s*(subscription|assignment|sticky data)\s+\[", line)
    ]


def test_wire_layout_matches_the_metadata_module() -> None:
    assert metadata.__doc__ is not None
    assert layout_lines(SECTION) == layout_lines(metadata.__doc__)
    assert len(layout_lines(SECTION)) == 3


def test_every_assignor_has_a_table_row() -> None:
    for name, cls in ASSIGNORS.items():
        protocol = cls.rebalance_protocol.name.lower()
        assert f"| `{name}` | {protocol} |" in SECTION, name


def test_the_documented_examples_hold() -> None:
    subs = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
    prose = " ".join(SECTION.split())
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        result: dict[str, Assignment] = assignor.assign({"t0": 3, "t1": 3}, subs)
        for member, assignment in result.items():
            shown = ", ".join(str(tp) for tp in assignment.partitions)
            assert f"`{member}` gets `{shown}`" in prose, (assignor.name, member)
