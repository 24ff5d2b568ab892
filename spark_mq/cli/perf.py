"""``spark-mq perf produce`` / ``perf consume``: throughput and latency of the clients.

Modelled on Kafka's ``kafka-producer-perf-test`` and ``kafka-consumer-perf-test``: send or
read ``--num-records`` records as fast as allowed, draw a progress bar on stderr (when it is a
terminal, or with ``--progress``), then print records/s, MB/s and latency percentiles.

What the latency is:

- ``perf produce`` with ``send()``: from the ``send()`` call to the acknowledgement callback
  of that record (the producer's sender thread runs it), as Kafka's tool measures it. At most
  :data:`LATENCY_SAMPLES` records carry a callback (every k-th one for larger runs).
- ``perf produce --batch``: from the ``send_batch()`` call to the acknowledgement of the last
  batch it produced, for each call, seen by a watcher thread waiting on the futures in order.
- ``perf consume``: the duration of each ``poll()`` / ``poll_batch()`` call that returned
  records (the records were written earlier, so a record's age would measure the test, not
  the consumer).

MB counts value bytes (``--record-size`` per record for produce; the value bytes read for
consume), MB = 10^6 bytes. ``--throughput N`` paces the sender to N records/s on average
(checked after every call, so ``--batch`` is paced per ``--batch-records``).
"""

from __future__ import annotations

import argparse
import collections
import random
import string
import sys
import threading
import time
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mq import Consumer, Producer
from spark_mq.cli.common import (
    ArgumentParser,
    CommandGroup,
    Handler,
    any_int,
    consumer_config,
    consumer_options,
    handler_table,
    positive_int,
    producer_config,
    producer_options,
    topic_partitions,
)
from spark_mq.cli.format import (
    ProgressBar,
    print_result,
    progress_wanted,
    render_pairs,
    summary_rows,
)

#: Latency samples kept by ``perf produce`` (Kafka's tool keeps about as many).
LATENCY_SAMPLES: Final = 500_000
#: Distinct payloads cycled through, so a compressing codec sees varied data.
PAYLOADS: Final = 1_000


def payload_pool(record_size: int, count: int = PAYLOADS, seed: int = 0) -> list[bytes]:
    """``count`` random payloads of uppercase letters (what Kafka's perf test sends)."""
    rng = random.Random(seed)
    letters = string.ascii_uppercase.encode()
    block = bytes(rng.choices(letters, k=record_size + count))
    return [block[i : i + record_size] for i in range(count)]


def latency_summary(latencies_s: np.ndarray) -> dict[str, float]:
    """avg/p50/p95/p99/p99.9/max in milliseconds; NaN when nothing was measured."""
    if len(latencies_s) == 0:
        nan = float("nan")
        return {"avg": nan, "p50": nan, "p95": nan, "p99": nan, "p99.9": nan, "max": nan}
    ms = latencies_s * 1000.0
    p50, p95, p99, p999 = np.percentile(ms, [50, 95, 99, 99.9])
    return {
        "avg": round(float(ms.mean()), 3),
        "p50": round(float(p50), 3),
        "p95": round(float(p95), 3),
        "p99": round(float(p99), 3),
        "p99.9": round(float(p999), 3),
        "max": round(float(ms.max()), 3),
    }


def _summary(
    op: str, records: int, value_bytes: int, seconds: float, latencies_s: np.ndarray, **extra: Any
) -> dict[str, Any]:
    seconds = max(seconds, 1e-9)
    return {
        "operation": op,
        "records": records,
        "seconds": round(seconds, 3),
        "records_per_sec": round(records / seconds, 1),
        "mb_per_sec": round(value_bytes / seconds / 1e6, 2),
        **extra,
        "latency_ms": latency_summary(latencies_s),
    }


#: How ``_print_summary`` names the summary's keys for people (``--json`` keeps the keys).
LABELS: Final = {
    "records_per_sec": "records/s",
    "mb_per_sec": "MB/s",
    "batch_records": "batch records",
    "latency_ms": "latency ms",
}


