"""Options, offsets and schema of the Spark source, without Spark: parsing and its errors,
the offset JSON, the sharing of maxOffsetsPerTrigger, and the Arrow conversion."""

from __future__ import annotations

import itertools
import logging
from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.client.records import CONSUMER_SCHEMA, TopicPartition
from spark_mq.datasource.offsets import (
    PartitionRange,
    ReadSettings,
    from_json,
    plan_ranges,
    split_by_backlog,
    split_ranges,
    to_json,
)
from spark_mq.datasource.options import EARLIEST, parse_duration_ms, parse_source_options
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


def test_tls_options_reach_every_client_of_source_and_sink() -> None:
    """kafka.security.protocol and kafka.ssl.* go with the broker's address: to the task
    consumers and producers and to the driver's Admin (which reads options.endpoint)."""
    from spark_mq.client.config import AdminConfig
    from spark_mq.sink.options import parse_sink_options

    tls = {
        "kafka.bootstrap.servers": "h1:9093",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.ca.location": "/etc/ca.pem",
        "kafka.ssl.endpoint.identification.algorithm": "",
    }
    source = parse_source_options({"subscribe": "t", **tls}, streaming=True)
    sink = parse_sink_options({"topic": "t", **tls})
    for props in (source.consumer_properties(), sink.producer_props(), source.endpoint):
        assert props["security.protocol"] == "SSL"
        assert props["ssl.ca.location"] == "/etc/ca.pem"
        assert props["ssl.endpoint.identification.algorithm"] == ""
    admin = AdminConfig.from_properties(dict(sink.endpoint))
    assert admin.security_protocol == "SSL" and admin.ssl_ca_location == "/etc/ca.pem"


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


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({**BASE, "minPartitions": "abc"}, "option minPartitions='abc' is not valid"),
        ({**BASE, "minPartitions": "0"}, "option minPartitions='0'"),
        ({**BASE, "maxRecordsPerPartition": "-5"}, "option maxRecordsPerPartition='-5'"),
        ({**BASE, "startingoffset": "earliest"}, "did you mean 'startingOffsets'?"),
        ({**BASE, "subscibe": "t"}, "did you mean 'subscribe'?"),
        ({**BASE, "maxOffsetPerTrigger": "5"}, "did you mean 'maxOffsetsPerTrigger'?"),
        ({**BASE, "fetchOffset.numRetries": "abc"}, "option fetchOffset.numRetries='abc'"),
        ({**BASE, "fetchOffset.retryIntervalMs": "-1"}, "fetchOffset.retryIntervalMs"),
        ({**BASE, "groupIdPrefix": " "}, "option groupIdPrefix"),
    ],
)
def test_bad_values_and_misspelt_names_are_refused(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_source_options(options, streaming=False)
    assert fragment in str(info.value)


def test_split_options_are_parsed() -> None:
    opts = parse_source_options(
        {**BASE, "minpartitions": "8", "MAXRECORDSPERPARTITION": "1000"}, streaming=False
    )
    assert (opts.min_partitions, opts.max_records_per_partition) == (8, 1000)
    plain = parse_source_options(BASE, streaming=False)
    assert (plain.min_partitions, plain.max_records_per_partition) == (None, None)


def test_other_unknown_names_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="spark_mq.datasource"):
        parse_source_options(
            {
                **BASE,
                "queryName": "q",
                "topic": "out",
                "groupIdPrefix": "spark-kafka-source",
                "fetchOffset.numRetries": "3",
                "fetchOffset.retryIntervalMs": "10",
            },
            streaming=True,
        )
    text = caplog.text
    assert "ignores option 'queryName'" in text
    assert "it accepts path, bootstrap.servers" in text
    assert "ignores option 'topic'; it is an option of the spark_mq sink" in text
    for name in ("groupIdPrefix", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs"):
        assert f"option {name} is accepted for compatibility" in text


def test_sink_option_names_known_to_the_source_match_the_sink() -> None:
    from spark_mq.datasource.options import _SINK_ONLY_OPTIONS, SOURCE_OPTIONS
    from spark_mq.sink.options import SINK_OPTIONS

    assert set(_SINK_ONLY_OPTIONS) == set(SINK_OPTIONS) - set(SOURCE_OPTIONS)


def test_unknown_kafka_keys_suggest_and_list_only_accepted_keys() -> None:
    with pytest.raises(ConfigError) as info:
        parse_source_options({**BASE, "kafka.max.partition.fetch.byte": "1"}, streaming=True)
    message = str(info.value)
    assert "did you mean 'kafka.max.partition.fetch.bytes'?" in message
    listed = message.split("the source takes as kafka.<key>: ")[1].split(", ")
    assert "max.partition.fetch.bytes" in listed and "check.crcs" in listed
    for refused in ("group.id", "enable.auto.commit", "auto.offset.reset", "path"):
        assert refused not in listed
    # The closest consumer key is refused by the source: it is not suggested.
    with pytest.raises(ConfigError) as info:
        parse_source_options({**BASE, "kafka.enable.auto.comit": "true"}, streaming=True)
    assert "enable.auto.commit" not in str(info.value)
    with pytest.raises(ConfigError, match="values are always read as bytes"):
        parse_source_options({**BASE, "kafka.value.deserializer": "x"}, streaming=True)


def _ranges(*spans: tuple[int, int]) -> list[PartitionRange]:
    settings = ReadSettings({}, False, True, 1000)
    return [PartitionRange("t", p, start, end, settings) for p, (start, end) in enumerate(spans)]


def _check_pieces(ranges: list[PartitionRange], pieces: list[PartitionRange]) -> None:
    """The pieces of each range cover it exactly, in order, with lengths within one."""
    for rng in ranges:
        mine = [p for p in pieces if p.tp == rng.tp]
        if rng.start == EARLIEST:
            assert mine == [rng]
            continue
        assert mine[0].start == rng.start and mine[-1].end == rng.end
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))
        lengths = [p.end - p.start for p in mine]
        assert min(lengths) >= 1 and max(lengths) - min(lengths) <= 1


