"""Keep the broker's garbage-collector pauses short: its long-lived objects are frozen.

A full collection (CPython's oldest generation) walks every object the process tracks. A
broker holds some 60,000 of them before it serves a request (the modules, classes and
functions of spark_mq, pyarrow, numpy and kazoo, its config, its partitions), and its
requests allocate fast enough for a full collection to come every few seconds under load:
each is a pause of the event loop, so every request in flight waits for it. Measured under
the small-batch latency benchmark (``benchmarks/bench_small_batches.py``, 10,000 records/s
with ``linger.ms=0``): one full collection of 30 ms during the run, at the 1 % tail of every
record's latency; a full collection of only the objects made after a freeze takes about 1 ms.

:func:`freeze_long_lived` runs once the broker serves (a full collection, then
:func:`gc.freeze`, which moves every object still alive to the permanent generation that
collections skip); the scheduler calls it again every minute, and it freezes again only when
:data:`REFREEZE_MIN_OBJECTS` objects have survived into the oldest generation since (new
topics, connections, groups). Objects created afterwards are collected as before. The price:
an object alive at a freeze that later becomes part of unreachable *cyclic* garbage is never
freed (acyclic garbage is still freed by reference counting); a broker's long-lived objects
are not made and dropped in cycles at any rate that matters.

The same is done in Spark's Python workers (:mod:`spark_mq.datasource.worker_gc`).
"""

from __future__ import annotations

import gc
from typing import Final

#: Objects in the oldest generation that make the periodic check freeze again.
REFREEZE_MIN_OBJECTS: Final = 10_000
#: How often the scheduler checks.
CHECK_INTERVAL_MS: Final = 60_000


def freeze_long_lived() -> int:
    """Collect, then freeze every object still alive; how many were frozen by this call."""
    gc.collect()
    before = gc.get_freeze_count()
    gc.freeze()
    return gc.get_freeze_count() - before


def refreeze_if_grown() -> int:
    """Freeze again if :data:`REFREEZE_MIN_OBJECTS` objects reached the oldest generation;
    how many were frozen (0: nothing to do)."""
    if len(gc.get_objects(generation=2)) < REFREEZE_MIN_OBJECTS:
        return 0
    return freeze_long_lived()
