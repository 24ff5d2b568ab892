"""A streaming pipeline on the embedded broker: produce events, process them, publish results.

    python examples/pipeline_demo.py [--path DIR] [--records N] [--fresh]

No server to install: ``path=DIR`` starts (or finds) the local broker that owns ``DIR``.

1. A producer writes ``N`` click events keyed by user to the 3-partition topic ``clicks``
   with ``send_batch`` (the columnar path), in rounds of 50,000.
2. At the same time a consumer reads ``clicks`` as Arrow tables with ``poll_batch``, counts
   clicks per action in each batch, and publishes one summary record per batch to the topic
   ``click-counts`` with ``send``.
3. Finally the summaries are read back and added up; the totals must equal the events made.

Run it twice: the second run finds the first run's topics and continues after them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mq import Admin, Consumer, Producer, TopicExistsError, TopicPartition

EVENTS, COUNTS = "clicks", "click-counts"
PARTITIONS = 3
ROUND = 50_000
ACTIONS = np.array([b"view", b"click", b"add_to_cart", b"purchase"], dtype=object)


def make_round(rng: np.random.Generator, count: int) -> tuple[pa.Table, Counter[str]]:
    users = rng.integers(0, 1_000, count)
    actions = ACTIONS[rng.integers(0, len(ACTIONS), count)]
    table = pa.table(
        {
            "key": pa.array([b"user-%04d" % u for u in users], pa.binary()),
            "value": pa.array(list(actions), pa.binary()),
        }
    )
    made = Counter(a.decode() for a in actions)
    return table, made


def produce(path: str, records: int, made: Counter[str], done: threading.Event) -> None:
    rng = np.random.default_rng(7)
    with Producer(path=path, compression_type="zstd", linger_ms=5) as producer:
        sent = 0
        while sent < records:
            table, counts = make_round(rng, min(ROUND, records - sent))
            producer.send_batch(EVENTS, table)
            made.update(counts)
            sent += table.num_rows
        producer.flush()
    done.set()


def process(path: str, start: dict[TopicPartition, int], expected: int) -> int:
    """Consume ``expected`` new events, publish one count record per polled batch."""
    seen = 0
    with Consumer(path=path) as consumer, Producer(path=path) as out:
        consumer.assign(list(start))
        for tp, offset in start.items():
            consumer.seek(tp, offset)
        while seen < expected:
            batch = consumer.poll_batch(timeout_ms=1_000)
            if batch.num_rows == 0:
                continue
            counts = pc.value_counts(batch.column("value").cast(pa.string()))
            summary = {row["values"]: row["counts"] for row in counts.to_pylist()}
            out.send(COUNTS, json.dumps(summary).encode())
            seen += batch.num_rows
        out.flush()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default="demo-data", help="log directory (default: %(default)s)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--fresh", action="store_true", help="delete the directory first")
    args = parser.parse_args()
    if args.fresh:
        shutil.rmtree(args.path, ignore_errors=True)
    Path(args.path).mkdir(parents=True, exist_ok=True)
    path = str(Path(args.path).resolve())

    with Admin(path=path) as admin:
        for topic, partitions in ((EVENTS, PARTITIONS), (COUNTS, 1)):
            with contextlib.suppress(TopicExistsError):
                admin.create_topic(topic, partitions=partitions)
        events = [TopicPartition(EVENTS, p) for p in range(PARTITIONS)]
        start = admin.list_offsets(dict.fromkeys(events, "latest"))
        counts_tp = TopicPartition(COUNTS, 0)
        counts_start = admin.list_offsets({counts_tp: "latest"})[counts_tp]
    start_offsets = {tp: found.offset for tp, found in start.items()}
    counts_from = counts_start.offset

    made: Counter[str] = Counter()
    done = threading.Event()
    began = time.perf_counter()
    producer = threading.Thread(target=produce, args=(path, args.records, made, done))
    producer.start()
    seen = process(path, start_offsets, args.records)
    producer.join()
    elapsed = time.perf_counter() - began
    print(f"produced and processed {seen:,} events in {elapsed:.2f} s ({seen / elapsed:,.0f}/s)")

    totals: Counter[str] = Counter()
    with Consumer(path=path) as reader:
        reader.assign([counts_tp])
        reader.seek(counts_tp, counts_from)
        end = reader.end_offsets([counts_tp])[counts_tp]
        while reader.position(counts_tp) < end:
            for records in reader.poll(timeout_ms=1_000).values():
                for record in records:
                    totals.update(json.loads(record.value))
    print("clicks per action:", dict(sorted(totals.items())))
    if totals != made:
        raise SystemExit(f"mismatch: made {dict(made)} but counted {dict(totals)}")
    print("every event was counted exactly once")


if __name__ == "__main__":
    main()
