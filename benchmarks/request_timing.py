"""What the per-request benchmarks share (``bench_acl_check.py``, ``bench_quotas.py``): the
per-call timing loop of an in-process check, and one-record produce round trips to a fresh
local broker set up for each case.

Not a benchmark itself. A round trip is one ``send(...).get()`` of a 10-byte record with
``acks=1`` and ``linger.ms`` 0, one at a time over TCP, after one warm-up send, so it is the
latency a client sees per request; each case gets its own broker in a new temporary
directory (a ``UNIX://`` listener for the set-up, a ``PLAINTEXT://127.0.0.1:0`` one for the
producer), stopped when the case is done.

Each figure is the median of ``runs`` runs: the machine may be shared, and one slow run (a
neighbour's burst of CPU) must not move it.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

# Importing the report scaffolding first makes spark_mq importable from the repository when
# it is not installed.
import bench_report  # noqa: F401

from spark_mq import Admin, Producer
from spark_mq.broker.local import broker_status, ensure_broker, stop_broker

#: The topic every produce case writes to, created in each case's broker.
TOPIC = "events"
_LISTENERS = "UNIX://,PLAINTEXT://127.0.0.1:0"


def per_call_ns(fn: Callable[[], object], calls: int) -> float:
    """Nanoseconds per call of ``fn``, over ``calls`` calls in a row."""
    started = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - started) / calls


def median_per_call_ns(fn: Callable[[], object], calls: int, runs: int) -> float:
    """The median of ``runs`` measures of :func:`per_call_ns`."""
    return statistics.median(per_call_ns(fn, calls) for _ in range(runs))


@dataclasses.dataclass(frozen=True)
class BrokerCase:
    """One produce case: the broker's config on top of the listeners, and what is done
    through an Admin on its Unix socket once :data:`TOPIC` exists (ACLs, quotas)."""

    config: Mapping[str, str] = dataclasses.field(default_factory=dict)
    setup: Callable[[Admin], object] = lambda _admin: None


def _round_trip_us(bootstrap: str, requests: int, producer_config: Mapping[str, Any]) -> float:
    with Producer(bootstrap_servers=bootstrap, linger_ms=0, acks=1, **producer_config) as p:
        p.send(TOPIC, b"warm-up").get(10)
        started = time.perf_counter()
        for _ in range(requests):
            p.send(TOPIC, b"0123456789").get(10)
        return (time.perf_counter() - started) / requests * 1e6


def produce_round_trips_us(
    cases: Mapping[str, BrokerCase],
    *,
    runs: int,
    requests: int,
    prefix: str,
    producer_config: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """Per case label, the median over ``runs`` of the mean produce round trip (us) over
    ``requests`` requests, each case against its own broker in a directory named
    ``prefix...``."""
    out = {}
    for label, case in cases.items():
        root = tempfile.mkdtemp(prefix=prefix)
        ensure_broker(root, config={"listeners": _LISTENERS, **case.config})
        try:
            with Admin(path=root) as admin:
                admin.create_topic(TOPIC)
                case.setup(admin)
            status = broker_status(root)
            assert status is not None
            tcp = next(a for a in status.addresses if a.unix_path is None)
            bootstrap = f"{tcp.host}:{tcp.port}"
            out[label] = statistics.median(
                _round_trip_us(bootstrap, requests, producer_config or {}) for _ in range(runs)
            )
        finally:
            stop_broker(root)
    return out
