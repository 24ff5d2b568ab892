"""Keep the Spark Python worker's collection between tasks cheap.

A reused Python worker (``spark.python.worker.reuse``, Spark's default) runs ``gc.collect()``
after every task, and after every driver-side ``commit`` of a data source writer, which
runs in such a worker too. A full collection walks every object the process tracks: once
pyspark, pyarrow, numpy and spark_mq are imported, 60,000-100,000 objects, 15-30 ms of CPU
on the 2-core machine of docs/benchmarks.md. Every task of every micro-batch pays it, and the
next task on that worker waits for it. Nearly all of those objects are modules, classes and
functions that live as long as the worker.

:func:`freeze_long_lived` runs when a spark_mq task or writer commit starts: the first time
in a worker process, a full collection, then :func:`gc.freeze`, which moves every object
still alive to the permanent generation that later collections skip. Objects created
afterwards (each task's batches, producers, connections) are collected as before.

Long-lived objects also arrive after that first freeze: during a worker's first write task
spark_mq imports its embedded-broker launcher, and pyspark makes pyarrow import pandas (its
data source write path puts the task's commit message in a column with ``pa.array``; spark_mq's
own paths do not import it, :mod:`spark_mq.storage.arrow_arrays`), together about 33,000
objects that would cost every later task's collection 10 ms on that machine. So each later
call looks at the oldest generation (a few dozen objects when all is well, pyspark having just
collected) and freezes again when at least :data:`REFREEZE_MIN_OBJECTS` objects have survived
there.

The price is bounded: an object alive at a freeze that later becomes part of unreachable
*cyclic* garbage is never freed (acyclic objects are still freed by reference counting);
only the transient objects of the task that froze can be in that position.
"""

from __future__ import annotations

import sys

from spark_mq.gc_freeze import REFREEZE_MIN_OBJECTS, refreeze_if_grown
from spark_mq.gc_freeze import freeze_long_lived as _freeze

__all__ = ["PYSPARK_DAEMON", "REFREEZE_MIN_OBJECTS", "freeze_long_lived", "in_pyspark_worker"]

#: The module pyspark runs its Python worker daemon as (``python -m pyspark.daemon``); every
#: reused worker is a fork of it, so its ``__main__`` is that module.
PYSPARK_DAEMON = "pyspark.daemon"

_frozen = False


def in_pyspark_worker() -> bool:
    """Whether this process is a Python worker forked by pyspark's daemon."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == PYSPARK_DAEMON


def freeze_long_lived() -> bool:
    """In a pyspark worker, freeze what the process holds now (:mod:`spark_mq.gc_freeze`),
    the first time in the process and again whenever :data:`REFREEZE_MIN_OBJECTS` long-lived
    objects have arrived since; returns whether this call froze. Anywhere else (a driver, a
    notebook, a test calling a reader directly) it does nothing. A forked child inherits the
    frozen objects and the flag."""
    global _frozen  # noqa: PLW0603 (one flag per process)
    if not in_pyspark_worker():
        return False
    if _frozen:
        return refreeze_if_grown()
    # No lock: a second freeze from a racing thread would only repeat the work.
    _frozen = True
    _freeze()
    return True
