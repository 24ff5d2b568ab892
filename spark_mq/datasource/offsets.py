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

>>> to_json({TopicPartition("a", 1): 7, TopicPartition("a", 0): 3})
{'a': {'0': 3, '1': 7}}
>>> split_by_backlog({TopicPartition("a", 0): 10, TopicPartition("a", 1): 30}, 9)
{TopicPartition(topic='a', partition=0): 2, TopicPartition(topic='a', partition=1): 7}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql.datasource import InputPartition

from spark_mq.client.records import TopicPartition
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