def _print_summary(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    rows = []
    for key, value in summary_rows(summary):
        head, _, tail = key.partition(" ")
        label = LABELS.get(head, head)
        rows.append((f"{label} {tail}" if tail else label, value))
    print_result(args.json, summary, render_pairs(rows))


class _Throttle:
    """Sleeps so that ``done`` records after ``elapsed_s`` stay at ``per_sec`` on average."""

    def __init__(self, per_sec: int) -> None:
        self.per_sec = per_sec

    def wait(self, done: int, elapsed_s: float) -> None:
        if self.per_sec <= 0:
            return
        ahead_s = done / self.per_sec - elapsed_s
        if ahead_s > 0:
            time.sleep(ahead_s)


# ---------------------------------------------------------------------------------------------
# perf produce


def perf_produce(args: argparse.Namespace) -> int:
    payloads = payload_pool(args.record_size)
    n = args.num_records
    progress = ProgressBar(n, enabled=progress_wanted(args))
    throttle = _Throttle(args.throughput)
    with Producer(**producer_config(args)) as producer:
        producer.partitions_for(args.topic)  # fail early (and outside the clock) if unknown
        if args.batch:
            seconds, latencies = _produce_batches(args, producer, payloads, progress, throttle)
        else:
            seconds, latencies = _produce_records(args, producer, payloads, progress, throttle)
    progress.finish(n)
    extra: dict[str, Any] = {"api": "send_batch" if args.batch else "send"}
    if args.batch:
        extra["batch_records"] = args.batch_records
    _print_summary(args, _summary("produce", n, n * args.record_size, seconds, latencies, **extra))
    return 0


def _produce_records(
    args: argparse.Namespace,
    producer: Any,
    payloads: list[bytes],
    progress: ProgressBar,
    throttle: _Throttle,
) -> tuple[float, np.ndarray]:
    n = args.num_records
    every = max(1, -(-n // LATENCY_SAMPLES))  # ceil: at most LATENCY_SAMPLES callbacks
    samples = -(-n // every)
    sent_at = np.zeros(samples, dtype=np.float64)
    acked_at = np.zeros(samples, dtype=np.float64)
    failures: list[BaseException] = []
    clock = time.perf_counter

    def make_callback(slot: int) -> Any:
        def done(metadata: object, exc: BaseException | None) -> None:
            acked_at[slot] = clock()
            if exc is not None:
                failures.append(exc)

        return done

    send = producer.send
    topic = args.topic
    m = len(payloads)
    check_every = 1000 if args.throughput <= 0 else max(1, min(1000, args.throughput // 100))
    t0 = clock()
    for i in range(n):
        if i % every == 0:
            slot = i // every
            sent_at[slot] = clock()
            send(topic, payloads[i % m], callback=make_callback(slot))
        else:
            send(topic, payloads[i % m])
        if i % check_every == 0:
            elapsed = clock() - t0
            progress.update(i)
            throttle.wait(i + 1, elapsed)
    producer.flush()
    seconds = clock() - t0
    if failures:
        raise failures[0]
    ok = acked_at > 0
    return seconds, acked_at[ok] - sent_at[ok]


def _produce_batches(
    args: argparse.Namespace,
    producer: Any,
    payloads: list[bytes],
    progress: ProgressBar,
    throttle: _Throttle,
) -> tuple[float, np.ndarray]:
    n = args.num_records
    size = args.batch_records
    values = pa.array([payloads[i % len(payloads)] for i in range(min(size, n))], pa.binary())
    full = pa.table({"value": values})
    clock = time.perf_counter
    queue: collections.deque[tuple[float, int, Any] | None] = collections.deque()
    ready = threading.Condition()
    latencies: list[float] = []
    per_record: list[int] = []
    failures: list[BaseException] = []

    def watch() -> None:
        # Futures complete in the order their batches were queued (per partition, and the
        # sender drains partitions together), so waiting on them in order sees each
        # acknowledgement at most one acknowledgement late.
        while True:
            with ready:
                while not queue:
                    ready.wait()
                item = queue.popleft()
            if item is None:
                return
            started, count, future = item
            try:
                future.get()
            except BaseException as exc:
                failures.append(exc)
            latencies.append(clock() - started)
            per_record.append(count)

    watcher = threading.Thread(target=watch, name="perf-ack-watcher", daemon=True)
    watcher.start()
    sent = 0
    t0 = clock()
    try:
        while sent < n:
            count = min(size, n - sent)
            table = full if count == full.num_rows else full.slice(0, count)
            started = clock()
            future = producer.send_batch(args.topic, table)
            with ready:
                queue.append((started, count, future))
                ready.notify()
            sent += count
            elapsed = clock() - t0
            progress.update(sent)
            throttle.wait(sent, elapsed)
        producer.flush()
    finally:
        with ready:
            queue.append(None)
            ready.notify()
        watcher.join()
    seconds = clock() - t0
    if failures:
        raise failures[0]
    # Every record of a call shares the call's latency: weight each call by its records.
    return seconds, np.repeat(np.array(latencies), np.array(per_record, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# perf consume


def perf_consume(args: argparse.Namespace) -> int:
    config = consumer_config(args)
    n = args.num_records
    progress = ProgressBar(n, enabled=progress_wanted(args))
    clock = time.perf_counter
    poll_seconds: list[float] = []
    got = 0
    value_bytes = 0
    polls = 0
    with Consumer(**config) as consumer:
        tps = topic_partitions(consumer, args.topic)
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        t0 = clock()
        last_record = t0
        while got < n:
            started = clock()
            if args.batch:
                table = consumer.poll_batch(timeout_ms=min(args.timeout_ms, 1000))
                count = table.num_rows
                if count:
                    value_bytes += _value_bytes(table)
            else:
                polled = consumer.poll(
                    timeout_ms=min(args.timeout_ms, 1000),
                    max_records=min(args.max_records, n - got),
                )
                count = 0
                for records in polled.values():
                    count += len(records)
                    value_bytes += sum(len(r.value) for r in records if r.value is not None)
            now = clock()
            polls += 1
            if count:
                poll_seconds.append(now - started)
                got += count
                last_record = now
                progress.update(got)
            elif (now - last_record) * 1000 >= args.timeout_ms:
                break
        seconds = (last_record if got else clock()) - t0
    progress.finish(got)
    summary = _summary(
        "consume",
        got,
        value_bytes,
        seconds,
        np.array(poll_seconds),
        api="poll_batch" if args.batch else "poll",
        polls=polls,
    )
    _print_summary(args, summary)
    if got < n:
        print(
            f"spark-mq: warning: read {got} of {n} records; no record arrived for "
            f"{args.timeout_ms} ms",
            file=sys.stderr,
        )
    return 0


def _value_bytes(table: Any) -> int:
    """Bytes of the ``value`` column's data (offsets and validity not counted)."""
    column = table.column("value")
    total = pc.sum(pc.binary_length(column)).as_py()
    return int(total or 0)


# ---------------------------------------------------------------------------------------------
# The parser


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``perf`` and its actions on the ``spark-mq`` command parser."""
    perf_common = ArgumentParser(add_help=False)
    perf_common.add_argument("topic")
    perf_common.add_argument(
        "--num-records", type=positive_int, required=True, help="records to send or read"
    )
    perf_common.add_argument(
        "--batch",
        action="store_true",
        help="use the columnar API (send_batch / poll_batch) instead of send / poll",
    )
    perf_common.add_argument(
        "--progress",
        action="store_true",
        help="draw the progress bar on stderr even when it is not a terminal",
    )
    actions = CommandGroup(
        commands,
        "perf",
        help="measure produce or consume throughput",
        parents=[common, perf_common],
    )
    pp = actions.add(
        "produce",
        perf_produce,
        help="send records as fast as allowed (like kafka-producer-perf-test)",
    )
    pp.add_argument(
        "--record-size", type=positive_int, default=100, help="value bytes (default 100)"
    )
    pp.add_argument(
        "--throughput",
        type=any_int,
        default=-1,
        help="records/s to aim for; -1 for as fast as possible (default)",
    )
    pp.add_argument(
        "--batch-records",
        type=positive_int,
        default=10_000,
        help="--batch: records per send_batch call (default %(default)s)",
    )
    producer_options(pp, acks_help="(default: all)", compression_help="batch codec")
    pc = actions.add(
        "consume",
        perf_consume,
        help="read records from the beginning (like kafka-consumer-perf-test)",
    )
    pc.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=10_000,
        help="give up when no record arrives for this long (default %(default)s)",
    )
    pc.add_argument(
        "--max-records",
        type=positive_int,
        default=10_000,
        help="max_records of each poll() (default %(default)s; poll_batch is bounded by "
        "the fetch sizes)",
    )
    consumer_options(pc, isolation_help="see consume")


HANDLERS: Final[dict[str, Handler]] = handler_table(perf_produce, perf_consume)
