"""The consumer lag exporter against a real broker: lag in records and seconds per group and
partition, a Spark-style group that only commits, and the CLI serving it over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from spark_mq.client import Admin, Producer
from spark_mq.cluster.zookeeper_server import free_loopback_port
from spark_mq.monitoring.lag_exporter import LagExporter

REPO = Path(__file__).resolve().parents[2]


def produce(servers: str, topic: str, count: int) -> None:
    with Producer(bootstrap_servers=servers, linger_ms=0) as producer:
        for i in range(count):
            producer.send(topic, f"r{i}".encode(), partition=0)
        producer.flush()


def test_lag_in_records_and_seconds(broker: Any) -> None:
    servers = str(broker.address)
    now = [1000.0]
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic("events", partitions=1)
        # A Spark query's group.id: offsets committed, no member ever joins.
        admin.alter_group_offsets("spark-query", {("events", 0): 0})
        exporter = LagExporter(admin, clock=lambda: now[0])
        for step in range(3):
            produce(servers, "events", 100)
            now[0] = 1000.0 + 10 * step
            exporter.poll()
        # The end was 100 at t=1000, 200 at 1010, 300 at 1020.
        admin.alter_group_offsets("spark-query", {("events", 0): 150})
        (figures,) = exporter.poll()
        registry = CollectorRegistry()
        registry.register(exporter)
    assert (figures.group, figures.committed, figures.end_offset, figures.lag) == (
        "spark-query",
        150,
        300,
        150,
    )
    # Offset 150 was the end halfway between 1000 and 1010: 15 s before 1020.
    assert figures.lag_seconds == 15.0
    labels = {"group": "spark-query", "topic": "events", "partition": "0"}
    assert registry.get_sample_value("spark_mq_consumergroup_lag", labels) == 150
    assert registry.get_sample_value("spark_mq_consumergroup_lag_seconds", labels) == 15.0
    assert (
        registry.get_sample_value(
            "spark_mq_consumergroup_max_lag_seconds", {"group": "spark-query"}
        )
        == 15.0
    )
    assert registry.get_sample_value("spark_mq_lag_exporter_poll_success") == 1


def test_the_cli_serves_the_lag_until_terminated(broker: Any) -> None:
    servers = str(broker.address)
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic("audit", partitions=1)
        admin.alter_group_offsets("auditors", {("audit", 0): 0})
    produce(servers, "audit", 42)
    port = free_loopback_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spark_mq.cli",
            "groups",
            "lag-exporter",
            "--bootstrap-server",
            servers,
            "--port",
            str(port),
            "--interval-ms",
            "200",
        ],
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        lag = None
        deadline = time.monotonic() + 30
        while lag is None and time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                continue
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == "spark_mq_consumergroup_lag":
                        lag = sample.value
        assert lag == 42
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode in (0, 143), err.decode()
    assert b"serving consumer lag on http://127.0.0.1:" in err
