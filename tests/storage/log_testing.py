"""Helpers shared by the partition log tests (fixtures built on them are in conftest.py)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from spark_mq.storage.log import PartitionLog

#: Default start of the injected clocks, in ms.
START_MS = 1_000_000


class Clock:
    """A clock that moves only when told to."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


#: ``open_log(config=None, /, directory=..., **PartitionLog.open options) -> PartitionLog``
OpenLog = Callable[..., PartitionLog]


def open_descriptors_of(path: Path) -> int:
    """How many of this process's descriptors point at ``path`` (Linux: ``/proc/self/fd``)."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    return links.count(str(path))
