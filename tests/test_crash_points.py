"""spark_mq.crash_points: which calls an armed point fires on, and that nothing fires unless
armed. (The crash tests of the broker and the Spark sink use the real kill.)"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from spark_mq import crash_points
from spark_mq.crash_points import POINTS, CrashPoints, Scope


def recording(
    spec: str, pgid: int | None = None
) -> tuple[CrashPoints, list[tuple[Scope, int | None]]]:
    crashes: list[tuple[Scope, int | None]] = []
    points = CrashPoints.parse(spec, pgid=pgid)
    return CrashPoints(points.armed_at, points.pgid, lambda s, g: crashes.append((s, g))), crashes


def test_nothing_is_armed_without_the_variable() -> None:
    points = CrashPoints.from_environ({})
    assert not any(points.armed(name, 0) for name in POINTS)


def test_a_point_fires_on_its_key_only() -> None:
    points, crashes = recording("sink.commit.after_complete@3", pgid=77)
    points.reach("sink.commit.after_complete", 2)
    points.reach("sink.commit.before_complete", 3)
    assert crashes == []
    points.reach("sink.commit.after_complete", 3)
    assert crashes == [("group", 77)]


def test_a_point_without_a_key_fires_on_every_call() -> None:
    points, crashes = recording("txn.after_decision")
    points.reach("txn.after_decision")
    points.reach("txn.after_decision", 9)
    assert crashes == [("process", None), ("process", None)]


def test_a_modulo_key_fires_on_every_matching_batch() -> None:
    points = CrashPoints.parse(" sink.task.after_send@%3=2 , txn.after_decision", pgid=None)
    assert [b for b in range(9) if points.armed("sink.task.after_send", b)] == [2, 5, 8]
    assert not points.armed("sink.task.after_send", "5")  # modulo keys are integers
    assert points.armed("txn.after_decision")


def test_an_unknown_point_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown crash point 'txn\.after_decison'"):
        CrashPoints.parse("txn.after_decison", pgid=None)
    with pytest.raises(ValueError, match="unknown crash point"):
        CrashPoints.parse("", pgid=None).reach("no.such.point")


def test_reach_soon_fires_from_a_timer() -> None:
    points, crashes = recording("sink.commit.during_complete@1")
    assert points.reach_soon("sink.commit.during_complete", 0, 0.0) is None
    timer = points.reach_soon("sink.commit.during_complete", 1, 0.001)
    assert timer is not None
    timer.join()
    assert crashes == [("group", None)]


def test_an_armed_point_kills_the_process() -> None:
    code = "from spark_mq import crash_points as c; c.reach('txn.after_decision'); print('alive')"
    env = {
        "SPARK_MQ_CRASH_AT": "txn.after_decision",
        "PYTHONPATH": str(Path(crash_points.__file__).parents[1]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True
    )
    assert done.returncode == -9, done.stderr
    assert "alive" not in done.stdout


def test_the_module_imports_nothing_of_spark_mq() -> None:
    tree = ast.parse(Path(crash_points.__file__).read_text(encoding="utf-8"))
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert not [name for name in imported if name and name.startswith("spark_mq")]


def test_no_production_module_reads_a_test_variable() -> None:
    root = Path(crash_points.__file__).parent
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "crash_points.py" and "_TEST_" in path.read_text(encoding="utf-8")
    ]
    assert offenders == []
