"""A rate over sampled windows and the throttle time of a client over its quota (Kafka's
``Rate`` with ``SampledStat``, ``Sensor.checkQuotas`` and ``QuotaUtils.throttleTime``).

The rate keeps ``quota.window.num`` samples of ``quota.window.size.seconds`` each. A value
goes into the newest sample, or starts a new one once that sample's window has passed;
samples older than all windows together are dropped. The rate is the samples' total over
the time they cover, measured from the start of the oldest sample to now but never less
than ``quota.window.num - 1`` whole windows (so that the first request of a client that has
been quiet does not measure as a burst over a few milliseconds).

A client over its quota is throttled for what it took beyond its quota, expressed as time
at its quota (Kafka's formula)::

    throttle_ms = (rate - quota) / quota * window_ms

where ``window_ms`` is the span the rate was measured over. The measured rate does not fall
at once during that wait (the span is padded to ``quota.window.num - 1`` windows, and the
excess stays in its sample until the sample expires), so a client that keeps sending is
throttled again on each excess: on average it is held at its quota, which is what the
real-broker test measures. The throttle is bounded by ``max_throttle_ms`` (see
:mod:`.manager`).

Threads: the event loop only. Times are the injected monotonic clock's milliseconds.
"""

from __future__ import annotations

import collections
import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class QuotaWindow:
    """``quota.window.num`` samples of ``quota.window.size.seconds`` (Kafka's defaults:
    11 and 1)."""

    samples: int = 11
    window_ms: int = 1000

    def __post_init__(self) -> None:
        assert self.samples >= 2 and self.window_ms >= 1, self

    @property
    def span_ms(self) -> int:
        return self.samples * self.window_ms


class Rate:
    """What a client did per second over the last :class:`QuotaWindow`."""

    __slots__ = ("_samples", "_window", "last_record_ms")

    def __init__(self, window: QuotaWindow) -> None:
        self._window = window
        #: [start_ms, total] of each sample, oldest first.
        self._samples: collections.deque[list[float]] = collections.deque()
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        samples = self._samples
        if not samples or now_ms - samples[-1][0] >= self._window.window_ms:
            samples.append([now_ms, 0.0])
            if len(samples) > self._window.samples:
                samples.popleft()
        samples[-1][1] += value
        self.last_record_ms = now_ms

    def window_ms(self, now_ms: int) -> float:
        """The span the rate is measured over (Kafka's Rate.windowSize)."""
        self._purge(now_ms)
        oldest = self._samples[0][0] if self._samples else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self._window.window_ms)
        least = self._window.samples - 1
        if full < least:
            elapsed += (least - full) * self._window.window_ms
        return float(elapsed)

    def measure(self, now_ms: int) -> float:
        """Units per second."""
        span_ms = self.window_ms(now_ms)
        return self.total() / (span_ms / 1000.0)

    def total(self) -> float:
        """What the samples hold (as of the last purge)."""
        return sum(s[1] for s in self._samples)

    def _purge(self, now_ms: int) -> None:
        samples = self._samples
        span = self._window.span_ms
        while samples and now_ms - samples[0][0] >= span:
            samples.popleft()


def throttle_time_ms(rate: float, quota: float, window_ms: float, max_throttle_ms: int) -> int:
    """How long a client measured at ``rate`` against ``quota`` waits (0 within it)."""
    if rate <= quota:
        return 0
    # Clamped before it becomes an int: a tiny quota (5e-324 is positive) makes the float
    # infinite, and round() of infinity raises instead of throttling.
    return round(min(float(max_throttle_ms), (rate - quota) / quota * window_ms))
