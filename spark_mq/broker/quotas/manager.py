"""Which quota a request is measured against, its rate, and the throttle time (Kafka's
ClientQuotaManager and ClientRequestQuotaManager).

Three quota types, each with its own sensors: ``producer_byte_rate`` (the bytes of each
Produce request's records), ``consumer_byte_rate`` (the bytes of each Fetch response's
records) and ``request_percentage``: the time the broker spent on a client's requests, as a
percentage of one request handler's time. Kafka measures the time of its request handler
threads; the asyncio broker has one event loop and an executor instead, so a request's time
here is the time from the start of its handling to its response being ready, less the time
it waited on others (a long poll, replication): the "local" time of the request metrics.
200 means two handlers' worth, as in Kafka.

``record`` returns the throttle time (:func:`~spark_mq.broker.quotas.rate.throttle_time_ms`)
of a client now over its quota. A byte-rate throttle is at most the whole quota span
(``quota.window.num`` x ``quota.window.size.seconds``), a request-time throttle at most one
window (Kafka bounds the latter the same way): a single huge request must not mute its
connection for hours.

With no quota configured anywhere, :attr:`ClientQuotaManager.enabled` is False and the hot
paths skip the quotas entirely. Sensors of clients idle for :data:`SENSOR_EXPIRY_MS` (an
hour, Kafka's inactive sensor expiration) are dropped, so a stream of one-off client ids
cannot grow the broker's memory without bound. Changing the quotas drops every sensor:
who shares a quota may have changed with them.

Threads: the event loop records; the store's writers (a handler's executor thread, the
ZooKeeper sync) replace the configs whole with :meth:`ClientQuotaManager.update_configs`,
which readers see atomically.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Final

from spark_mq.protocol.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE

from .entity import MetricKey, QuotaConfigs, QuotaEntity, metric_key, precedence
from .rate import QuotaWindow, Rate, throttle_time_ms

logger = logging.getLogger(__name__)

#: A sensor idle this long is dropped (Kafka's InactiveSensorExpirationTimeSeconds).
SENSOR_EXPIRY_MS: Final = 3600 * 1000
#: The most a fetch may be given under a quota: the wire's max_bytes is an int32.
MAX_FETCH_BYTES: Final = 2**31 - 1
#: How often idle sensors are looked for.
SWEEP_INTERVAL_MS: Final = 60 * 1000


class QuotaType(enum.Enum):
    """A kind of quota and its key."""

    PRODUCE = PRODUCER_BYTE_RATE
    FETCH = CONSUMER_BYTE_RATE
    REQUEST = REQUEST_PERCENTAGE


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ClientQuotaManager:
    """The quotas in force and every client's rates (see the module docstring)."""

    def __init__(
        self,
        window: QuotaWindow,
        *,
        exempt: Callable[[str], bool] = lambda _principal: False,
        monotonic_ms: Callable[[], int] = _monotonic_ms,
        on_throttle: Callable[[QuotaType, int], None] = lambda _t, _ms: None,
    ) -> None:
        self.window = window
        self._exempt = exempt
        self._now = monotonic_ms
        self._on_throttle = on_throttle
        self._configs: dict[QuotaEntity, dict[str, float]] = {}
        self._sensors: dict[tuple[QuotaType, MetricKey], Rate] = {}
        #: (kind, principal, user, client id) -> (quota, its sensor), or None for no quota:
        #: the precedence walk once per client rather than per request. Cleared with the
        #: configs and at every sweep, so it holds no more clients than the sensors do.
        self._resolved: dict[tuple[QuotaType, str, str, str], tuple[float, Rate] | None] = {}
        self._next_sweep_ms = 0
        #: Whether any quota is configured (the hot paths look at nothing else when not).
        self.enabled = False

    # -- configuration ------------------------------------------------------------------------

    def update_configs(self, configs: QuotaConfigs) -> None:
        """Make ``configs`` the quotas in force (any thread). A value no quota can be (zero,
        negative, NaN, infinite) is left out with a warning: the throttle math would divide
        by it (zero), throttle by a negative time, or mute every client. The APIs and the
        command line refuse one, and the stores leave out one a znode or file edited by hand
        holds (store.py's decode_values, warning once per load), so this is the last guard,
        for configs built any other way."""
        fresh: dict[QuotaEntity, dict[str, float]] = {}
        for entity, values in configs.items():
            kept = {}
            for key, value in values.items():
                if 0 < value < math.inf:  # NaN fails both comparisons
                    kept[key] = value
                else:
                    logger.warning(
                        "client quota %s=%r of %s ignored: a quota must be a positive number; "
                        "set it again with spark-mq quotas alter (or delete the key)",
                        key,
                        value,
                        entity,
                    )
            if kept:
                fresh[entity] = kept
        self._configs = fresh
        self._sensors = {}
        self._resolved = {}
        self.enabled = bool(fresh)

    def configs(self) -> dict[QuotaEntity, dict[str, float]]:
        return {e: dict(v) for e, v in self._configs.items()}

    def quota(
        self, kind: QuotaType, principal: str, user: str, client_id: str
    ) -> tuple[float, MetricKey] | None:
        """The quota ``kind`` of a request and whom it is measured over; None if none."""
        configs = self._configs
        if not configs:
            return None
        key = kind.value
        for entity in precedence(user, client_id, exempt=self._exempt(principal)):
            values = configs.get(entity)
            if values is not None and key in values:
                return values[key], metric_key(entity, user, client_id)
        return None

    # -- measuring ------------------------------------------------------------------------------

    def record(
        self, kind: QuotaType, principal: str, user: str, client_id: str, value: float
    ) -> int:
        """Record ``value`` (bytes, or percent-seconds for REQUEST) for the client; the
        throttle time in ms (0: within its quota, or it has none)."""
        now = self._now()
        resolved = self._resolve(kind, principal, user, client_id, now)
        if resolved is None:
            return 0
        bound, rate = resolved
        rate.record(value, now)
        max_ms = self.window.window_ms if kind is QuotaType.REQUEST else self.window.span_ms
        span_ms = rate.window_ms(now)
        throttle = throttle_time_ms(rate.total() * 1000 / span_ms, bound, span_ms, max_ms)
        if throttle:
            self._on_throttle(kind, throttle)
        return throttle

    def unrecord(
        self, kind: QuotaType, principal: str, user: str, client_id: str, value: float
    ) -> None:
        """Take back a recorded value (a throttled fetch is answered empty, as Kafka's)."""
        now = self._now()
        resolved = self._resolve(kind, principal, user, client_id, now)
        if resolved is not None:
            resolved[1].record(-value, now)

    def max_value_in_window(
        self, kind: QuotaType, principal: str, user: str, client_id: str
    ) -> int:
        """Most a client may take in one response (Kafka's getMaxValueInQuotaWindow): its
        quota over the windows the rate counts; -1 without a quota."""
        found = self.quota(kind, principal, user, client_id)
        if found is None:
            return -1
        # Bounded as Kafka's (a Scala toInt saturates): a huge quota (1e308 is finite) would
        # make the float infinite, and int() of infinity raises inside every fetch.
        most = found[0] * (self.window.samples - 1) * self.window.window_ms / 1000
        return max(1, int(min(most, float(MAX_FETCH_BYTES))))

    def rate(self, kind: QuotaType, who: MetricKey) -> float:
        """The measured rate of a sensor (0 if it has none), for tests and tools."""
        sensor = self._sensors.get((kind, who))
        return 0.0 if sensor is None else sensor.measure(self._now())

    def _resolve(
        self, kind: QuotaType, principal: str, user: str, client_id: str, now: int
    ) -> tuple[float, Rate] | None:
        if now >= self._next_sweep_ms:
            self._sweep(now)
        key = (kind, principal, user, client_id)
        # Taken once: if update_configs (another thread) replaces the map meanwhile, what
        # is resolved here goes into the old map and is dropped with it, never stale.
        cache = self._resolved
        try:
            return cache[key]
        except KeyError:
            pass
        found = self.quota(kind, principal, user, client_id)
        resolved = None if found is None else (found[0], self._sensor(kind, found[1], now))
        cache[key] = resolved
        return resolved

    def _sensor(self, kind: QuotaType, who: MetricKey, now: int) -> Rate:
        key = (kind, who)
        sensor = self._sensors.get(key)
        if sensor is None:
            sensor = self._sensors[key] = Rate(self.window)
            sensor.last_record_ms = now
        return sensor

    def _sweep(self, now: int) -> None:
        self._next_sweep_ms = now + SWEEP_INTERVAL_MS
        idle = [k for k, s in self._sensors.items() if now - s.last_record_ms >= SENSOR_EXPIRY_MS]
        for key in idle:
            del self._sensors[key]
        self._resolved = {}

    def sensor_count(self) -> int:
        return len(self._sensors)


def entities_matching(
    configs: QuotaConfigs, keep: Callable[[QuotaEntity], bool]
) -> Iterable[tuple[QuotaEntity, dict[str, float]]]:
    """The configured entities ``keep`` accepts, in a stable order."""
    for entity in sorted(configs, key=lambda e: (e.user or "", e.client_id or "")):
        if keep(entity):
            yield entity, dict(configs[entity])
