"""Options, offsets and schema of the Spark source, without Spark: parsing and its errors,
the offset JSON, the sharing of maxOffsetsPerTrigger, and the Arrow conversion."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_mq.client.records import CONSUMER_SCHEMA, TopicPartition
from spark_mq.datasource.offsets import (
    PartitionRange,
    ReadSettings,
    from_json,
    plan_ranges,
    split_by_backlog,
    to_json,
)
from spark_mq.datasource.options import parse_duration_ms, parse_source_options
from spark_mq.datasource.schema import arrow_schema, spark_schema, to_spark_batches
from spark_mq.errors import ConfigError

BASE = {"path": "/tmp/mq", "subscribe": "t"}


def test_defaults_follow_spark_kafka_source() -> None:
    stream = parse_source_options(BASE, streaming=True)
    batch = parse_source_options(BASE, streaming=False)
    assert stream.starting.kind == "latest"
    assert batch.starting.kind == "earliest"
    assert batch.ending.kind == "latest"
    assert stream.isolation_level == "read_committed"
    assert stream.fail_on_data_loss and not stream.include_headers
    assert stream.max_trigger_delay_ms == 15 * 60_000


def test_option_names_are_case_insensitive() -> None:
    opts = parse_source_options(
        {"PATH": "/d", "SUBSCRIBEPATTERN": "e-.*", "maxoffsetspertrigger": "5"}, streaming=True
    )
    assert opts.subscription.kind == "subscribePattern"
    assert opts.subscription.matches("e-1") and not opts.subscription.matches("x-e-1")
    assert opts.max_offsets_per_trigger == 5


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"path": "/d"}, "exactly one of the options assign, subscribe"),
        ({**BASE, "assign": '{"t": [0]}'}, "got assign, subscribe"),
        ({"subscribe": "t"}, 'exactly one of .option("path"'),
        ({**BASE, "assign": "x"}, None),
        ({"path": "/d", "assign": '{"t": ["0"]}'}, "assign="),
        ({**BASE, "subscribePattern": "("}, None),
        ({**BASE, "startingOffsets": "newest"}, "startingOffsets"),
        ({**BASE, "startingOffsets": '{"t": {"0": -3}}'}, "t-0: -3"),
        ({**BASE, "failOnDataLoss": "yes"}, "use true or false"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, "positive whole number"),
        ({**BASE, "isolation.level": "snapshot"}, "read_committed or read_uncommitted"),
        ({**BASE, "maxTriggerDelay": "soon"}, "duration"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "first"}, "error or latest"),
        ({**BASE, "kafka.group.id": "g"}, "use the option group.id"),
        ({**BASE, "kafka.max.partition.fetch.byte": "1"}, "did you mean"),
        ({**BASE, "endingOffsets": "latest"}, "for batch reads"),
    ],
)
def test_bad_options_raise_config_error(options: dict[str, str], fragment: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        parse_source_options(options, streaming=True)
    if fragment:
        assert fragment in str(info.value)


def test_batch_rules_on_offsets() -> None:
    with pytest.raises(ConfigError, match="cannot start at latest"):
        parse_source_options({**BASE, "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(ConfigError, match="cannot end at earliest"):
        parse_source_options({**BASE, "endingOffsets": "earliest"}, streaming=False)
    with pytest.raises(ConfigError, match=r"cannot end at -2"):
        parse_source_options({**BASE, "endingOffsets": '{"t": {"0": -2}}'}, streaming=False)


def test_timestamp_options_take_precedence_like_spark() -> None:
    opts = parse_source_options(
        {
            **BASE,
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"t": {"0": 5}}',
            "startingTimestamp": "7",
        },
        streaming=True,
    )
    assert (opts.starting.kind, opts.starting.timestamp_ms) == ("timestamp", 7)
    opts = parse_source_options(
        {**BASE, "startingOffsetsByTimestamp": '{"t": {"0": 5}}'}, streaming=True
    )
    assert opts.starting.kind == "timestamps"
    assert opts.starting.as_dict() == {("t", 0): 5}


def test_kafka_prefixed_options_reach_the_consumer() -> None:
    opts = parse_source_options(
        {
            **BASE,
            "kafka.max.partition.fetch.bytes": "2048",
            "kafka.isolation.level": "read_uncommitted",
        },
        streaming=True,
    )
    props = opts.consumer_properties()
    assert props["max.partition.fetch.bytes"] == "2048"
    assert props["isolation.level"] == "read_uncommitted"
    assert props["auto.offset.reset"] == "none"
    assert props["path"] == "/tmp/mq"


def test_durations() -> None:
    assert parse_duration_ms("d", "250") == 250
    assert parse_duration_ms("d", "30s") == 30_000
    assert parse_duration_ms("d", "15m") == 900_000
    assert parse_duration_ms("d", "2h") == 7_200_000


def test_offsets_json_round_trip_and_errors() -> None:
    offsets = {TopicPartition("b", 0): 4, TopicPartition("a", 10): 2, TopicPartition("a", 2): 9}
    data = to_json(offsets)
    assert list(data) == ["a", "b"]
    assert from_json(data) == offsets
    with pytest.raises(ConfigError):
        from_json({"a": {"x": 1}})
    with pytest.raises(ConfigError):
        from_json({"a": 3})


@pytest.mark.parametrize("budget", [0, 1, 7, 33, 99, 100, 1000])
def test_split_by_backlog_never_exceeds_and_is_proportional(budget: int) -> None:
    backlog = {TopicPartition("t", p): b for p, b in enumerate([0, 1, 10, 33, 56])}
    shares = split_by_backlog(backlog, budget)
    assert sum(shares.values()) == min(budget, sum(backlog.values()))
    for tp, share in shares.items():
        assert 0 <= share <= backlog[tp]
        exact = backlog[tp] * min(budget, 100) / 100
        assert abs(share - exact) < 1


def test_plan_ranges_new_and_recreated_partitions_start_at_log_start() -> None:
    settings = ReadSettings({}, False, True, 1000)
    t0, t1, t2 = (TopicPartition("t", p) for p in range(3))
    ranges = plan_ranges({t0: 5, t1: 9}, {t0: 8, t1: 4, t2: 3}, settings)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 5, 8), (1, -2, 4), (2, -2, 3)]
    assert plan_ranges({t0: 5}, {t0: 5}, settings) == []
    assert isinstance(ranges[0], PartitionRange)


def test_arrow_conversion_matches_the_spark_schema() -> None:
    table = pa.table(
        {
            "topic": ["t", "t"],
            "partition": pa.array([3, 3], pa.int32()),
            "offset": pa.array([7, 8], pa.int64()),
            "timestamp": pa.array([1_700_000_000_123, 1], pa.int64()),
            "timestamp_type": pa.array([0, 1], pa.int8()),
            "key": pa.array([None, b"k"], pa.binary()),
            "value": pa.array([b"a", b"b"], pa.binary()),
            "headers": pa.array(
                [None, [{"key": "h", "value": b"x"}]], CONSUMER_SCHEMA.field("headers").type
            ),
        },
        schema=CONSUMER_SCHEMA,
    )
    for include in (False, True):
        (batch,) = to_spark_batches(table, include)
        assert batch.schema == arrow_schema(include)
        assert [f.name for f in spark_schema(include).fields] == batch.schema.names
    (batch,) = to_spark_batches(table, True)
    assert batch.column("timestamp")[0].value == 1_700_000_000_123_000
    assert batch.column("timestampType").to_pylist() == [0, 1]
    assert batch.column("headers").to_pylist() == [None, [{"key": "h", "value": b"x"}]]