@settings(max_examples=300, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(0, 50), st.integers(1, 400)), min_size=1, max_size=6),
    min_partitions=st.none() | st.integers(1, 40),
    max_records=st.none() | st.integers(1, 120),
    earliest=st.booleans(),
)
def test_split_ranges_cover_every_range_and_meet_both_options(
    spans: list[tuple[int, int]],
    min_partitions: int | None,
    max_records: int | None,
    earliest: bool,
) -> None:
    ranges = _ranges(*((start, start + length) for start, length in spans))
    if earliest:
        ranges[0] = replace(ranges[0], start=EARLIEST)
    pieces = split_ranges(
        ranges, min_partitions=min_partitions, max_records_per_partition=max_records
    )
    _check_pieces(ranges, pieces)
    assert pieces == split_ranges(
        ranges, min_partitions=min_partitions, max_records_per_partition=max_records
    )
    lengths = [r.end - r.start for r in ranges if r.start != EARLIEST]
    whole = len(ranges) - len(lengths)  # from the log start: length unknown, never split
    if max_records is not None:
        assert all(p.end - p.start <= max_records for p in pieces if p.start != EARLIEST)
    needed = whole + sum(-(-n // (max_records or n)) for n in lengths)
    if min_partitions is not None:
        # Exactly as many as minPartitions asks, unless the offsets run out first.
        needed = max(needed, min(min_partitions, whole + sum(lengths)))
    assert len(pieces) == needed


def test_min_partitions_splits_the_longest_ranges_first() -> None:
    ranges = _ranges((0, 1000), (0, 10), (5, 105))
    pieces = split_ranges(ranges, min_partitions=12)
    counts = [sum(1 for p in pieces if p.partition == i) for i in range(3)]
    assert counts == [10, 1, 1]
    assert len(split_ranges(ranges, min_partitions=2)) == 3  # already enough: unchanged
    one_each = split_ranges(_ranges((0, 3)), min_partitions=10)
    assert [(p.start, p.end) for p in one_each] == [(0, 1), (1, 2), (2, 3)]
    assert [(p.start, p.end) for p in split_ranges(ranges, max_records_per_partition=400)] == [
        (0, 333),
        (333, 666),
        (666, 1000),
        (0, 10),
        (5, 105),
    ]


def test_docstring_examples_run() -> None:
    import doctest

    import spark_mq.datasource.connection
    import spark_mq.datasource.offsets
    import spark_mq.datasource.option_names
    import spark_mq.datasource.options

    for module in (
        spark_mq.datasource.connection,
        spark_mq.datasource.offsets,
        spark_mq.datasource.option_names,
        spark_mq.datasource.options,
    ):
        result = doctest.testmod(module)
        assert result.attempted and result.failed == 0, module.__name__
