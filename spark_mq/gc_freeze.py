"""Keep full garbage collections short in spark_mq's own long-running processes: freeze
what lives as long as the process.

A full collection (CPython's oldest generation) walks every object the process tracks.
Importing the broker's modules alone (spark_mq, pyarrow, numpy, kazoo) makes about 57,000
of them in a fresh interpreter, nearly all living as long as the process. Each full
collection walks them all and stops every thread meanwhile. Measured in the broker under
the small-batch latency benchmark (``benchmarks/bench_small_batches.py``, 10,000 records/s
with ``linger.ms=0``, timed with ``gc.callbacks``): one full collection of 30 ms during the
runs; after a freeze, 0.45 ms.

:func:`freeze_long_lived` collects, then calls :func:`gc.freeze`, which moves every object
still alive to the permanent generation that collections skip. Objects made afterwards are
collected as before. Long-lived objects keep coming after the first freeze (new topics,
connections, modules imported late), so :func:`refreeze_if_grown` freezes again once
:data:`REFREEZE_MIN_OBJECTS` have reached the oldest generation (a working process leaves
a few dozen there between collections).

The price: an object alive at a freeze that later becomes part of unreachable *cyclic*
garbage is never freed (acyclic garbage is still freed by reference counting); long-lived
objects of these processes are not made and dropped in cycles at any rate that matters.

Used by the broker (:mod:`spark_mq.broker.main` once it serves, then its scheduler every
:data:`CHECK_INTERVAL_MS`) and by Spark's Python workers
(:mod:`spark_mq.datasource.worker_gc`). Never by the clients: a library must not freeze its
user's process.
"""

from __future__ import annotations

import gc
from typing import Final

#: Objects in the oldest generation that make a process freeze again.
REFREEZE_MIN_OBJECTS: Final = 10_000
#: How often the broker's scheduler looks.
CHECK_INTERVAL_MS: Final = 60_000


def freeze_long_lived() -> int:
    """Collect, then freeze every object still alive; how many this call froze."""
    gc.collect()
    before = gc.get_freeze_count()
    gc.freeze()
    return gc.get_freeze_count() - before


def refreeze_if_grown() -> bool:
    """Freeze again if :data:`REFREEZE_MIN_OBJECTS` objects reached the oldest generation;
    whether it froze."""
    if len(gc.get_objects(generation=2)) < REFREEZE_MIN_OBJECTS:
        return False
    freeze_long_lived()
    return True
