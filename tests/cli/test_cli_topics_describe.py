"""``spark-mq topics describe`` filters on one node, as kafka-topics.sh's do: nothing is
under-replicated or unavailable on a healthy broker, so both filters print nothing; a
partition whose log cannot be opened (offline) has no leader and an empty ISR, so it is both
unavailable and under-replicated, and the filters print its line alone, without the topic
line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_mq import Admin, Producer
from spark_mq.broker.local import stop_broker


def test_filters_print_nothing_on_a_healthy_single_node(cli: Any, mq_path: str, topic: str) -> None:
    p = ("--path", mq_path)
    assert cli("topics", "create", topic, "--partitions", "2", *p).code == 0
    for flag in ("--under-replicated-partitions", "--unavailable-partitions"):
        r = cli("topics", "describe", topic, flag, *p)
        assert (r.code, r.out) == (0, "")
        r = cli("topics", "describe", flag, "--json", *p)
        assert (r.code, json.loads(r.out)) == (0, [])
    # Without a topic: every topic, each with its topic line.
    out = cli("topics", "describe", *p).out
    assert f"Topic: {topic}\tTopicId: " in out and f"\tTopic: {topic}\tPartition: 1\t" in out


def test_an_offline_partition_is_unavailable_and_under_replicated(cli: Any, tmp_path: Path) -> None:
    directory = tmp_path / "mq"
    with Admin(path=directory) as admin:
        admin.create_topic("t", partitions=2)
    with Producer(path=directory) as producer:
        for partition in (0, 1):
            producer.send("t", b"x", partition=partition).get(timeout=30)
    stop_broker(directory)
    # t-1's segment cannot be opened any more: a directory stands where the file was.
    segment = directory / "t-1" / "00000000000000000000.log"
    segment.unlink()
    segment.mkdir()

    p = ("--path", str(directory))
    try:
        for flag in ("--unavailable-partitions", "--under-replicated-partitions"):
            r = cli("topics", "describe", "t", flag, *p)
            assert r.code == 0, r.err
            (line,) = r.out.splitlines()
            assert line.startswith("\tTopic: t\tPartition: 1\tLeader: none\tReplicas: ")
            assert "\tIsr: \t" in line and "\tOffline: " in line
            assert "HighWatermark" not in line  # no leader to ask
        full = cli("topics", "describe", "t", "--json", *p)
        parts = json.loads(full.out)["partitions"]
        assert [q["leader"] >= 0 for q in parts] == [True, False]
        assert parts[0]["high_watermark"] == 1 and parts[1]["high_watermark"] is None
    finally:
        stop_broker(directory)
