"""Broker process lifecycle: clean shutdown, crash and recovery, epochs, idle connections."""

from __future__ import annotations

import json
import shutil
import signal

import pyarrow as pa
import pytest

from spark_mq.broker.dir_files import ENDPOINT_FILE, BrokerMeta
from spark_mq.protocol import fetch
from spark_mq.storage.batch_decoder import decode_records
from spark_mq.storage.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT
from spark_mq.storage.record_batch import encode_batch


def values(conn, topic):
    _, records = conn.fetch(topic, 0, 0)
    return decode_records(records).column("value").to_pylist()


def test_sigterm_shuts_down_cleanly_and_a_restart_keeps_the_data(start_broker, broker_dir):
    broker = start_broker()
    with broker.connect() as conn:
        conn.produce("keep", 0, encode_batch(pa.array([b"a", b"b"])))
    assert broker.stop() == 0
    assert (broker_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert not (broker_dir / ENDPOINT_FILE).exists()
    assert not (broker_dir / "broker.sock").exists()
    lines = [json.loads(line) for line in broker.log().splitlines()]
    assert any("closed cleanly" in line["msg"] for line in lines)

    again = start_broker()
    assert again.epoch == broker.epoch + 1
    with again.connect() as conn:
        assert values(conn, "keep") == [b"a", b"b"]


def test_sigkill_leaves_an_unclean_directory_that_the_next_broker_recovers(
    start_broker, broker_dir
):
    broker = start_broker()
    with broker.connect() as conn:
        for i in range(20):
            conn.produce("crash", 0, encode_batch(pa.array([f"v{i}".encode()])))
    broker.kill()
    assert not (broker_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert (broker_dir / ENDPOINT_FILE).exists()  # stale: nobody removed it
    again = start_broker()
    assert BrokerMeta.read(broker_dir).epoch == again.epoch == broker.epoch + 1
    assert "unclean" in again.log()
    with again.connect(unix=True) as conn:
        assert values(conn, "crash") == [f"v{i}".encode() for i in range(20)]


def test_a_deleted_log_directory_stops_the_broker(start_broker, broker_dir):
    """Appends into files nobody can reach would be acknowledged and lost: the broker notices
    within about a second (LOG_DIR_CHECK_INTERVAL_S), says why, and exits with status 1
    without recreating anything at the path."""
    broker = start_broker()
    with broker.connect() as conn:
        conn.produce("gone", 0, encode_batch(pa.array([b"a"])))
    shutil.rmtree(broker_dir)
    assert broker.proc.wait(30) == 1
    log = broker.log()
    assert "log directory" in log and "is gone" in log and "abandoned" in log
    assert not broker_dir.exists()


def test_a_replaced_log_directory_is_left_to_the_broker_that_took_it(start_broker, broker_dir):
    """The old broker is paused while its directory is replaced and a new broker starts on the
    new one; resumed, it stops without touching the new broker's files (no clean-shutdown
    marker or checkpoints written there, its socket file and broker.json left alone)."""
    old = start_broker()
    with old.connect() as conn:
        conn.produce("old", 0, encode_batch(pa.array([b"a"])))
    old.proc.send_signal(signal.SIGSTOP)
    try:
        shutil.rmtree(broker_dir)
        broker_dir.mkdir()
        new = start_broker()
    finally:
        old.proc.send_signal(signal.SIGCONT)
    assert old.proc.wait(30) == 1
    assert "not the file this process locked" in old.log()
    assert not (broker_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert not (broker_dir / RECOVERY_POINT_CHECKPOINT).exists()
    assert (broker_dir / "broker.sock").is_socket()
    assert json.loads((broker_dir / ENDPOINT_FILE).read_text())["pid"] == new.pid
    with new.connect(unix=True) as conn:
        conn.produce("new", 0, encode_batch(pa.array([b"b"])))
        assert values(conn, "new") == [b"b"]
        assert conn.metadata(["old"]).topics[0].error_code != 0


def test_a_second_foreground_broker_on_the_same_directory_fails(start_broker, broker_dir):
    start_broker()
    second = start_broker(wait=False)
    assert second.proc.wait(60) == 1
    assert "is locked by" in second.log()


def test_shutdown_ends_a_waiting_long_poll(start_broker):
    """SIGTERM while a fetch waits (10 minutes): the broker answers it with what it has and
    exits at once. (Deterministic wake-up on shutdown is tested in-process, in
    tests/broker/test_handlers.py; here the fetch may not have been read yet.)"""
    broker = start_broker()
    with broker.connect() as waiting, broker.connect() as other:
        other.produce("lp", 0, encode_batch(pa.array([b"v"])))
        request = fetch.FetchRequest(
            max_wait_ms=600_000,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[fetch.FetchTopic("lp", [fetch.FetchPartition(0, 1, 1 << 20)])],
        )
        waiting.send(request)
        other.metadata()  # a round trip: the broker has very likely read the fetch by now
        broker.proc.send_signal(signal.SIGTERM)
        try:
            reply = waiting.recv(request)
            assert reply.body.topics[0].partitions[0].records_size == 0
        except ConnectionError:
            pass  # the fetch had not been read yet: the idle connection was closed
        assert broker.proc.wait(60) == 0


@pytest.mark.slow
def test_idle_connections_are_closed(start_broker):
    broker = start_broker(overrides={"connections.max.idle.ms": "200"})
    with broker.connect() as conn:
        assert conn.closed_by_peer(timeout_s=60)
    with broker.connect() as conn:  # a new connection is served
        assert conn.metadata().topics == []
