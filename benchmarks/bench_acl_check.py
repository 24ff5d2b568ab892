#!/usr/bin/env python
"""What ACL authorization costs per request (issue 33): the check in front of Produce and
Fetch, in process and end to end, with the authorizer on and off.

Run from the repository root::

    .venv/bin/python benchmarks/bench_acl_check.py            # ~1 minute
    .venv/bin/python benchmarks/bench_acl_check.py --quick    # ~15 s

What is measured:

- ``check``: what the Produce and Fetch checks (``broker.acl.checks.FILTERS``) add in front
  of a handler that answers at once, for a one-topic request, with the authorizer off (the
  handler table then has no check at all: 0), with a warm cache (every request after the
  first of a principal and topic), and with a cold cache (the first, or the first after an
  ACL change), over 10 and 10,000 ACLs (half literal, half prefixed);
- ``produce``: round trips of one-record produce requests (acks=1, ``linger.ms`` 0, one at
  a time) from a TCP client (User:ANONYMOUS, allowed by a Write ACL) to a local broker with
  the authorizer off and on: the cost a client sees per request.

Each figure is the median of ``--runs`` runs, with the 1-minute load average when it was
taken: the machine may be shared, and the figures are only comparable at a low load.
"""

from __future__ import annotations

import argparse
import getpass
import os
from typing import Any

from request_timing import BrokerCase, median_per_call_ns, produce_round_trips_us

from spark_mq.broker.acl.authorizer import AclAuthorizer
from spark_mq.broker.acl.checks import FILTERS, Subject
from spark_mq.broker.acl.config import AuthorizerConfig
from spark_mq.broker.context import Response
from spark_mq.client.acl_admin import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from spark_mq.protocol.api import ApiKey
from spark_mq.protocol.fetch import FetchPartition, FetchRequest, FetchTopic
from spark_mq.protocol.produce import (
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
)

ANON = "User:ANONYMOUS"


def _acls(count: int) -> list[AclBinding]:
    out = []
    for i in range(count):
        pattern = PatternType.PREFIXED if i % 2 else PatternType.LITERAL
        out.append(
            AclBinding(
                ResourcePattern(ResourceType.TOPIC, f"team{i}-", pattern),
                AccessControlEntry(f"User:u{i}", "*", AclOperation.ALL, AclPermissionType.ALLOW),
            )
        )
    out.append(
        AclBinding(
            ResourcePattern(ResourceType.TOPIC, "events"),
            AccessControlEntry(ANON, "*", AclOperation.ALL, AclPermissionType.ALLOW),
        )
    )
    return out


def _drive(coro: Any) -> None:
    """Run a coroutine that never waits (the handler below answers at once)."""
    try:
        coro.send(None)
    except StopIteration:
        return
    raise AssertionError("the coroutine waited")


def bench_checks(runs: int, calls: int) -> list[tuple[str, int, float, float]]:
    """Nanoseconds the Produce and Fetch checks (``FILTERS``, what runs in front of the
    handler) add to a handler that answers at once: warm and cold cache."""
    produce = ProduceRequest(1, 30000, [ProduceTopic("events", [ProducePartition(0, 100)])])
    fetch = FetchRequest(500, 1, 1 << 20, [FetchTopic("events", [FetchPartition(0, 0, 1 << 20)])])
    records = memoryview(bytes(100))
    answer = Response(ProduceResponse([]))

    async def handler(ctx: Any, request: Any, records: memoryview) -> Response:
        return answer

    rows = []
    config = AuthorizerConfig.from_properties({"authorizer.class.name": "spark_mq.AclAuthorizer"})
    for count in (10, 10_000):
        auth = AclAuthorizer(config)
        auth.replace_all(_acls(count))
        subject = Subject(auth, ANON, "127.0.0.1")
        for key, request in ((ApiKey.PRODUCE, produce), (ApiKey.FETCH, fetch)):
            checked = FILTERS[key]

            def bare(request: Any = request) -> None:
                _drive(handler(None, request, records))

            def warm_call(
                checked: Any = checked, request: Any = request, subject: Subject = subject
            ) -> None:
                _drive(checked(subject, handler, None, request, records))

            def cold(
                checked: Any = checked,
                request: Any = request,
                auth: AclAuthorizer = auth,
                sub: Subject = subject,
            ) -> None:
                auth._snapshot.cache.clear()  # what an ACL change does
                _drive(checked(sub, handler, None, request, records))

            base = median_per_call_ns(bare, calls, runs)
            warm = median_per_call_ns(warm_call, calls, runs)
            cold_ns = median_per_call_ns(cold, max(calls // 100, 100), runs)
            rows.append((key.name, count, warm - base, cold_ns - base))
    return rows


def bench_produce(runs: int, requests: int) -> dict[str, float]:
    super_user = {"super.users": f"User:{getpass.getuser()}"}
    cases = {
        "off": BrokerCase(super_user),
        "on": BrokerCase(
            {**super_user, "authorizer.class.name": "spark_mq.AclAuthorizer"},
            setup=lambda admin: admin.create_acls(_acls(10)),
        ),
    }
    return produce_round_trips_us(cases, runs=runs, requests=requests, prefix="bench-acl-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    load = os.getloadavg()[0]
    print(f"load average (1 min) at start: {load:.2f} on {os.cpu_count()} cores")
    print("\n| check | ACLs | warm cache (ns) | cold cache (ns) |\n|---|---:|---:|---:|")
    for name, count, warm, cold in bench_checks(runs, 20_000 if args.quick else 200_000):
        print(f"| {name} | {count} | {warm:.0f} | {cold:.0f} |")
    produce = bench_produce(runs, 300 if args.quick else 2000)
    print("\n| authorizer | produce round trip (us, one record, acks=1) |\n|---|---:|")
    for label, micros in produce.items():
        print(f"| {label} | {micros:.0f} |")
    print(f"\nload average (1 min) at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
