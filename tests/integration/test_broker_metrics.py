"""The broker's Prometheus endpoint, scraped over HTTP from a real broker process: request,
error and latency metrics per API, bytes and records per topic, partition offsets, groups."""

from __future__ import annotations

import contextlib
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spark_mq.client import Admin, Consumer, Producer
from spark_mq.cluster.zookeeper_server import free_loopback_port
from spark_mq.errors import DeliveryTimeoutError, TopicExistsError

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_a_scrape_shows_what_the_broker_did(start_broker: Any) -> None:
    port = free_loopback_port()
    broker = start_broker(overrides={"metrics.port": str(port)})
    servers = str(broker.address)
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic("orders", partitions=2)
        with pytest.raises(TopicExistsError):
            admin.create_topic("orders", partitions=2)
    with Producer(bootstrap_servers=servers, linger_ms=0) as producer:
        for i in range(100):
            producer.send("orders", f"order-{i}".encode(), partition=i % 2)
        producer.flush()
    with Consumer(
        bootstrap_servers=servers, group_id="billing", auto_offset_reset="earliest"
    ) as consumer:
        consumer.subscribe(["orders"])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 100 and time.monotonic() < deadline:
            seen += sum(len(r) for r in consumer.poll(timeout_ms=500).values())
        assert seen == 100
        consumer.commit()
        samples = scrape(port)

    assert value(samples, "spark_mq_state_scrape_success") == 1
    assert value(samples, "spark_mq_topic_records_in_total", topic="orders") == 100
    assert value(samples, "spark_mq_topic_bytes_in_total", topic="orders") > 100 * len("order-0")
    assert value(samples, "spark_mq_topic_bytes_out_total", topic="orders") > 100 * len("order-0")
    for partition in ("0", "1"):
        assert value(samples, "spark_mq_log_end_offset", topic="orders", partition=partition) == 50
        assert value(samples, "spark_mq_high_watermark", topic="orders", partition=partition) == 50
        assert value(samples, "spark_mq_log_size_bytes", topic="orders", partition=partition) > 0
    # Every produce request was timed in each phase, as many times as it was counted.
    produces = value(samples, "spark_mq_requests_total", api="PRODUCE")
    assert produces >= 1
    for phase in ("queue", "local", "remote", "send", "total"):
        assert (
            value(samples, "spark_mq_request_seconds_count", api="PRODUCE", phase=phase) == produces
        )
    assert value(samples, "spark_mq_requests_total", api="FETCH") >= 1
    assert (
        value(
            samples,
            "spark_mq_request_errors_total",
            api="CREATE_TOPICS",
            error="TOPIC_ALREADY_EXISTS",
        )
        == 1
    )
    assert value(samples, "spark_mq_groups", state="Stable") == 1
    assert value(samples, "spark_mq_active_controller") == 1
    assert value(samples, "spark_mq_leader_partitions") >= 2
    assert value(samples, "spark_mq_active_connections") >= 1


