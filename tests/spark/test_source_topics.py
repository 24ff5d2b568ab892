"""Subscribed topics and assigned partitions that do not exist: a batch read fails naming
them (and existing topics with close names); a stream waits for them and says so once."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from source_testing import Collector, produce, run_available_now, values

from spark_mq import TopicPartition
from spark_mq.datasource.broker_view import BrokerView
from spark_mq.datasource.options import parse_source_options
from spark_mq.errors import UnknownTopicOrPartitionError


def _view(mq_dir: Path, **options: str) -> BrokerView:
    return BrokerView(parse_source_options({"path": str(mq_dir), **options}, streaming=True))


def test_a_batch_read_names_the_missing_topics_and_close_ones(mq_dir: Path) -> None:
    produce(mq_dir, "events", 2, 4)
    view = _view(mq_dir, subscribe="events,evnts,nope")
    try:
        with pytest.raises(UnknownTopicOrPartitionError) as info:
            view.partitions(missing="error")
        message = str(info.value)
        assert "topics evnts, nope of the option subscribe do not exist" in message
        assert "(did you mean events?)" in message
        assert info.value.topic == "evnts"
    finally:
        view.close()
    view = _view(mq_dir, assign='{"events": [1, 2, 3], "other": [0]}')
    try:
        with pytest.raises(UnknownTopicOrPartitionError) as info:
            view.partitions(missing="error")
        assert "topic other and partitions events-2, events-3 of the option assign" in str(
            info.value
        )
    finally:
        view.close()


def test_a_stream_waits_for_missing_topics_and_warns_once(
    mq_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    produce(mq_dir, "events", 2, 4)
    view = _view(mq_dir, subscribe="events,later")
    try:
        with caplog.at_level(logging.WARNING, logger="spark_mq.datasource.broker_view"):
            for _ in range(3):
                assert view.partitions() == [TopicPartition("events", p) for p in range(2)]
            produce(mq_dir, "later", 1, 1)
            assert TopicPartition("later", 0) in view.partitions()
        warnings = [r.message for r in caplog.records]
        assert warnings == [
            "topic later of the option subscribe does not exist yet; the stream reads them "
            "from their first offset once they are created"
        ]
    finally:
        view.close()


def test_spark_batch_read_of_a_missing_topic_fails(spark: Any, mq_dir: Path) -> None:
    produce(mq_dir, "present", 1, 3)

    def read(name: str, value: str) -> Any:
        reader = spark.read.format("spark_mq").option("path", str(mq_dir))
        return reader.option(name, value).load()

    with pytest.raises(Exception, match="topic nope of the option subscribe does not exist"):
        read("subscribe", "present,nope").collect()
    with pytest.raises(Exception, match="topic gone of the option assign does not exist"):
        read("assign", '{"gone": [0]}').collect()
    # A pattern matches what exists, nothing is missing.
    assert read("subscribePattern", "no.*").count() == 0
    assert read("subscribe", "present").count() == 3


def test_spark_stream_reads_a_topic_created_after_it_started(
    spark: Any, mq_dir: Path, tmp_path: Path
) -> None:
    # The log exists (reading clients refuse a path that holds none), the topic not yet.
    produce(mq_dir, "other", 1, 1)
    options = {"path": str(mq_dir), "subscribe": "soon", "startingOffsets": "earliest"}
    empty = Collector()
    run_available_now(spark, options, tmp_path / "ckpt", empty)
    assert empty.values == []
    produce(mq_dir, "soon", 2, 6)
    later = Collector()
    run_available_now(spark, options, tmp_path / "ckpt", later)
    assert sorted(later.values) == sorted(values(range(6)))
