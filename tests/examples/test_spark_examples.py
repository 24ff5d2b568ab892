"""The Spark examples run end to end: the main job (examples/quickstart.py), the
spark-submit batch job and the notebook, whose code cells run in order in a fresh Python
process (as a notebook kernel would), so none of them can rot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[2]
#: A Spark job on a loaded 2-core machine; generous, the jobs take well under a minute idle.
TIMEOUT_S = 600


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _run(command: list[str], **env: str) -> str:
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env=_env(**env),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    return done.stdout


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data directory whose embedded brokers are stopped after the test."""
    from spark_mq.broker.local import stop_broker

    yield tmp_path
    for lock_holder in tmp_path.rglob("mq"):
        if lock_holder.is_dir():
            stop_broker(lock_holder)


@pytest.mark.slow
def test_quickstart_counts_every_event_exactly_once(data_dir: Path) -> None:
    out = _run(
        [sys.executable, "examples/quickstart.py", "--dir", str(data_dir), "--events", "5000"]
    )
    assert "round 2: the streaming query processed them (exactly once)" in out
    assert "OK: every event counted exactly once" in out
    assert "WRONG" not in out


@pytest.mark.slow
def test_batch_job_runs_under_spark_submit(data_dir: Path) -> None:
    submit = Path(sys.executable).with_name("spark-submit")
    command = [str(submit), "--master", "local[2]"] if submit.exists() else [sys.executable]
    out = _run(
        [*command, "examples/batch_job.py", "--path", str(data_dir / "mq"), "--seed-rows", "5000"]
    )
    assert "seeded 5,000 orders into 'orders'" in out
    assert "'order-totals' now holds 500 committed records" in out


def notebook_code(path: Path) -> str:
    """The notebook's code cells, in order, as one script."""
    notebook = json.loads(path.read_text())
    cells = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    assert cells, "the notebook has no code"
    return "\n\n".join(cells) + "\n"


@pytest.mark.slow
def test_notebook_cells_run_in_order(data_dir: Path) -> None:
    script = data_dir / "notebook.py"
    script.write_text(notebook_code(ROOT / "examples" / "notebook.ipynb"))
    shutil.rmtree(data_dir / "nb", ignore_errors=True)
    out = _run([sys.executable, str(script)], SPARK_MQ_NOTEBOOK_DIR=str(data_dir / "nb"))
    assert "alerts written" in out
