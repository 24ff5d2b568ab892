"""Callbacks attached to send futures, kafka-python's and concurrent.futures' styles: called
once with the right outcome, on the sender thread in acknowledgement order, at once on the
caller's thread when the future is done already; an exception in one is logged and changes
nothing else. Real broker processes (the embedded broker of a directory)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.broker.local import stop_broker
from spark_mq.client import Admin, Producer
from spark_mq.client.futures import FutureBatchMetadata, FutureRecordMetadata
from spark_mq.errors import RecordTooLargeError


@pytest.fixture
def mq(tmp_path: Path) -> Any:
    directory = tmp_path / "mq"
    with Admin(path=directory) as admin:
        admin.create_topic("t", 1, config={"max.message.bytes": "20000"})
    yield directory
    stop_broker(directory)


def test_each_style_gets_its_outcome_on_the_sender_thread(mq: Path) -> None:
    calls: list[tuple[str, Any, str]] = []
    done = threading.Event()

    def record(kind: str) -> Any:
        def callback(*args: Any, **kwargs: Any) -> None:
            calls.append((kind, (args, kwargs), threading.current_thread().name))

        return callback

    with Producer(path=mq, linger_ms=20) as producer:
        good = producer.send("t", b"v", partition=0)
        bad = producer.send("t", b"x" * 30_000, partition=0)
        assert good.add_callback(record("ok"), "arg", key="kw") is good
        good.add_errback(record("not called"))
        good.add_done_callback(record("done"))
        bad.add_callback(record("not called either"))
        bad.add_errback(record("failed"), "arg")
        bad.add_done_callback(lambda f: done.set())
        producer.flush()
    assert done.wait(10)
    by_kind = {kind: (args, thread) for kind, args, thread in calls}
    assert set(by_kind) == {"ok", "done", "failed"}
    (ok_args, ok_kwargs), _ = by_kind["ok"]
    assert ok_args[0] == "arg" and ok_kwargs == {"key": "kw"}
    assert ok_args[1] == good.get(0) and ok_args[1].offset == 0
    assert by_kind["done"][0][0] == (good,)
    (failed_args, _), _ = by_kind["failed"]
    assert failed_args[0] == "arg" and isinstance(failed_args[1], RecordTooLargeError)
    assert all(thread.startswith("spark-mq-sender") for _, _, thread in calls)


def test_callbacks_run_in_acknowledgement_order_and_survive_exceptions(
    mq: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[int] = []

    def boom(metadata: Any) -> None:
        raise RuntimeError("a callback that fails")

    with Producer(path=mq, linger_ms=1, batch_size=2000) as producer:
        futures = [producer.send("t", b"%05d" % i + b"." * 100, partition=0) for i in range(2000)]
        for i, future in enumerate(futures):
            if i % 7 == 0:
                future.add_callback(boom)
            future.add_callback(lambda m: seen.append(m.offset))
        producer.flush()
        # The sender kept going: later records are written too.
        later = producer.send("t", b"after", partition=0).get(10)
    assert seen == list(range(2000))
    assert later.offset == 2000
    assert "a produce callback failed" in caplog.text


def test_a_done_future_runs_the_callback_at_once_on_the_callers_thread(mq: Path) -> None:
    with Producer(path=mq) as producer:
        future = producer.send("t", b"v", partition=0)
        future.get(10)
        threads: list[str] = []
        future.add_done_callback(lambda f: threads.append(threading.current_thread().name))
        assert threads == [threading.current_thread().name]


def test_send_batch_futures_take_callbacks_too(mq: Path) -> None:
    got: list[Any] = []
    done = threading.Event()
    # 20,000 bytes per batch at most: the 1 MB pieces send_batch makes are refused and split,
    # and the callback waits for every part.
    table = pa.table({"value": [b"%06d" % i + b"v" * 94 for i in range(30_000)]})
    with Producer(path=mq) as producer:
        future = producer.send_batch("t", table)
        assert isinstance(future, FutureBatchMetadata)
        future.add_callback(got.append)
        future.add_done_callback(lambda f: done.set())
        producer.flush()
    assert done.wait(10)
    (batches,) = got
    assert sum(b.record_count for b in batches) == 30_000
    assert [b.base_offset for b in batches] == sorted(b.base_offset for b in batches)
    assert batches == future.get(0)


def test_callbacks_follow_a_split_batch(mq: Path) -> None:
    offsets: dict[int, int] = {}
    with Producer(path=mq, linger_ms=1000, batch_size=50_000) as producer:
        futures: list[FutureRecordMetadata] = []
        for i in range(400):
            future = producer.send("t", b"%04d" % i + b"s" * 96, partition=0)
            future.add_callback(lambda m, i=i: offsets.__setitem__(i, m.offset))
            futures.append(future)
        producer.flush()
    assert offsets == {i: f.get(0).offset for i, f in enumerate(futures)}
    assert sorted(offsets.values()) == list(range(400))


def test_an_errback_sees_the_delivery_failure_logging_nothing_else(
    mq: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    errors: list[BaseException] = []
    with Producer(path=mq) as producer:
        producer.send("t", b"y" * 25_000, partition=0).add_errback(errors.append)
        producer.flush()
    assert len(errors) == 1 and isinstance(errors[0], RecordTooLargeError)
    assert "callback failed" not in caplog.text
