"""The storage engine on its own: write a million events, read them back as Arrow.

    python examples/storage_demo.py [--path DIR] [--records N] [--fresh]

Creates (or reopens) a log directory, makes a 3-partition topic ``events``, appends events
keyed by user id (zstd-compressed batches of 10,000 records, partitioned by key), reads every
partition back through the decoding reader, aggregates with Arrow, finds offsets by
timestamp, and closes cleanly. Run it twice: the second run reopens the directory, finds the
first run's data, and appends after it.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mq import LogManager, encode_batch

TOPIC = "events"
PARTITIONS = 3
BATCH_RECORDS = 10_000
USERS = 1_000
ACTIONS = np.array([b"view", b"click", b"add_to_cart", b"purchase"], dtype=object)


def make_events(start: int, count: int, rng: np.random.Generator, start_ms: int) -> pa.Table:
    """``count`` synthetic events as columns: user (key), JSON-ish payload (value), time."""
    users = rng.integers(0, USERS, count)
    actions = ACTIONS[rng.integers(0, len(ACTIONS), count)]
    keys = pa.array([b"user-%04d" % u for u in users], pa.binary())
    values = pa.array(
        [
            b'{"n":%d,"user":%d,"action":"%s"}' % (start + i, u, a)
            for i, (u, a) in enumerate(zip(users, actions, strict=True))
        ],
        pa.binary(),
    )
    stamps = pa.array(start_ms + np.arange(count, dtype=np.int64))  # 1 event per ms
    return pa.table(
        {"key": keys, "value": values, "timestamp": stamps, "partition": users % PARTITIONS}
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--path", default="demo-data", help="log directory (default ./demo-data)")
    parser.add_argument("--records", type=int, default=1_000_000, help="events to write")
    parser.add_argument("--fresh", action="store_true", help="delete the directory first")
    args = parser.parse_args()
    root = Path(args.path)
    if args.fresh and root.exists():
        shutil.rmtree(root)

    with LogManager(root) as logs:
        if not logs.topic_exists(TOPIC):
            logs.create_topic(
                TOPIC, partitions=PARTITIONS, config={"segment.bytes": 32 * 1024 * 1024}
            )
            print(f"created topic {TOPIC!r} with {PARTITIONS} partitions in {root}/")
        else:
            ends = [logs.get_log(TOPIC, p).log_end_offset for p in range(PARTITIONS)]
            print(f"reopened {root}/: topic {TOPIC!r} already holds {sum(ends):,} records {ends}")

        # Produce: build the events as Arrow columns, split by partition, encode, append.
        rng = np.random.default_rng(7)
        start_ms = int(time.time() * 1000) - args.records
        events = make_events(0, args.records, rng, start_ms)
        started = time.perf_counter()
        appended = 0
        for p in range(PARTITIONS):
            part = events.filter(pc.equal(events["partition"], p))
            log = logs.get_log(TOPIC, p)
            for lo in range(0, part.num_rows, BATCH_RECORDS):
                chunk = part.slice(lo, BATCH_RECORDS)
                batch = encode_batch(
                    chunk["value"], key=chunk["key"], timestamp=chunk["timestamp"], codec="zstd"
                )
                appended += log.append(batch).num_records
        produce_s = time.perf_counter() - started
        print(
            f"appended {appended:,} records in {produce_s:.2f} s "
            f"({appended / produce_s:,.0f} records/s, zstd)"
        )

        # Consume: read every partition from its start through the decoding reader.
        started = time.perf_counter()
        tables = []
        for p in range(PARTITIONS):
            log = logs.get_log(TOPIC, p)
            offset = log.log_start_offset
            while offset < log.high_watermark:
                # The next offset comes from batch headers, so the loop also moves on over
                # the gaps and emptied batches that compaction leaves.
                table, offset = log.read_records_with_next(offset, max_bytes=8 * 1024 * 1024)
                tables.append(table.select(["key", "timestamp"]))
        everything = pa.concat_tables(tables)
        read_s = time.perf_counter() - started
        print(
            f"read {everything.num_rows:,} records in {read_s:.2f} s "
            f"({everything.num_rows / read_s:,.0f} records/s)"
        )

        top = (
            everything.group_by("key")
            .aggregate([("key", "count")])
            .sort_by([("key_count", "descending")])
        )
        print(
            "busiest users:",
            ", ".join(
                f"{k.decode()}={c}"
                for k, c in zip(
                    top["key"][:3].to_pylist(), top["key_count"][:3].to_pylist(), strict=True
                )
            ),
        )

        # Offsets by timestamp, as Kafka's offsetsForTimes: where does the last minute start?
        cutoff = start_ms + args.records - 60_000
        for p in range(PARTITIONS):
            found = logs.get_log(TOPIC, p).find_offset_by_timestamp(cutoff)
            where = found.offset if found else "none"
            print(f"  partition {p}: first event of the last minute at offset {where}")

        info = logs.describe_topic(TOPIC)
        for part in info.partitions:
            print(
                f"  partition {part.partition}: offsets "
                f"{part.log_start_offset:,}..{part.log_end_offset:,}, "
                f"{part.size_bytes / 1e6:.1f} MB in {part.num_segments} segment(s)"
            )
    print(f"closed cleanly; run again to reopen {root}/ and append after the existing data")


if __name__ == "__main__":
    main()
