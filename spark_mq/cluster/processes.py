"""The processes of a local cluster (:mod:`spark_mq.cluster.local_cluster`), recognised by
their command line: a pid is taken for a broker (or ZooKeeper) of the cluster only while
``/proc/<pid>/cmdline`` names its marker (the broker's properties file, the cluster's
``zoo.cfg``), so a pid the system reused for another process is never signalled.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final

#: How often a wait for a process looks again.
POLL_S: Final = 0.05


def cmdline(pid: int) -> list[str]:
    """The arguments of process ``pid`` ([] if it is gone, or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode("utf-8", "replace") for arg in raw.split(b"\0") if arg]


def process_is(pid: int | None, marker: str) -> bool:
    """Whether ``pid`` runs and is the process we started: its command line names ``marker``
    (a broker's properties file, ZooKeeper's zoo.cfg). A reused pid is some other process."""
    return pid is not None and pid > 0 and marker in cmdline(pid)


def wait_gone(pid: int, marker: str, timeout_s: float) -> bool:
    """Wait until ``pid`` is no longer the process of ``marker``; False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while process_is(pid, marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a process's output file, for an error message."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(could not read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])
