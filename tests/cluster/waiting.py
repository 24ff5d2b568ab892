"""Waiting in the cluster tests for what other processes and ZooKeeper do in their own time."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], timeout_s: float = 30.0) -> None:
    """Poll ``condition`` every 50 ms until it is true; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
