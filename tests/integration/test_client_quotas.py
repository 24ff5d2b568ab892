"""Client quotas on a real broker process (issue 33): a throttled producer is held near its
quota while another client id produces at full speed in the same interval, a consumer is
held near its fetch quota, the broker mutes a throttled connection (KIP-219), and quotas
set through the admin API survive a restart in the log directory.

The broker measures over ``quota.window.num=3`` windows of 1 s (Kafka's default is 11) so
that the burst a quiet client may take before it is throttled (its quota over the windows
counted) is 2 s worth rather than 10, and the tests are short.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

from spark_mq import Admin, Consumer, Producer
from spark_mq.client.quota_admin import (
    DEFAULT,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    filter_any,
    filter_exact,
)
from spark_mq.errors import InvalidRequestError
from spark_mq.protocol import fetch, metadata, produce
from spark_mq.storage.record_batch import encode_batch

MIB = 1024 * 1024
QUOTA_WINDOWS = {"quota.window.num": "3", "quota.window.size.seconds": "1"}
RECORD_BYTES = 16 * 1024


def set_quota(broker: Any, entity: ClientQuotaEntity, **ops: float | None) -> None:
    with Admin(bootstrap_servers=str(broker.address)) as admin:
        admin.alter_client_quotas([ClientQuotaAlteration(entity, ops)])


def produce_for(
    broker: Any, client_id: str, topic: str, until: float, acked: list[tuple[float, int]]
) -> None:
    """Produce 128 KiB chunks until ``until`` (monotonic), noting when each was acked."""
    payload = os.urandom(RECORD_BYTES)  # incompressible, not that it is compressed
    with Producer(bootstrap_servers=str(broker.address), client_id=client_id) as producer:
        while time.monotonic() < until:
            for _ in range(8):
                producer.send(topic, payload)
            producer.flush(30)
            acked.append((time.monotonic(), 8 * RECORD_BYTES))
        metrics = producer.metrics()["producer-metrics"]
    acked.append((float("nan"), int(metrics["produce-throttle-time-max"])))


def rate_between(acked: list[tuple[float, int]], start: float, end: float) -> float:
    return sum(n for t, n in acked if start <= t < end) / (end - start)


@pytest.mark.slow
def test_a_throttled_producer_is_held_at_its_quota_while_another_runs_at_full_speed(
    start_broker: Any,
) -> None:
    broker = start_broker(overrides=QUOTA_WINDOWS)
    set_quota(broker, ClientQuotaEntity(client_id="greedy"), producer_byte_rate=1 * MIB)
    with Admin(bootstrap_servers=str(broker.address)) as admin:
        admin.create_topic("quota-produce", partitions=2)
    began = time.monotonic()
    until = began + 6.0
    greedy: list[tuple[float, int]] = []
    free: list[tuple[float, int]] = []
    threads = [
        threading.Thread(
            target=produce_for, args=(broker, "greedy", "quota-produce", until, greedy)
        ),
        threading.Thread(target=produce_for, args=(broker, "free", "quota-produce", until, free)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    greedy_throttle_max = greedy.pop()[1]
    free_throttle_max = free.pop()[1]
    # After the burst a quiet client may take (its quota over the counted windows), both
    # measured over the same seconds.
    window = (began + 2.5, until)
    greedy_rate = rate_between(greedy, *window)
    free_rate = rate_between(free, *window)
    print(f"greedy {greedy_rate / MIB:.2f} MiB/s, free {free_rate / MIB:.2f} MiB/s")
    assert 0.5 * MIB <= greedy_rate <= 1.6 * MIB, greedy_rate / MIB
    assert free_rate >= 3 * greedy_rate, (free_rate / MIB, greedy_rate / MIB)
    # The producers' metrics show who waited.
    assert greedy_throttle_max > 0
    assert free_throttle_max == 0


@pytest.mark.slow
def test_a_throttled_consumer_is_held_at_its_fetch_quota(start_broker: Any) -> None:
    broker = start_broker(overrides=QUOTA_WINDOWS)
    quota = 512 * 1024
    set_quota(broker, ClientQuotaEntity(client_id="slow-reader"), consumer_byte_rate=quota)
    total = 2 * MIB
    with Producer(bootstrap_servers=str(broker.address), client_id="writer") as producer:
        payload = os.urandom(RECORD_BYTES)
        for _ in range(total // RECORD_BYTES):
            producer.send("quota-fetch", payload, partition=0)
        producer.flush(30)

    def read_all(client_id: str) -> tuple[float, dict[str, dict[str, float]]]:
        began = time.monotonic()
        got = 0
        with Consumer(
            bootstrap_servers=str(broker.address),
            client_id=client_id,
            auto_offset_reset="earliest",
        ) as consumer:
            consumer.assign([("quota-fetch", 0)])
            while got < total and time.monotonic() - began < 30:
                got += sum(len(r.value or b"") for rs in consumer.poll(500).values() for r in rs)
            return time.monotonic() - began, consumer.metrics()

    slow_s, slow_metrics = read_all("slow-reader")
    fast_s, fast_metrics = read_all("fast-reader")
    # The burst allowance is the quota over 2 windows; the rest comes at the quota.
    least_s = (total - 2 * quota) / quota
    print(f"slow {slow_s:.2f} s (at least {least_s:.2f}), fast {fast_s:.2f} s")
    assert 0.7 * least_s <= slow_s <= 2.5 * least_s
    assert fast_s * 3 <= slow_s
    assert slow_metrics["consumer-fetch-manager-metrics"]["fetch-throttle-time-max"] > 0
    assert fast_metrics["consumer-fetch-manager-metrics"]["fetch-throttle-time-max"] == 0


def test_the_broker_mutes_a_throttled_connection(start_broker: Any, raw_connect: Any) -> None:
    """KIP-219: a client that ignores throttle_time_ms gets its next answer no sooner."""
    broker = start_broker(overrides=QUOTA_WINDOWS)
    # RawConnection's client id.
    set_quota(broker, ClientQuotaEntity(client_id="raw-test"), producer_byte_rate=100 * 1024)
    # 300 KiB against 100 KiB/s measured over 2 s: 150 KiB/s, a throttle of about 1 s.
    records = encode_batch(pa.array([os.urandom(100 * 1024) for _ in range(3)]))
    with raw_connect(broker.address) as conn:
        conn.create_topic("muted")
        first = conn.call(
            produce.ProduceRequest(
                1,
                30_000,
                [produce.ProduceTopic("muted", [produce.ProducePartition(0, len(records))])],
            ),
            records,
        )
        throttle_ms = first.body.throttle_time_ms
        assert first.body.topics[0].partitions[0].error_code == 0  # answered, and appended
        assert throttle_ms > 500
        sent = time.monotonic()
        conn.produce("muted", 0, encode_batch(pa.array([b"x"])))
        waited_ms = (time.monotonic() - sent) * 1000
    assert waited_ms >= throttle_ms - 100, (waited_ms, throttle_ms)


def test_quotas_are_described_altered_and_kept_in_the_log_directory(start_broker: Any) -> None:
    broker = start_broker()
    alice = ClientQuotaEntity(user="alice")
    alice_etl = ClientQuotaEntity(user="alice", client_id="etl")
    any_client = ClientQuotaEntity(client_id=DEFAULT)
    with Admin(bootstrap_servers=str(broker.address)) as admin:
        admin.alter_client_quotas(
            [
                ClientQuotaAlteration(alice, {"producer_byte_rate": 1024}),
                ClientQuotaAlteration(alice_etl, {"request_percentage": 50.5}),
                ClientQuotaAlteration(any_client, {"consumer_byte_rate": 2048}),
            ]
        )
        # validate_only writes nothing; a bad key is refused and nothing of it written.
        admin.alter_client_quotas(
            [ClientQuotaAlteration(alice, {"producer_byte_rate": 1})], validate_only=True
        )
        with pytest.raises(InvalidRequestError, match="not a client quota"):
            admin.alter_client_quotas(
                [ClientQuotaAlteration(alice, {"producer_byte_rate": 5, "bogus_rate": 1})]
            )
        for bad in (0, -1, float("nan"), float("inf")):
            with pytest.raises(InvalidRequestError, match="positive"):
                admin.alter_client_quotas(
                    [ClientQuotaAlteration(alice, {"producer_byte_rate": bad})]
                )
        assert admin.describe_client_quotas([filter_exact("user", "alice")], strict=True) == {
            alice: {"producer_byte_rate": 1024.0}
        }
        assert set(admin.describe_client_quotas([filter_any("user")])) == {alice, alice_etl}
        admin.alter_client_quotas([ClientQuotaAlteration(alice_etl, {"request_percentage": None})])
    stat = os.stat(broker.dir / "client-quotas.json")
    assert stat.st_mode & 0o777 == 0o600
    broker.stop(30)
    broker = start_broker()
    with Admin(bootstrap_servers=str(broker.address)) as admin:
        assert admin.describe_client_quotas() == {
            alice: {"producer_byte_rate": 1024.0},
            any_client: {"consumer_byte_rate": 2048.0},
        }


def test_request_percentage_throttles_a_client_that_keeps_the_broker_busy(
    start_broker: Any, raw_connect: Any
) -> None:
    """1% of one handler's time over the 2 s counted: 20 ms of broker time. Metadata
    requests back to back reach that within a few hundred."""
    broker = start_broker(overrides=QUOTA_WINDOWS)
    set_quota(broker, ClientQuotaEntity(client_id="raw-test"), request_percentage=1)
    throttled = 0
    with raw_connect(broker.address) as conn:
        for _ in range(5000):
            reply = conn.call(metadata.MetadataRequest(topics=[]))
            if reply.body.throttle_time_ms:
                throttled = reply.body.throttle_time_ms
                break
    assert 0 < throttled <= 1000  # at most one window


def test_a_fetch_throttled_by_request_percentage_carries_no_records(
    start_broker: Any, raw_connect: Any
) -> None:
    """Kafka answers any throttled fetch without data, whichever quota throttled it: a
    consumer over its request_percentage (not its byte rate) gets its throttle time and no
    records, and fetches them again once the time has passed."""
    broker = start_broker(overrides=QUOTA_WINDOWS)
    with raw_connect(broker.address) as conn:
        conn.create_topic("busy")
        conn.produce("busy", 0, encode_batch(pa.array([b"r%03d" % i for i in range(100)])))
        set_quota(broker, ClientQuotaEntity(client_id="raw-test"), request_percentage=1)
        request = fetch.FetchRequest(
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1024 * 1024,
            topics=[fetch.FetchTopic("busy", [fetch.FetchPartition(0, 0, 1024 * 1024)])],
            isolation_level=fetch.READ_UNCOMMITTED,
        )
        with_data = 0
        for _ in range(5000):
            reply = conn.call(request)
            if reply.body.throttle_time_ms:
                break
            with_data += len(reply.records) > 0
        else:
            pytest.fail("5,000 fetches back to back were never throttled at 1% of a handler")
    assert with_data > 0
    (answer,) = reply.body.topics[0].partitions
    assert answer.error_code == 0 and answer.records_size == 0
    assert len(reply.records) == 0
