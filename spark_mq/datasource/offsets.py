"""Source offsets and the offset ranges Spark tasks read.

A source offset is the JSON object ``{"topic": {"partition": next_offset}}`` (Spark's Kafka
source uses the same shape), written to the checkpoint by Spark. It is a plain ``dict`` with
string keys, as ``DataSourceStreamReader`` requires. :class:`PartitionRange` is the input
partition of one task: one log partition and the offsets ``[start, end)`` to read, plus
everything the reading process needs (it is another process than the driver's reader).

:func:`split_by_backlog` shares a ``maxOffsetsPerTrigger`` budget among partitions in
proportion to their backlog, by largest remainder, so the total is exactly
``min(budget, backlog)`` and never more (Spark's Kafka source rounds each share and can
exceed the limit).

:func:`split_ranges` does what Spark's Kafka source does with ``maxRecordsPerPartition`` and
``minPartitions``: a range longer than the first is cut into equal pieces, and while there
are fewer input partitions than the second, the range with the longest pieces is cut into
one piece more, so a topic with few partitions is still read by many tasks. The pieces are a
function of the ranges and the two options only, so a re-run micro-batch plans the same
pieces and reads the same records; each piece is a whole :class:`PartitionRange` (offsets
``[start, end)`` of one log partition), read by its task like any range.

>>> to_json({TopicPartition("a", 1): 7, TopicPartition("a", 0): 3})
{'a': {'0': 3, '1': 7}}
>>> split_by_backlog({TopicPartition("a", 0): 10, TopicPartition("a", 1): 30}, 9)
{TopicPartition(topic='a', partition=0): 2, TopicPartition(topic='a', partition=1): 7}
>>> settings = ReadSettings({}, False, True, 1000)
>>> pieces = split_ranges([PartitionRange("a", 0, 10, 20, settings)], min_partitions=3)
>>> [(r.start, r.end) for r in pieces]
[(10, 13), (13, 16), (16, 20)]
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from pyspark.sql.datasource import InputPartition

from spark_mq.client.records import TopicPartition
from spark_mq.datasource.executor_endpoint import ExecutorEndpoint
from spark_mq.datasource.options import EARLIEST
from spark_mq.errors import ConfigError

PartitionOffsets = dict[TopicPartition, int]


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The JSON form (topics and partitions sorted, so equal offsets serialise equally)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_json(data: Mapping[str, object]) -> PartitionOffsets:
    """Parse the JSON form; anything else (a damaged or foreign checkpoint) raises
    ConfigError saying what was expected."""
    out: PartitionOffsets = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"source offset {data!r} is not a JSON object of topics")
    for topic, parts in data.items():
        if not isinstance(parts, Mapping):
            raise ConfigError(f"source offset of topic {topic!r} is not an object: {parts!r}")
        for part, offset in parts.items():
            if not (isinstance(part, str) and part.isdigit()) or not isinstance(offset, int):
                raise ConfigError(
                    f"source offset {topic}: {{{part!r}: {offset!r}}} is not "
                    "partition number to offset"
                )
            out[TopicPartition(topic, int(part))] = offset
    return out


@dataclass(frozen=True)
class ReadSettings:
    """What every reader task needs besides its range (picklable plain data)."""

    consumer_properties: Mapping[str, object]
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int
    #: With ``path``: where executors reach its broker, resolved on the driver (the
    #: consumer properties then name no broker).
    executor_endpoint: ExecutorEndpoint | None = None

    def client_properties(self) -> dict[str, object]:
        """The consumer properties of a reader task, the broker's address included (runs
        on the executor: ExecutorEndpointError if the driver's broker cannot be reached)."""
        props = dict(self.consumer_properties)
        if self.executor_endpoint is not None:
            props.update(self.executor_endpoint.client_properties())
        return props


@dataclass
class PartitionRange(InputPartition):
    """One Spark task: read ``topic``-``partition`` from ``start`` up to ``end`` (exclusive)."""

    topic: str
    partition: int
    start: int
    end: int
    settings: ReadSettings = field(repr=False)

    def __post_init__(self) -> None:
        InputPartition.__init__(self, (self.topic, self.partition, self.start, self.end))

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def plan_ranges(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], settings: ReadSettings
) -> list[PartitionRange]:
    """One range per partition with offsets between ``start`` and ``end``. A partition
    missing from ``start`` (new since) or whose end is below its start (the topic was
    recreated; the driver allowed it with failOnDataLoss=false) is read from its log start:
    its range starts at the EARLIEST sentinel, which the reader task resolves."""
    ranges = []
    for tp in sorted(end):
        stop = end[tp]
        begin = start.get(tp, EARLIEST)
        if stop < begin:
            begin = EARLIEST
        if stop > max(begin, 0):
            ranges.append(PartitionRange(tp.topic, tp.partition, begin, stop, settings))
    return ranges


def split_by_backlog(backlog: Mapping[TopicPartition, int], budget: int) -> PartitionOffsets:
    """How many offsets each partition may advance: shares of ``budget`` proportional to
    ``backlog`` (largest remainders get the leftover units), never above a backlog, and
    adding up to exactly ``min(budget, sum(backlog))``."""
    total = sum(max(b, 0) for b in backlog.values())
    if total <= budget:
        return {tp: max(b, 0) for tp, b in backlog.items()}
    shares: PartitionOffsets = {}
    remainders: list[tuple[int, TopicPartition]] = []
    for tp, b in backlog.items():
        units, rest = divmod(max(b, 0) * budget, total)
        shares[tp] = units
        remainders.append((-rest, tp))
    leftover = budget - sum(shares.values())
    for _, tp in sorted(remainders)[:leftover]:
        shares[tp] += 1
    return shares


def split_ranges(
    ranges: Sequence[PartitionRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[PartitionRange]:
    """``ranges`` cut into pieces (see the module docstring): no piece longer than
    ``max_records_per_partition`` offsets, and at least ``min_partitions`` pieces when the
    ranges hold that many offsets. Ranges from the log start (EARLIEST) have no known length
    and stay whole. Pieces of one range are equal to within one offset and keep the order of
    their offsets; the ranges keep their order."""
    sized = [i for i, r in enumerate(ranges) if r.start != EARLIEST and r.end > r.start]
    lengths = {i: ranges[i].end - ranges[i].start for i in sized}
    parts = dict.fromkeys(sized, 1)
    if max_records_per_partition is not None:
        parts = {i: -(-lengths[i] // max_records_per_partition) for i in sized}
    total = len(ranges) - len(sized) + sum(parts.values())
    if min_partitions is not None and total < min_partitions:
        # One more piece at a time for the range whose pieces are longest: as many steps as
        # pieces added, and the pieces of all ranges end up as even as whole offsets allow.
        heap = [(-Fraction(lengths[i], parts[i]), i) for i in sized if lengths[i] > parts[i]]
        heapq.heapify(heap)
        while total < min_partitions and heap:
            _, i = heapq.heappop(heap)
            parts[i] += 1
            total += 1
            if lengths[i] > parts[i]:
                heapq.heappush(heap, (-Fraction(lengths[i], parts[i]), i))
    out: list[PartitionRange] = []
    for i, rng in enumerate(ranges):
        count = parts.get(i, 1)
        if rng.start != EARLIEST and rng.end <= rng.start:
            continue  # nothing to read (a new partition whose records are all deleted)
        if count == 1:
            out.append(rng)
            continue
        length = lengths[i]
        for k in range(count):
            start = rng.start + length * k // count
            end = rng.start + length * (k + 1) // count
            out.append(replace(rng, start=start, end=end))
    return out
