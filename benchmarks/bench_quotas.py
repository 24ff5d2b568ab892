#!/usr/bin/env python
"""What client quotas cost per request (issue 33): the quota bookkeeping in process, and
one-record produce round trips with quotas off, on for another client, and on for this one.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python benchmarks/bench_quotas.py            # ~1 minute
    PYTHONPATH=. .venv/bin/python benchmarks/bench_quotas.py --quick    # ~20 s

What is measured:

- ``record``: :meth:`ClientQuotaManager.record` per call, for a client whose quota is a
  default client-id one (the eighth precedence level), and for a quota type it has none of;
  and the check the hot paths make when no quota is configured at all (one attribute);
- ``produce``: round trips of one-record produce requests (acks=1, ``linger.ms`` 0, one at
  a time, TCP) to a local broker with no quota, with a quota only another client id has
  (every request is measured against request_percentage and producer_byte_rate, and none
  matches), and with this client's own quota (high enough never to throttle).

Each figure is the median of ``--runs`` runs, with the 1-minute load average at the start
and the end: the machine may be shared, and the figures are only comparable at a low load.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from request_timing import BrokerCase, median_per_call_ns, produce_round_trips_us

from spark_mq import Admin, ClientQuotaAlteration, ClientQuotaEntity
from spark_mq.broker.quotas.entity import DEFAULT, QuotaEntity
from spark_mq.broker.quotas.manager import ClientQuotaManager, QuotaType
from spark_mq.broker.quotas.rate import QuotaWindow


def bench_record(runs: int, calls: int) -> dict[str, float]:
    manager = ClientQuotaManager(QuotaWindow())
    manager.update_configs({QuotaEntity(None, DEFAULT): {"producer_byte_rate": 1e15}})
    cases: dict[str, Callable[[], object]] = {
        "record, default client-id quota": lambda: manager.record(
            QuotaType.PRODUCE, "User:u", "u", "c", 1000
        ),
        "record, no quota of the type": lambda: manager.record(
            QuotaType.FETCH, "User:u", "u", "c", 1000
        ),
    }
    off = ClientQuotaManager(QuotaWindow())
    cases["no quota configured (the enabled check)"] = lambda: off.enabled
    return {name: median_per_call_ns(fn, calls, runs) for name, fn in cases.items()}


def _quota_for(client_id: str) -> BrokerCase:
    high = {"producer_byte_rate": 1e12, "request_percentage": 1e6}

    def setup(admin: Admin) -> None:
        entity = ClientQuotaEntity(client_id=client_id)
        admin.alter_client_quotas([ClientQuotaAlteration(entity, high)])

    return BrokerCase(setup=setup)


def bench_produce(runs: int, requests: int) -> dict[str, float]:
    cases = {
        "off": BrokerCase(),
        "another client's": _quota_for("other"),
        "own": _quota_for("bench"),
    }
    return produce_round_trips_us(
        cases,
        runs=runs,
        requests=requests,
        prefix="bench-quotas-",
        producer_config={"client_id": "bench"},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("\n| case | ns per call |\n|---|---:|")
    for name, ns in bench_record(runs, 20_000 if args.quick else 200_000).items():
        print(f"| {name} | {ns:.0f} |")
    produce = bench_produce(runs, 300 if args.quick else 2000)
    print("\n| quota | produce round trip (us, one record, acks=1) |\n|---|---:|")
    for label, micros in produce.items():
        print(f"| {label} | {micros:.0f} |")
    print(f"\nload average (1 min) at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
