"""The examples run end to end (they are what the README's quickstart executes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_pipeline_demo_counts_every_event_once_across_two_runs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = _run("pipeline_demo.py", "--path", str(data), "--records", "120000")
    assert "processed 120,000 events" in first
    assert "every event was counted exactly once" in first
    second = _run("pipeline_demo.py", "--path", str(data), "--records", "30000")
    assert "processed 30,000 events" in second
    assert "every event was counted exactly once" in second


@pytest.mark.slow
def test_storage_demo_writes_and_reopens(tmp_path: Path) -> None:
    out = _run("storage_demo.py", "--path", str(tmp_path / "d"), "--records", "50000")
    assert out
