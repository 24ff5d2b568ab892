"""The Jepsen queue workload against a real cluster, for the fault tests: a producer thread
sends numbered records (the value is the number), a consumer thread reads them back, and
:func:`check` says what went wrong once the faults are over.

What is checked is Kafka's replication system test and Jepsen's queue checks:

- every record the producer saw acknowledged is read, at the offset it was acknowledged at
  (lost: acknowledged, never read; moved: read at another offset);
- no record is read at two offsets (duplicated);
- no offset is read with two different records (an offset that changed its content, as a
  truncated-away record read before the truncation would show).

Records whose send failed (delivery timed out) may or may not be read: they are neither
lost nor counted.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable

from cluster_fixtures import SHORT_SESSION_MS, replica_properties

from spark_mq import Consumer, Producer, TopicPartition

#: The fault tests' brokers: a killed broker's session ends soon, and followers notice a
#: dead leader and leave the ISR within seconds, so five bounces fit in a CI run.
SESSION_TIMEOUT_MS = SHORT_SESSION_MS
FAULT_BROKER_PROPERTIES = replica_properties(lag_time_max_ms=3000, socket_timeout_ms=3000)

#: A read or an acknowledgement: (partition, offset, record number).
Placed = tuple[int, int, int]


@dataclasses.dataclass
class Verdict:
    acknowledged: int
    read: int
    lost: list[Placed]
    moved: list[tuple[Placed, list[tuple[int, int]]]]
    duplicated: dict[int, list[tuple[int, int]]]
    divergent: dict[tuple[int, int], set[int]]

    @property
    def ok(self) -> bool:
        return not (self.lost or self.moved or self.duplicated or self.divergent)

    def __str__(self) -> str:
        return (
            f"{self.acknowledged} acknowledged, {self.read} reads; lost {self.lost[:10]} "
            f"({len(self.lost)}), read elsewhere {self.moved[:10]} ({len(self.moved)}), read "
            f"at two offsets {dict(list(self.duplicated.items())[:10])} "
            f"({len(self.duplicated)}), offsets with two records "
            f"{dict(list(self.divergent.items())[:10])} ({len(self.divergent)})"
        )


def check(acknowledged: Iterable[Placed], reads: Iterable[Placed]) -> Verdict:
    """The queue checks over what the producer saw acknowledged and everything any consumer
    read (a record may be read several times at the same offset: by two consumers, or by one
    after a re-fetch)."""
    acked = list(acknowledged)
    reads = list(reads)
    at_offset: dict[tuple[int, int], set[int]] = {}
    where: dict[int, set[tuple[int, int]]] = {}
    for partition, offset, number in reads:
        at_offset.setdefault((partition, offset), set()).add(number)
        where.setdefault(number, set()).add((partition, offset))
    lost = [a for a in acked if a[2] not in where]
    moved = [
        (a, sorted(where[a[2]])) for a in acked if a[2] in where and (a[0], a[1]) not in where[a[2]]
    ]
    duplicated = {n: sorted(places) for n, places in where.items() if len(places) > 1}
    divergent = {place: numbers for place, numbers in at_offset.items() if len(numbers) > 1}
    return Verdict(len(acked), len(reads), lost, moved, duplicated, divergent)


class NumberedProducer:
    """A thread sending records 0, 1, 2, ... round-robin over ``partitions`` with an
    idempotent, acks=all producer, one every ``interval_s``; ``acknowledged`` and ``failed``
    fill as answers come (on the producer's sender thread)."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        partitions: int,
        *,
        interval_s: float = 0.005,
        config: dict[str, object] | None = None,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.interval_s = interval_s
        self.acknowledged: list[Placed] = []
        self.failed: list[tuple[int, str]] = []
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.producer = Producer(
            bootstrap_servers=bootstrap_servers,
            config={
                "enable.idempotence": True,
                "acks": "all",
                # Long enough to ride over a session timeout, an election and a restart.
                "delivery.timeout.ms": 120_000,
                "request.timeout.ms": 10_000,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 300,
                "linger.ms": 5,
                **(config or {}),
            },
        )
        self._thread = threading.Thread(target=self._run, name=f"numbered-{topic}", daemon=True)

    def start(self) -> NumberedProducer:
        self._thread.start()
        return self

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acknowledged)

    def _answer(self, number: int, metadata: object, exc: Exception | None) -> None:
        with self._lock:
            if exc is None:
                self.acknowledged.append((metadata.partition, metadata.offset, number))  # type: ignore[attr-defined]
            else:
                self.failed.append((number, repr(exc)))

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            self.producer.send(
                self.topic,
                b"%d" % number,
                partition=number % self.partitions,
                callback=lambda md, exc, n=number: self._answer(n, md, exc),
            )
            number += 1
            self.sent = number
            time.sleep(self.interval_s)

    def stop(self, timeout_s: float = 130.0) -> None:
        """Stop sending and wait for every answer (flush)."""
        self._stop.set()
        self._thread.join(timeout_s)
        self.producer.flush(timeout_s)
        self.producer.close()


class QueueReader:
    """A thread reading every partition of ``topic`` from offset 0 with a consumer that
    follows leaders; ``reads`` fill as records come."""

    def __init__(self, bootstrap_servers: str, topic: str, partitions: int) -> None:
        self.reads: list[Placed] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self.consumer = Consumer(
            bootstrap_servers=bootstrap_servers,
            config={"retry.backoff.ms": 50, "retry.backoff.max.ms": 300},
        )
        self.consumer.assign(self._tps)
        for tp in self._tps:
            self.consumer.seek(tp, 0)
        self._thread = threading.Thread(target=self._run, name=f"reader-{topic}", daemon=True)

    def start(self) -> QueueReader:
        self._thread.start()
        return self

    def snapshot(self) -> list[Placed]:
        with self._lock:
            return list(self.reads)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self.consumer.poll(timeout_ms=200)
            except Exception as exc:
                # A consumer error is kept for the report; the reader goes on, as a
                # Jepsen client does.
                self.errors.append(repr(exc))
                time.sleep(0.2)
                continue
            with self._lock:
                for tp, records in batch.items():
                    self.reads.extend(
                        (tp.partition, r.offset, int(r.value or b"-1")) for r in records
                    )

    def read_up_to(self, numbers: set[int], timeout_s: float) -> bool:
        """Wait until every record numbered in ``numbers`` has been read."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if numbers <= {n for _, _, n in self.snapshot()}:
                return True
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def read_all(bootstrap_servers: str, topic: str, partitions: int, timeout_s: float) -> list[Placed]:
    """Everything up to the high watermark of each partition, read by a fresh consumer."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: list[Placed] = []
    with Consumer(bootstrap_servers=bootstrap_servers) as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "the final read did not reach the end offsets"
            for tp, records in consumer.poll(timeout_ms=500).items():
                out.extend((tp.partition, r.offset, int(r.value or b"-1")) for r in records)
    return out
