"""Named crash points: where crash tests may kill a process, and nothing else.

Crash tests need a process to die at an exact place (a broker between a durable decision
and its markers, a Spark driver while its commit is in flight). Production code marks each
such place with :func:`reach` (or :func:`reach_soon`) and a point name from :data:`POINTS`;
this module alone decides whether anything happens there. It reads the environment once, at
import, and does nothing unless ``SPARK_MQ_CRASH_AT`` is set::

    SPARK_MQ_CRASH_AT   = POINT[@KEY][,POINT[@KEY]...]
    SPARK_MQ_CRASH_PGID = process group to kill with the process (points of scope "group")

``KEY`` narrows a point to the calls that pass that key (a batch id): ``N`` matches the key
``N``, ``%P=R`` every integer key whose remainder modulo ``P`` is ``R``; without ``@KEY`` a
point fires on every call. Only names in :data:`POINTS` are accepted (a misspelt point in a
test's environment raises at import instead of silently never firing). A crash is a
SIGKILL: of the calling process (scope "process"), or of ``SPARK_MQ_CRASH_PGID``'s process
group and then the calling process (scope "group": a pyspark Python worker sits in a process
group of its own and would outlive its driver's group).

The module sits at the bottom layer: it imports nothing of spark_mq, so any layer may use it.

>>> points = CrashPoints.parse("sink.commit.before_complete@3", pgid=None)
>>> points.armed("sink.commit.before_complete", 3), points.armed("sink.commit.before_complete", 4)
(True, False)
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Final, Literal

ENV: Final = "SPARK_MQ_CRASH_AT"
PGID_ENV: Final = "SPARK_MQ_CRASH_PGID"

Scope = Literal["process", "group"]

#: Every crash point, with what it kills and where it is.
POINTS: Final[Mapping[str, Scope]] = {
    # The transaction coordinator: a request's decision (PrepareCommit / PrepareAbort, or a
    # two-phase decision record) is durable and no marker is written yet.
    "txn.after_decision": "process",
    # A two-phase decider, keyed by the decision's owner: its decision record (naming
    # transactions other coordinators coordinate) is durable and no participant was told.
    "txn.before_delivery": "process",
    # The Spark sink's driver commit, keyed by batch id: handles collected and nothing
    # decided; the coordinator call in flight (fired from a timer a few ms after it starts);
    # decided, but Spark has not yet written its own commit log.
    "sink.commit.before_complete": "group",
    "sink.commit.during_complete": "group",
    "sink.commit.after_complete": "group",
    # A Spark sink write task, keyed by batch id: the first attempt of partition 0 has sent
    # and flushed its rows and not prepared; its Python worker dies, its transaction open.
    "sink.task.after_send": "process",
}


def _kill(scope: Scope, pgid: int | None) -> None:
    if scope == "group" and pgid is not None:
        os.killpg(pgid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


@dataclasses.dataclass(frozen=True)
class CrashPoints:
    """The armed points (name -> key pattern, "" for every call) and how to crash."""

    armed_at: Mapping[str, str]
    pgid: int | None = None
    #: How to crash; tests of the production code around a point inject their own.
    crash: Callable[[Scope, int | None], None] = _kill

    @classmethod
    def parse(cls, spec: str, *, pgid: int | None) -> CrashPoints:
        armed: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, _, key = item.partition("@")
            if name not in POINTS:
                raise ValueError(
                    f"{ENV}: unknown crash point {name!r}; known: {', '.join(sorted(POINTS))}"
                )
            armed[name] = key
        return cls(armed, pgid)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> CrashPoints:
        pgid = environ.get(PGID_ENV)
        return cls.parse(environ.get(ENV, ""), pgid=int(pgid) if pgid else None)

    def armed(self, point: str, key: object = None) -> bool:
        """Whether reaching ``point`` with ``key`` crashes."""
        if point not in POINTS:
            raise ValueError(f"unknown crash point {point!r}")
        pattern = self.armed_at.get(point)
        if pattern is None:
            return False
        if not pattern:
            return True
        if pattern.startswith("%"):
            period, _, remainder = pattern[1:].partition("=")
            return isinstance(key, int) and key % int(period) == int(remainder)
        return str(key) == pattern

    def reach(self, point: str, key: object = None) -> None:
        """Crash now if ``point`` is armed for ``key``."""
        if self.armed(point, key):
            print(f"spark_mq crash point {point} ({key}): killing", file=sys.stderr, flush=True)
            self.crash(POINTS[point], self.pgid)

    def reach_soon(self, point: str, key: object, delay_s: float) -> threading.Timer | None:
        """Crash ``delay_s`` seconds from now (from a timer thread) if ``point`` is armed
        for ``key``: for a point inside a call that blocks. The caller joins the timer."""
        if not self.armed(point, key):
            return None
        timer = threading.Timer(delay_s, self.reach, (point, key))
        timer.daemon = True
        timer.start()
        return timer


#: The points this process was started with.
ACTIVE: Final = CrashPoints.from_environ()


def armed(point: str, key: object = None) -> bool:
    return ACTIVE.armed(point, key)


def reach(point: str, key: object = None) -> None:
    ACTIVE.reach(point, key)


def reach_soon(point: str, key: object, delay_s: float) -> threading.Timer | None:
    return ACTIVE.reach_soon(point, key, delay_s)
