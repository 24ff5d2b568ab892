"""Sink column validation (on the driver) and the columnar conversion of Arrow batches (on
the executors), plus option parsing. No Spark session: schemas are plain StructTypes."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_mq.errors import ConfigError, InvalidRecordError, SinkSchemaError
from spark_mq.sink import check_schema, parse_sink_options, to_send_tables

HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def _schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])  # type: ignore[arg-type]


def test_every_accepted_column_passes() -> None:
    schema = _schema(
        ("key", BinaryType()),
        ("value", StringType()),
        ("topic", StringType()),
        ("partition", IntegerType()),
        ("headers", HEADERS),
        ("timestamp", TimestampType()),
    )
    plan = check_schema(schema, topic_option=None)
    assert plan.columns == ("key", "value", "topic", "partition", "headers", "timestamp")
    assert plan.topic_from_column


@pytest.mark.parametrize(
    ("fields", "column", "fragment"),
    [
        ([("key", StringType())], "value", "required column 'value' is missing"),
        (
            [("value", StringType()), ("VALUE", BinaryType())],
            "VALUE",
            "columns 'value' and 'VALUE' are the same column",
        ),
        ([("value", LongType())], "value", "has type bigint, expected string or binary"),
        ([("value", StringType()), ("key", IntegerType())], "key", "has type int"),
        ([("value", StringType()), ("partition", LongType())], "partition", "expected int"),
        ([("value", StringType()), ("timestamp", LongType())], "timestamp", "expected timestamp"),
        ([("Value", LongType())], "Value", "column 'Value' has type bigint"),
        (
            [("value", StringType()), ("headers", ArrayType(StringType()))],
            "headers",
            "expected array<struct<key:string,value:binary>>",
        ),
    ],
)
def test_bad_columns_are_named_and_the_accepted_ones_listed(
    fields: list[tuple[str, object]], column: str, fragment: str
) -> None:
    with pytest.raises(SinkSchemaError) as info:
        check_schema(_schema(*fields), topic_option="t")
    assert info.value.column == column
    assert fragment in str(info.value)
    assert "value (string or binary); key (string or binary); topic (string)" in str(info.value)


def test_a_topic_is_needed_from_the_option_or_a_column() -> None:
    with pytest.raises(SinkSchemaError, match=r'option\("topic", NAME\) or a topic column'):
        check_schema(_schema(("value", StringType())), topic_option=None)


def test_rows_are_grouped_by_topic_in_order() -> None:
    plan = check_schema(
        _schema(("topic", StringType()), ("value", StringType())), topic_option=None
    )
    batch = pa.record_batch(
        {"topic": ["a", "b", "a", "b", "a"], "value": ["1", "2", "3", "4", "5"]}
    )
    tables = dict(to_send_tables(batch, plan))
    assert sorted(tables) == ["a", "b"]
    assert tables["a"].column("value").to_pylist() == ["1", "3", "5"]
    assert tables["b"].column("value").to_pylist() == ["2", "4"]
    assert tables["a"].column_names == ["value"]


def test_the_topic_option_overrides_the_column() -> None:
    plan = check_schema(_schema(("topic", StringType()), ("value", StringType())), topic_option="o")
    batch = pa.record_batch({"topic": ["a", "b"], "value": ["1", "2"]})
    [(topic, table)] = to_send_tables(batch, plan)
    assert topic == "o" and table.num_rows == 2


def test_a_null_topic_is_refused() -> None:
    plan = check_schema(
        _schema(("topic", StringType()), ("value", StringType())), topic_option=None
    )
    batch = pa.record_batch({"topic": ["a", None], "value": ["1", "2"]})
    with pytest.raises(InvalidRecordError, match="null topic"):
        to_send_tables(batch, plan)


def test_null_timestamps_become_now() -> None:
    plan = check_schema(
        _schema(("value", StringType()), ("timestamp", TimestampType())), topic_option="t"
    )
    stamps = pa.array([1_000_000, None], pa.timestamp("us", tz="UTC"))
    batch = pa.record_batch({"value": ["1", "2"], "timestamp": stamps})
    [(_, table)] = to_send_tables(batch, plan)
    assert table.column("timestamp").null_count == 0
    assert table.column("timestamp")[0].value == 1_000_000


def test_options_are_parsed_and_checked() -> None:
    opts = parse_sink_options(
        {
            "PATH": "/data/mq",
            "topic": "out",
            "compression.type": "zstd",
            "partitioner": "round_robin",
            "batch.size": "65536",
            "linger.ms": "20",
            "kafka.max.request.size": "2097152",
            "exactlyonce": "false",
            "sink.id": "copier",
            "checkpointlocation": "/ckpt",
        }
    )
    assert opts.endpoint == {"path": "/data/mq"}
    assert (opts.topic, opts.exactly_once, opts.sink_id) == ("out", False, "copier")
    assert opts.producer_settings == {
        "max.request.size": "2097152",
        "compression.type": "zstd",
        "partitioner": "round_robin",
        "batch.size": "65536",
        "linger.ms": "20",
        "transaction.timeout.ms": "900000",  # the sink's default, not the producer's 60 s
    }
    own = parse_sink_options({"path": "/d", "kafka.transaction.timeout.ms": "120000"})
    assert own.producer_settings == {"transaction.timeout.ms": "120000"}


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({}, 'needs exactly one of .option("path"'),
        ({"path": "/d", "compression.type": "brotli"}, "compression.type"),
        ({"path": "/d", "partitioner": "hash"}, "partitioner must be one of"),
        ({"path": "/d", "linger.ms": "soon"}, "linger.ms"),
        ({"path": "/d", "exactlyOnce": "maybe"}, "exactlyOnce must be true or false"),
        ({"path": "/d", "kafka.transactional.id": "x"}, "set by the spark_mq sink itself"),
        ({"path": "/d", "kafka.lingerms": "5"}, "did you mean 'linger.ms'"),
        ({"path": "/d", "sink.id": " "}, "sink.id must be 1-200 printable"),
        ({"path": "/d", "sink.id": "team/copier"}, "must not contain '/'"),
        ({"path": "/d", "sink.id": "spark-batch"}, "must not be 'spark-batch'"),
    ],
)
def test_bad_options_raise_config_errors(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_sink_options(options)
    assert fragment in str(info.value)


def test_misspelt_options_are_refused_and_others_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A typo of an accepted name would silently leave its default in force: refused.
    for typo, meant in (("compresion.type", "compression.type"), ("exactlyOnc", "exactlyOnce")):
        with pytest.raises(ConfigError, match=f"did you mean '{meant}'"):
            parse_sink_options({"path": "/d", typo: "lz4"})
    with caplog.at_level(logging.WARNING, logger="spark_mq.sink.options"):
        parse_sink_options({"path": "/d", "queryName": "q", "startingOffsets": "earliest"})
    assert "the spark_mq sink ignores option 'queryName'" in caplog.text
    assert "ignores option 'startingOffsets'; it is an option of the spark_mq source" in (
        caplog.text
    )


def test_other_columns_are_ignored_and_names_match_in_any_case() -> None:
    # The source's own schema, as a mirror job writes it back.
    from spark_mq.datasource.schema import spark_schema

    plan = check_schema(spark_schema(True), topic_option=None)
    assert plan.columns == ("key", "value", "topic", "partition", "timestamp", "headers")
    assert plan.ignored == ("offset", "timestampType")
    upper = check_schema(
        _schema(("n", LongType()), ("VALUE", StringType()), ("Key", StringType())),
        topic_option="t",
    )
    assert (upper.columns, upper.positions, upper.ignored) == (("value", "key"), (1, 2), ("n",))
    batch = pa.record_batch(
        {"n": pa.array([7, 8], pa.int64()), "VALUE": ["1", "2"], "Key": ["a", None]}
    )
    [(topic, table)] = to_send_tables(batch, upper)
    assert topic == "t"
    assert table.column_names == ["value", "key"]
    assert table.column("value").to_pylist() == ["1", "2"]
    assert table.column("key").to_pylist() == ["a", None]
    with pytest.raises(InvalidRecordError, match="expected 3 columns"):
        to_send_tables(pa.record_batch({"VALUE": ["1"]}), upper)


def test_ignored_columns_are_logged_once_with_typos_as_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from spark_mq.sink.writers import log_ignored_columns

    with caplog.at_level(logging.INFO, logger="spark_mq.sink.writers"):
        log_ignored_columns(("offset", "timestampType"))
        log_ignored_columns(("offset", "timestampType"))
        log_ignored_columns(("partiton",))
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(infos) == 1 and "ignores the columns offset, timestampType" in infos[0].message
    assert len(warnings) == 1
    assert "'partiton' (did you mean 'partition'?)" in warnings[0].message


def test_docstring_examples_run() -> None:
    import doctest

    import spark_mq.sink.columns
    import spark_mq.sink.options

    for module in (spark_mq.sink.options, spark_mq.sink.columns):
        result = doctest.testmod(module)
        assert result.attempted and result.failed == 0, module.__name__
