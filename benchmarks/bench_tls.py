#!/usr/bin/env python
"""TLS benchmark (issue 33): produce (and fetch) throughput over PLAINTEXT and over SSL in
the same run, against one broker process that has both listeners.

Run from the repository root (needs the ``cryptography`` package of the dev extras, which
makes a CA and the broker's certificate in a temporary directory)::

    .venv/bin/python benchmarks/bench_tls.py                 # ~1 minute
    .venv/bin/python benchmarks/bench_tls.py --quick         # ~15 s

What is measured: a Producer (acks=1, linger.ms=5, codec none) sends ``--mib`` MiB of
``--value-bytes``-byte values with ``send_batch`` (the columnar path, where the transport is
the largest share of the cost) to a fresh one-partition topic, timed from the first send to
the last acknowledgement; then a Consumer reads the topic back with ``poll_batch``. The
PLAINTEXT and SSL runs alternate (``--runs`` each), and each figure is the median, printed
with the 1-minute load average: the machine may be shared, and the figures are comparable
only at a low load. TLS is TLS 1.3 with OpenSSL's default suite (AES-256-GCM on this
machine), no client certificate, host name checked.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from tls_certs import TestCa  # noqa: E402

from spark_mq import Admin, Consumer, Producer, TopicPartition  # noqa: E402
from spark_mq.cluster.zookeeper_server import free_loopback_port  # noqa: E402


def start_broker(work: Path, plain: int, tls: int, ca: TestCa) -> subprocess.Popen[bytes]:
    cert = ca.issue(work / "pki", "broker")
    props = {
        "log.dirs": str(work / "log"),
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
        "ssl.certificate.location": str(cert.cert),
        "ssl.key.location": str(cert.key),
        "log.flush.interval.messages": str(2**62),
    }
    path = work / "broker.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    out = open(work / "broker.out", "wb")  # noqa: SIM115 (the child writes it)
    process = subprocess.Popen(
        [sys.executable, "-m", "spark_mq.broker", "--config", str(path)],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=work,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with Admin(bootstrap_servers=f"127.0.0.1:{plain}", request_timeout_ms=2000) as admin:
                admin.list_topics()
            return process
        except Exception:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError((work / "broker.out").read_text()) from None
            time.sleep(0.2)


def one_run(
    servers: str, config: dict[str, str], topic: str, table: pa.Table
) -> tuple[float, float]:
    """(produce MiB/s, fetch MiB/s) of ``table``'s values."""
    with Admin(bootstrap_servers=servers, config=config) as admin:
        admin.create_topic(topic, 1)
    payload = table.column("value").nbytes / 2**20
    with Producer(bootstrap_servers=servers, acks=1, linger_ms=5, config=config) as producer:
        started = time.perf_counter()
        future = producer.send_batch(topic, table)
        producer.flush()
        future.get(120)
        produce_s = time.perf_counter() - started
    rows = 0
    with Consumer(
        bootstrap_servers=servers, auto_offset_reset="earliest", config=config
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        started = time.perf_counter()
        while rows < table.num_rows:
            rows += consumer.poll_batch(timeout_ms=1000).num_rows
        fetch_s = time.perf_counter() - started
    return payload / produce_s, payload / fetch_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.mib, args.runs = 64, 1
    work = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    ca = TestCa.create(work / "pki" / "ca")
    plain, tls = free_loopback_port(), free_loopback_port()
    broker = start_broker(work, plain, tls, ca)
    count = args.mib * 2**20 // args.value_bytes
    value = os.urandom(args.value_bytes)
    table = pa.table({"value": pa.array([value] * count, pa.binary())})
    cases = {
        "PLAINTEXT": (f"127.0.0.1:{plain}", {}),
        "SSL": (
            f"127.0.0.1:{tls}",
            {"security.protocol": "SSL", "ssl.ca.location": str(ca.cert)},
        ),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    try:
        for run in range(args.runs):
            for name, (servers, config) in cases.items():
                results[name].append(one_run(servers, config, f"{name.lower()}-{run}", table))
    finally:
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]
    print(
        f"{args.mib} MiB of {args.value_bytes}-byte values, median of {args.runs} runs, "
        f"load average {load:.2f} at the end ({os.cpu_count()} CPUs)"
    )
    print("| transport | produce MiB/s | fetch MiB/s |")
    print("|---|---|---|")
    for name, figures in results.items():
        produce = statistics.median(f[0] for f in figures)
        fetch = statistics.median(f[1] for f in figures)
        print(f"| {name} | {produce:.0f} | {fetch:.0f} |")


if __name__ == "__main__":
    main()
