"""Retrying a call until a deadline, with backoff between attempts, on an injected clock.

Every client call that asks a broker something it may not know yet (a coordinator that is
loading, a topic being created, a leader being elected) retries retriable errors until the
caller's timeout, sleeping a backoff between attempts that grows from ``retry.backoff.ms`` to
``retry.backoff.max.ms`` (Kafka's ``ExponentialBackoff``, without the jitter: one client
talks to one broker here, so there is no herd to spread). :class:`Retry` holds that state,
the deadline, the backoff and the loop (:meth:`Retry.until`), so each call site keeps only
what is its own: what one attempt is, which answers mean "again", which errors end the call at
once, and what the timeout error says.

The clock and the sleep are injected (``time.monotonic`` and ``time.sleep`` unless a test
passes its own), so tests drive time instead of waiting for it::

    def attempt() -> Response | Again:
        response = sent(lambda: cluster.request(request))  # a retriable failure: Again
        if isinstance(response, Again) or response.error_code == ErrorCode.NONE:
            return response
        raise error_from_code(response.error_code)  # or Again(...) when it may pass

    retry = Retry.within_ms(timeout_ms, backoff_s=0.1, max_backoff_s=1.0)
    return retry.until(attempt, lambda error: RequestTimedOutError(f"... ({error})"))

Threads: one :class:`Retry` belongs to one call in one thread.

>>> now = [0.0]
>>> retry = Retry.within_ms(250, backoff_s=0.1, max_backoff_s=0.15, clock=lambda: now[0],
...                         sleep=lambda s: now.__setitem__(0, now[0] + s))
>>> [retry.backoff(), retry.backoff(), retry.backoff(), retry.backoff()]
[True, True, False, False]
>>> now[0]
0.25
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Final, NamedTuple, TypeVar

from spark_mq.errors import SparkMQError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds on a monotonic clock (``time.monotonic`` in production).
Clock = Callable[[], float]
#: Blocks the calling thread for the given seconds (``time.sleep`` in production).
Sleep = Callable[[float], None]

#: How much the backoff grows after each attempt (Kafka's retry backoff multiplier).
BACKOFF_MULTIPLIER: Final = 2.0


class Again(NamedTuple):
    """What an attempt returns when the call should be tried again: the error it met, which
    the timeout error names as the last one."""

    error: SparkMQError


def sent(send: Callable[[], T]) -> T | Again:
    """``send()``'s answer, or :class:`Again` with the retriable error it raised (a lost
    connection, a request timeout); any other error goes up to the caller."""
    try:
        return send()
    except SparkMQError as exc:
        if not exc.retriable:
            raise
        return Again(exc)


def remaining_ms(deadline: float, clock: Clock) -> int:
    """Milliseconds until ``deadline`` on ``clock``, at least 1: a request timeout for one
    more attempt (a zero timeout would mean "no wait" to the layers below)."""
    return max(int((deadline - clock()) * 1000), 1)


@dataclasses.dataclass(slots=True)
class Retry:
    """The deadline and backoff of one retried call (see the module docstring).

    ``backoff_s`` is the first wait; each :meth:`backoff` doubles it up to ``max_backoff_s``
    (None: a constant backoff). No wait outlasts the deadline.
    """

    #: When the call gives up, in ``clock`` seconds.
    deadline: float
    _: dataclasses.KW_ONLY
    #: The wait before the next attempt.
    backoff_s: float
    max_backoff_s: float | None = None
    clock: Clock = time.monotonic
    sleep: Sleep = time.sleep

    def __post_init__(self) -> None:
        self.backoff_s = max(self.backoff_s, 0.0)
        if self.max_backoff_s is None:
            self.max_backoff_s = self.backoff_s

    @classmethod
    def within_ms(
        cls,
        timeout_ms: float,
        *,
        backoff_s: float,
        max_backoff_s: float | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
    ) -> Retry:
        """A retry that gives up ``timeout_ms`` from now."""
        return cls(
            clock() + max(timeout_ms, 0) / 1000,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            clock=clock,
            sleep=sleep,
        )

    def remaining_s(self) -> float:
        """Seconds left until the deadline (negative once it has passed)."""
        return self.deadline - self.clock()

    def remaining_ms(self) -> int:
        """Milliseconds left, at least 1: the timeout of one more request."""
        return remaining_ms(self.deadline, self.clock)

    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def at_least(self, backoff_s: float) -> None:
        """Wait at least ``backoff_s`` from now on (an error that needs the full
        ``retry.backoff.ms``, after a quick first retry)."""
        self.backoff_s = max(self.backoff_s, backoff_s)

    def backoff(self) -> bool:
        """Sleep before the next attempt and return True; or return False, without
        sleeping, once the deadline has passed (the caller then raises its timeout error)."""
        remaining = self.remaining_s()
        if remaining <= 0:
            return False
        self.sleep(min(self.backoff_s, remaining))
        ceiling = self.backoff_s if self.max_backoff_s is None else self.max_backoff_s
        self.backoff_s = min(self.backoff_s * BACKOFF_MULTIPLIER, ceiling)
        return True

    def until(
        self,
        attempt: Callable[[], T | Again],
        timeout_error: Callable[[SparkMQError], SparkMQError],
        *,
        what: str = "",
    ) -> T:
        """Run ``attempt`` until it returns something other than :class:`Again`, sleeping the
        backoff in between; once the deadline has passed, raise ``timeout_error(last error)``
        (chained to it). An error ``attempt`` raises ends the call at once. ``what`` names
        the call in the debug log of each retry."""
        while True:
            outcome = attempt()
            if not isinstance(outcome, Again):
                return outcome
            if not self.backoff():
                raise timeout_error(outcome.error) from outcome.error
            if what:
                log.debug("%s: %s; retried", what, outcome.error)
