"""Retrying compare-and-set writes to ZooKeeper.

Every controller-less write of shared znodes (topic config overrides, entity configs, ACLs)
reads a znode, computes the new value and commits it at the version read; a writer that lost
the race to another reads again. Writers that collide once tend to collide again if they
retry at once (they read, compute and write in the same time), so each retry after a lost
race waits a random time first, up to a bound that doubles with each attempt (as Kafka's
clients back off), and a writer gives up only after :data:`MAX_WRITE_ATTEMPTS` attempts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Final

#: Compare-and-set attempts before a write gives up on a race it keeps losing.
MAX_WRITE_ATTEMPTS: Final = 10
#: The bound of the random wait before the second attempt; it doubles with each attempt.
FIRST_BACKOFF_S: Final = 0.005
#: The largest bound of the random wait before an attempt.
MAX_BACKOFF_S: Final = 0.2


def write_attempts(
    max_attempts: int = MAX_WRITE_ATTEMPTS,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> Iterator[int]:
    """The attempt numbers of one write, from 0; before each attempt but the first, a wait
    of up to ``FIRST_BACKOFF_S * 2 ** (attempt - 1)`` seconds (at most ``MAX_BACKOFF_S``),
    chosen at random. The caller breaks out (or returns) when an attempt wins."""
    for attempt in range(max_attempts):
        if attempt:
            sleep(rng() * min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (attempt - 1)))
        yield attempt