def listening_tcp_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (from /proc: its socket inodes, matched
    against the kernel's table of listening sockets)."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_no_endpoint_unless_asked(start_broker: Any, tmp_path: Path) -> None:
    """metrics.port defaults to -1: the broker listens on its PLAINTEXT listener only; with
    metrics.port set, on that port too."""
    quiet = start_broker()
    assert listening_tcp_ports(quiet.pid) == {quiet.address.port}
    port = free_loopback_port()
    other = tmp_path / "other"
    other.mkdir()
    serving = start_broker(other, {"metrics.port": str(port)})
    assert listening_tcp_ports(serving.pid) == {serving.address.port, port}


def test_client_metrics_count_what_was_sent_and_read(broker: Any) -> None:
    servers = str(broker.address)
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic("clicks", partitions=1)
    with Producer(bootstrap_servers=servers, linger_ms=0) as producer:
        for i in range(200):
            producer.send("clicks", f"click-{i:04d}".encode() * 10)
        producer.flush()
        sent = producer.metrics()["producer-metrics"]
    assert sent["record-send-total"] == 200
    assert sent["record-error-total"] == 0
    assert sent["request-total"] >= 1
    assert sent["request-latency-avg"] > 0
    assert sent["batch-size-max"] >= sent["batch-size-avg"] > 100
    assert sent["record-send-rate"] > 0
    # Small fetches: the first responses leave records behind, which is lag.
    with Consumer(
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=1024,
        fetch_max_bytes=1024,
    ) as consumer:
        consumer.assign([("clicks", 0)])
        seen, lags = 0, []
        deadline = time.monotonic() + 30
        while seen < 200 and time.monotonic() < deadline:
            seen += sum(len(r) for r in consumer.poll(timeout_ms=500).values())
            lags.append(
                consumer.metrics()["consumer-fetch-manager-metrics.topic.clicks.partition.0"][
                    "records-lag"
                ]
            )
        assert seen == 200
        read = consumer.metrics()
    fetched = read["consumer-fetch-manager-metrics"]
    assert fetched["records-consumed-total"] == 200
    assert fetched["fetch-total"] >= 2
    assert fetched["bytes-consumed-total"] > 200 * 100
    assert fetched["records-lag-max"] > 0
    assert fetched["fetch-latency-max"] >= fetched["fetch-latency-avg"] > 0
    assert lags[0] > 0 and lags[-1] == 0


def test_producer_metrics_count_retries_then_the_error(broker: Any) -> None:
    """acks=all to a partition that cannot have min.insync.replicas=2 on one broker:
    NOT_ENOUGH_REPLICAS is retriable, so the producer retries until delivery.timeout.ms, and
    counts each retry and then the record that failed."""
    servers = str(broker.address)
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic("scarce", partitions=1, config={"min.insync.replicas": "2"})
    with Producer(
        bootstrap_servers=servers,
        config={
            "acks": "all",
            "linger.ms": 0,
            "request.timeout.ms": 1000,
            "delivery.timeout.ms": 2000,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 100,
        },
    ) as producer:
        future = producer.send("scarce", b"needs two replicas", partition=0)
        with pytest.raises(DeliveryTimeoutError, match="NotEnoughReplicasError"):
            future.get(30)
        counted = producer.metrics()["producer-metrics"]
    assert counted["record-retry-total"] >= 2
    assert counted["record-retry-rate"] > 0
    assert counted["record-error-total"] == 1
    assert counted["record-send-total"] == 0


def test_transactions_by_state_and_the_age_of_the_oldest(start_broker: Any) -> None:
    """An Ongoing and a Prepared transaction are counted by state, and each age gauge grows
    while its transaction stays undecided; committing the prepared one clears its age."""
    port = free_loopback_port()
    broker = start_broker(overrides={"metrics.port": str(port)})
    servers = str(broker.address)
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic("ledger", partitions=1)
    idle = scrape(port)
    assert value(idle, "spark_mq_oldest_open_transaction_seconds") == 0
    assert value(idle, "spark_mq_oldest_prepared_transaction_seconds") == 0
    opened = Producer(bootstrap_servers=servers, transactional_id="open-writer")
    prepared = Producer(bootstrap_servers=servers, transactional_id="prepared-writer")
    try:
        for producer in (opened, prepared):
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("ledger", b"undecided", partition=0)
            producer.flush()
        handle = prepared.prepare_transaction()
        first = scrape(port)
        time.sleep(0.3)
        second = scrape(port)
        assert value(second, "spark_mq_transactions", state="Ongoing") == 1
        assert value(second, "spark_mq_transactions", state="Prepared") == 1
        for name in (
            "spark_mq_oldest_open_transaction_seconds",
            "spark_mq_oldest_prepared_transaction_seconds",
        ):
            # Seconds since the transaction began, growing with the wall clock.
            assert 0 < value(first, name) < 60, name
            assert value(second, name) >= value(first, name) + 0.25, name
        with Admin(bootstrap_servers=servers) as admin:
            admin.complete_prepared_transactions([handle], commit=True)
        done = scrape(port)
        assert value(done, "spark_mq_transactions", state="Prepared") == 0
        assert value(done, "spark_mq_oldest_prepared_transaction_seconds") == 0
        assert value(done, "spark_mq_oldest_open_transaction_seconds") > 0
    finally:
        opened.close()
        prepared.close()


def test_a_restarted_broker_shows_partitions_no_client_touched_yet(start_broker: Any) -> None:
    """A single node opens its partitions' objects when a client first asks for them: the
    per-partition gauges must still list every log from the first scrape after a restart,
    or a dashboard loses a quiet topic's size and offsets whenever the broker restarts."""
    first = start_broker()
    with Admin(bootstrap_servers=str(first.address)) as admin:
        admin.create_topic("quiet", partitions=2)
    with Producer(bootstrap_servers=str(first.address), linger_ms=0) as producer:
        for i in range(10):
            producer.send("quiet", f"q{i}".encode(), partition=0)
        producer.flush()
    first.stop(30)
    port = free_loopback_port()
    start_broker(overrides={"metrics.port": str(port)})
    samples = scrape(port)
    assert value(samples, "spark_mq_partitions") == 2
    assert value(samples, "spark_mq_leader_partitions") == 2
    assert value(samples, "spark_mq_log_end_offset", topic="quiet", partition="0") == 10
    assert value(samples, "spark_mq_log_end_offset", topic="quiet", partition="1") == 0
    assert value(samples, "spark_mq_log_size_bytes", topic="quiet", partition="0") > 0
