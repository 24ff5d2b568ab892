"""Fixtures of the command-line tests.

- ``mq_path``: a log directory whose local broker (started once per test session with
  ``ensure_broker``, no idle exit) the in-process tests share; each test uses its own topics.
- ``cli``: runs ``spark_mq.cli.main`` in this process and returns a :class:`CliResult` with
  the exit status and the captured stdout (bytes and text) and stderr.
- ``run_cli``: runs ``python -m spark_mq.cli`` in a subprocess (for signals, pipes, exit
  statuses as the shell sees them).
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker import ensure_broker, stop_broker
from spark_mq.cli import main

REPO = Path(__file__).resolve().parents[2]
_topic_ids = itertools.count()


@dataclasses.dataclass
class CliResult:
    code: int
    out_bytes: bytes
    err: str

    @property
    def out(self) -> str:
        return self.out_bytes.decode("utf-8")


@pytest.fixture(scope="session")
def mq_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("cli") / "mq"
    ensure_broker(directory, config={"broker.idle.exit.ms": "-1"})
    yield str(directory)
    stop_broker(directory)


@pytest.fixture
def topic() -> str:
    """A topic name no other test of the session uses."""
    return f"t{next(_topic_ids)}"


@pytest.fixture
def cli(capfdbinary: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli(*args, stdin=b"")``: run ``main(args)`` in this process."""
    monkeypatch.delenv("SPARK_MQ_PATH", raising=False)

    def _run(*args: str, stdin: bytes = b"") -> CliResult:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
        captured = capfdbinary.readouterr()
        return CliResult(code, captured.out, captured.err.decode("utf-8", "replace"))

    return _run


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SPARK_MQ_PATH", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def cli_command(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "spark_mq.cli", *args]


@pytest.fixture
def run_cli() -> Any:
    """``run_cli(*args, stdin=b"", timeout=60) -> CompletedProcess`` (bytes)."""

    def _run(*args: str, stdin: bytes = b"", timeout: float = 60) -> Any:
        return subprocess.run(
            cli_command(args),
            input=stdin,
            capture_output=True,
            timeout=timeout,
            env=subprocess_env(),
            check=False,
        )

    return _run
