"""Consumer lag in seconds, estimated from a partition's recent end offsets.

A group's lag in records (end offset minus committed offset) says how much is left to read,
not how late the reader is: 10 000 records are a second on a busy topic and a day on a quiet
one. kafka-lag-exporter's answer, used here: remember when the partition's end offset was
where (one sample per poll), find when the end offset passed the group's committed offset,
and the time since then is the lag in seconds. Between two samples the time is interpolated
linearly; a committed offset older than every sample is extrapolated from the oldest two
(the rate the log grew at then), and never earlier than a sample proves. A group at the end
has no lag.

:class:`LagHistory` is pure: the caller gives each sample's wall time.
"""

from __future__ import annotations

import collections
import dataclasses

#: Samples kept per partition (kafka-lag-exporter's default lookup table size is 60).
MAX_SAMPLES = 60


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    end_offset: int
    time_s: float


class LagHistory:
    """End-offset samples of one partition, oldest first, end offsets never decreasing
    (a smaller end, after a topic was recreated, starts the history again)."""

    def __init__(self, max_samples: int = MAX_SAMPLES) -> None:
        self._samples: collections.deque[Sample] = collections.deque(maxlen=max_samples)

    def add(self, end_offset: int, time_s: float) -> None:
        if self._samples and end_offset < self._samples[-1].end_offset:
            self._samples.clear()
        # No new records since the last two samples: keep the first of the run (when the end
        # got there) and this latest one.
        if len(self._samples) >= 2 and (
            self._samples[-1].end_offset == self._samples[-2].end_offset == end_offset
        ):
            self._samples.pop()
        self._samples.append(Sample(end_offset, time_s))

    def time_lag(self, committed: int, now_s: float) -> float:
        """Seconds since the partition's end passed ``committed`` (0 when caught up or
        with no samples)."""
        samples = self._samples
        if not samples or committed >= samples[-1].end_offset:
            return 0.0
        passed_at = self._time_at(committed)
        return max(0.0, now_s - passed_at)

    def _time_at(self, offset: int) -> float:
        """When the end offset reached ``offset``: the first sample at or past it,
        interpolated with the one before."""
        samples = self._samples
        previous: Sample | None = None
        for sample in samples:
            if sample.end_offset >= offset:
                if previous is None:
                    return _extrapolate(samples, offset)
                span = sample.end_offset - previous.end_offset
                fraction = (offset - previous.end_offset) / span if span else 1.0
                return previous.time_s + fraction * (sample.time_s - previous.time_s)
            previous = sample
        raise AssertionError("offset beyond the last sample")  # time_lag checked


def _extrapolate(samples: collections.deque[Sample], offset: int) -> float:
    """Before the oldest sample: back along the rate of the oldest two samples."""
    first = samples[0]
    if len(samples) < 2:
        return first.time_s
    second = samples[1]
    records = second.end_offset - first.end_offset
    seconds = second.time_s - first.time_s
    if records <= 0 or seconds <= 0:
        return first.time_s
    return first.time_s - (first.end_offset - offset) * seconds / records
