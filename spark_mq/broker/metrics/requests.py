"""Per-API request metrics: how many, which errors, and where the time went.

Kafka's request metrics, under Prometheus names, labelled by the API's name (a fixed set,
``ApiKey``):

- ``spark_mq_requests_total{api}``: requests answered (or dropped, for acks=0);
- ``spark_mq_request_errors_total{api, error}``: error codes in the responses, each
  partition's counted as Kafka's ``ErrorsPerSec`` counts them (``error`` is the code's name,
  again a fixed set);
- ``spark_mq_request_seconds{api, phase}``: a histogram per phase, Kafka's
  RequestQueueTime / LocalTime / RemoteTime / ResponseSendTime / TotalTime:

  - ``queue``: from the request's last byte received to the handler starting (the request
    waited behind the connection's earlier ones);
  - ``remote``: the handler waiting on others: an acks=all produce waiting for the followers
    (the purgatory), a fetch waiting for data (long poll);
  - ``local``: the handler's own work (the rest of its time);
  - ``send``: writing the response;
  - ``total``: from received to sent.

A handler adds its waiting time to the request context's
:class:`~spark_mq.broker.context.RequestTiming`; the connection measures the rest.

Cost: every request passes here, so the counting is plain Python lists on the event loop
(one ``bisect`` per phase) and prometheus_client builds the families from them when it
scrapes (:meth:`RequestMetrics.collect`). Its own ``Histogram.observe`` takes a lock per
bucket and cost 3.4 times as much per observation (measured with ``timeit`` beside a
``bisect`` of the same buckets), five times per request; the exposition, the HTTP endpoint
and the text format stay the library's.

Threads: :meth:`RequestMetrics.observe` and :meth:`RequestMetrics.frame_error` run on the
event loop only; :meth:`RequestMetrics.collect` runs on the scrape's thread and reads
copies (a scrape racing a request may count it in one phase and not yet in the next).
"""

from __future__ import annotations

import bisect
import typing
from collections.abc import Iterator
from typing import Final

import msgspec
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from spark_mq.protocol.api import ApiKey
from spark_mq.protocol.error_codes import ErrorCode

#: Latency buckets from 0.1 ms to 30 s: a local produce takes well under a millisecond, a
#: long-polling fetch up to its max wait.
LATENCY_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
PHASES: Final = ("queue", "local", "remote", "send", "total")


def error_codes(body: object) -> list[int]:
    """Every non-zero ``error_code`` in a response body: the top level and each entry of
    its lists (topics, partitions), as Kafka's ``errorCounts``."""
    found: list[int] = []
    _walk(body, found)
    return found


#: Per response type: whether it has ``error_code``, and its fields that hold lists of structs.
_PLANS: dict[type, tuple[bool, tuple[str, ...]]] = {}


def _plan(cls: type) -> tuple[bool, tuple[str, ...]]:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        lists = []
        for name in getattr(cls, "__struct_fields__", ()):
            hint = hints.get(name)
            if typing.get_origin(hint) is list:
                (item,) = typing.get_args(hint)
                if isinstance(item, type) and issubclass(item, msgspec.Struct):
                    lists.append(name)
        plan = _PLANS[cls] = ("error_code" in getattr(cls, "__struct_fields__", ()), tuple(lists))
    return plan


def _walk(struct: object, found: list[int]) -> None:
    has_code, lists = _plan(type(struct))
    if has_code:
        code = struct.error_code  # type: ignore[attr-defined]
        if code:
            found.append(code)
    for name in lists:
        for item in getattr(struct, name):
            _walk(item, found)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_CODE_{code}"


class _Phases:
    """Bucket counts and sums of one API's five phases (event loop only)."""

    __slots__ = ("counts", "sums")

    def __init__(self) -> None:
        self.counts = [[0] * (len(LATENCY_BUCKETS) + 1) for _ in PHASES]
        self.sums = [0.0] * len(PHASES)

    def observe(self, phase: int, seconds: float) -> None:
        self.counts[phase][bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sums[phase] += seconds


class RequestMetrics(Collector):
    """The request metrics of one broker (register it in the broker's registry)."""

    def __init__(self) -> None:
        self._requests = dict.fromkeys(ApiKey, 0)
        self._phases = {key: _Phases() for key in ApiKey}
        self._errors: dict[tuple[str, str], int] = {}

    def observe(
        self,
        api: ApiKey,
        body: object | None,
        *,
        received: float,
        started: float,
        handled: float,
        sent: float,
        remote_s: float,
    ) -> None:
        """One request: its response ``body`` (None: nothing was answered) and the loop
        times at which it was received, its handler started and finished, and its response
        was written."""
        self._requests[api] += 1
        phases = self._phases[api]
        phases.observe(0, max(0.0, started - received))
        phases.observe(1, max(0.0, handled - started - remote_s))
        phases.observe(2, remote_s)
        phases.observe(3, max(0.0, sent - handled))
        phases.observe(4, max(0.0, sent - received))
        if body is not None:
            for code in error_codes(body):
                self._count_error(api.name, code)

    def frame_error(self, api: ApiKey | None, code: int) -> None:
        """A request refused before a handler saw it (undecodable, unsupported version)."""
        self._count_error(api.name if api is not None else "UNKNOWN_API", code)

    def _count_error(self, api: str, code: int) -> None:
        key = (api, _error_name(code))
        self._errors[key] = self._errors.get(key, 0) + 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "spark_mq_requests", "Requests handled, by API.", labels=["api"]
        )
        for api, count in list(self._requests.items()):
            if count:
                requests.add_metric([api.name], count)
        yield requests
        errors = CounterMetricFamily(
            "spark_mq_request_errors",
            "Error codes answered, by API and error (each partition's error counts once).",
            labels=["api", "error"],
        )
        for (api_name, error), count in list(self._errors.items()):
            errors.add_metric([api_name, error], count)
        yield errors
        seconds = HistogramMetricFamily(
            "spark_mq_request_seconds",
            "Request time by API and phase (queue, local, remote, send, total).",
            labels=["api", "phase"],
        )
        bounds = [str(b) for b in LATENCY_BUCKETS] + ["+Inf"]
        for api, phases in self._phases.items():
            if not self._requests[api]:
                continue
            for index, phase in enumerate(PHASES):
                running, buckets = 0, []
                for bound, count in zip(bounds, list(phases.counts[index]), strict=True):
                    running += count
                    buckets.append((bound, running))
                seconds.add_metric([api.name, phase], buckets, phases.sums[index])
        yield seconds
