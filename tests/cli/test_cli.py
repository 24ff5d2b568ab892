"""``spark-mq`` run in this process (``spark_mq.cli.main``) against a real local broker."""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Iterator

import pytest

from spark_mq import __version__
from spark_mq.cli import _handlers, build_parser
from spark_mq.cli.common import EXIT_ERROR, EXIT_USAGE


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def without_timestamps(records: list[dict]) -> list[dict]:
    for r in records:
        assert isinstance(r.pop("timestamp"), int)
    return records


# ---------------------------------------------------------------------------------------------
# Usage


def test_version_and_help(cli):
    r = cli("--version")
    assert (r.code, r.out) == (0, f"spark-mq {__version__}\n")
    r = cli("topics", "create", "--help")
    assert r.code == 0 and "--partitions" in r.out and "--bootstrap-server" in r.out


def _runnable_commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command line that runs something (``topics create``, ``produce``, ...)."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        yield words, parser
        return
    for name, child in subparsers[0].choices.items():
        yield from _runnable_commands(child, (*words, name))


def test_every_command_names_a_handler_main_can_find():
    handlers = _handlers()
    commands = dict(_runnable_commands(build_parser()))
    assert ("topics", "create") in commands and ("log", "verify") in commands
    for words, parser in commands.items():
        name = parser.get_default("handler")
        assert name in handlers, f"spark-mq {' '.join(words)}: handler {name!r} is not in HANDLERS"
        assert handlers[name].__name__ == name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topics", "list", "--path", "/x", "--bootstrap-server", "h:1"], "not both"),
        (["topics", "list"], "--path DIR"),
        (["topics", "list", "--path", "/x", "--colour"], "unrecognized arguments: --colour"),
        (["topics"], "required: ACTION"),
        (["topics", "create", "t", "--path", "/x", "--partitions", "0"], "expected 1 or more"),
        (["topics", "create", "t", "--path", "/x", "--config", "retention.ms"], "KEY=VALUE"),
        (["consume", "t", "--path", "/x", "--offset", "3"], "--offset needs --partition"),
        (["consume", "t", "--path", "/x", "--json", "--format", "csv"], "cannot be combined"),
        (["topics", "alter", "t", "--path", "/x"], "say what to change"),
        (["broker", "stop", "--bootstrap-server", "h:1"], "--path DIR"),
        (["produce", "t", "--path", "/x", "--key-separator", ""], "must not be empty"),
    ],
)
def test_usage_errors_exit_2_with_one_line(cli, args, message):
    r = cli(*args)
    assert r.code == EXIT_USAGE
    error_lines = [line for line in r.err.splitlines() if line.startswith("spark-mq: error:")]
    assert len(error_lines) == 1 and message in error_lines[0]
    assert "Traceback" not in r.err and r.out == ""


def test_path_from_the_environment(cli, mq_path, monkeypatch, topic):
    monkeypatch.setenv("SPARK_MQ_PATH", mq_path)
    assert cli("topics", "create", topic).code == 0
    assert topic in cli("topics", "list").out


def test_bad_client_property_names_the_closest_key(cli, mq_path, topic):
    r = cli("produce", topic, "--path", mq_path, "-X", "lingr.ms=5", stdin=b"x\n")
    assert r.code == EXIT_USAGE
    assert "linger.ms" in r.err and "Traceback" not in r.err


# ---------------------------------------------------------------------------------------------
# topics


def test_topics_create_list_describe_alter_delete(cli, mq_path, topic):
    p = ("--path", mq_path)
    r = cli("topics", "create", topic, "--partitions", "3", "--config", "retention.ms=86400000", *p)
    assert (r.code, r.out) == (0, f"Created topic {topic} with 3 partitions.\n")

    listed = json.loads(cli("topics", "list", "--json", *p).out)
    assert {"topic": topic, "partitions": 3} in listed
    table = cli("topics", "list", *p).out.splitlines()
    assert table[0].split() == ["topic", "partitions"]
    assert [topic, "3"] in [line.split() for line in table[2:]]

    doc = json.loads(cli("topics", "describe", topic, "--json", *p).out)
    assert doc["topic"] == topic and doc["configs"] == {"retention.ms": "86400000"}
    assert (doc["partition_count"], doc["replication_factor"]) == (3, 1)
    assert [p_["partition"] for p_ in doc["partitions"]] == [0, 1, 2]
    assert {(p_["log_start_offset"], p_["high_watermark"]) for p_ in doc["partitions"]} == {(0, 0)}
    # kafka-topics.sh --describe's layout: the topic line, then one line per partition.
    lines = cli("topics", "describe", topic, *p).out.splitlines()
    assert lines[0] == (
        f"Topic: {topic}\tTopicId: {doc['topic_id']}\tPartitionCount: 3\t"
        "ReplicationFactor: 1\tConfigs: retention.ms=86400000"
    )
    leader = doc["partitions"][0]["leader"]
    for index, line in enumerate(lines[1:]):
        assert line.startswith(
            f"\tTopic: {topic}\tPartition: {index}\tLeader: {leader}\t"
            f"Replicas: {leader}\tIsr: {leader}\tLeaderEpoch: "
        )
        assert line.endswith("\tLogStartOffset: 0\tHighWatermark: 0\tLastStableOffset: 0")
    assert len(lines) == 4 and len(doc["topic_id"]) == 32

    r = cli("topics", "alter", topic, "--partitions", "5", "--config", "cleanup.policy=compact", *p)
    assert r.code == 0 and "partitions 3 -> 5" in r.out
    r = cli("topics", "alter", topic, "--delete-config", "retention.ms", "--json", *p)
    assert json.loads(r.out) == {
        "topic": topic,
        "partitions": 5,
        "configs": {"cleanup.policy": "compact"},
    }

    assert cli("topics", "delete", topic, *p).out == f"Deleted topic {topic}.\n"
    assert topic not in cli("topics", "list", *p).out


def test_topics_errors_and_idempotent_flags(cli, mq_path, topic):
    p = ("--path", mq_path)
    assert cli("topics", "create", topic, *p).code == 0
    r = cli("topics", "create", topic, *p)
    assert r.code == EXIT_ERROR and "spark-mq: error:" in r.err and "Traceback" not in r.err
    r = cli("topics", "create", topic, "--if-not-exists", "--json", *p)
    assert (r.code, json.loads(r.out)) == (0, {"topic": topic, "partitions": 1, "created": False})
    r = cli("topics", "alter", topic, "--partitions", "1", *p)
    assert r.code == 0 and "already has 1 partition" in r.out
    r = cli("topics", "alter", topic, "--partitions", "1", "--config", "retention.ms=-5", *p)
    assert r.code != 0 and "retention.ms" in r.err
    assert cli("topics", "delete", topic, *p).code == 0
    r = cli("topics", "delete", topic, *p)
    assert r.code == EXIT_ERROR and topic in r.err
    assert cli("topics", "delete", topic, "--if-exists", *p).code == 0
    r = cli("topics", "describe", "no-such-topic", *p)
    assert r.code == EXIT_ERROR and r.err.startswith("spark-mq: error: ")
    r = cli("topics", "create", "bad name!", *p)
    assert r.code == EXIT_USAGE and "bad name!" in r.err


# ---------------------------------------------------------------------------------------------
# produce and consume


def test_produce_keys_and_headers_then_consume_json(cli, mq_path, topic):
    p = ("--path", mq_path)
    cli("topics", "create", topic, *p)
    data = "k1:hello\nk2:wörld\n:no key\nk4:with:colon\n".encode()
    r = cli(
        "produce", topic, "--key-separator", ":", "--header", "src=cli", "--header", "n=1",
        "--json", *p, stdin=b"k0:first\r\n" + data,
    )  # fmt: skip
    assert r.code == 0, r.err
    summary = json.loads(r.out)
    assert summary["records"] == 5
    assert summary["partitions"] == [
        {"partition": 0, "records": 5, "first_offset": 0, "last_offset": 4}
    ]
    # The last line ("\n" alone) has no separator: the command fails on it, after the
    # records before it were sent.
    r = cli("produce", topic, "--key-separator", ":", *p, stdin=b"k5:x\n\n")
    assert r.code == EXIT_USAGE and "line 2 has no key separator" in r.err

    r = cli("consume", topic, "--from-beginning", "--json", *p)
    assert r.code == 0 and "Consumed 6 records." in r.err
    headers = [["src", "cli"], ["n", "1"]]
    expected = [
        ("k0", "first", headers),
        ("k1", "hello", headers),
        ("k2", "wörld", headers),
        ("", "no key", headers),
        ("k4", "with:colon", headers),
        ("k5", "x", []),
    ]
    assert without_timestamps(json_lines(r.out)) == [
        {"topic": topic, "partition": 0, "offset": i, "key": k, "value": v, "headers": h}
        for i, (k, v, h) in enumerate(expected)
    ]


def test_produce_from_file_to_a_partition_and_consume_text(cli, mq_path, topic, tmp_path):
    p = ("--path", mq_path)
    cli("topics", "create", topic, "--partitions", "2", *p)
    source = tmp_path / "lines.txt"
    source.write_bytes(b"a\nb\n\xff\xfe binary\n")
    r = cli("produce", topic, "--file", str(source), "--partition", "1", "--acks", "1", *p)
    assert r.code == 0 and f"Produced 3 records to {topic}." in r.out
    r = cli("consume", topic, "--from-beginning", "--print-offset", "--print-key", *p)
    assert r.out_bytes == b"1:0\tnull\ta\n1:1\tnull\tb\n1:2\tnull\t\xff\xfe binary\n"
    r = cli("consume", topic, "--partition", "1", "--offset", "1", "--format", "csv", *p)
    lines = r.out.splitlines()
    assert lines[0] == "topic,partition,offset,timestamp,key,value,headers"
    assert [line.split(",")[:3] for line in lines[1:]] == [[topic, "1", "1"], [topic, "1", "2"]]
    assert lines[2].split(",")[5] == "base64:" + base64.b64encode(b"\xff\xfe binary").decode()
    r = cli("consume", topic, "--partition", "0", "--from-beginning", *p)
    assert (r.code, r.out) == (0, "")
    r = cli("produce", topic, "--file", str(tmp_path / "missing.txt"), *p)
    assert r.code == EXIT_ERROR and "missing.txt" in r.err and "Traceback" not in r.err


def test_consume_max_messages_and_default_start_at_the_end(cli, mq_path, topic):
    p = ("--path", mq_path)
    cli("topics", "create", topic, "--partitions", "3", *p)
    lines = b"".join(b"m%d\n" % i for i in range(30))
    assert cli("produce", topic, *p, stdin=lines).code == 0
    r = cli("consume", topic, "--from-beginning", "--max-messages", "7", *p)
    assert r.code == 0 and len(r.out.splitlines()) == 7 and "Consumed 7 records." in r.err
    r = cli("consume", topic, "--from-beginning", *p)
    assert sorted(r.out.splitlines()) == sorted(f"m{i}" for i in range(30))
    r = cli("consume", topic, *p)  # from the end, without --follow: nothing to print
    assert (r.code, r.out) == (0, "")
    r = cli("consume", topic, "--follow", "--timeout-ms", "300", "--from-beginning", *p)
    assert r.code == 0 and len(r.out.splitlines()) == 30


def test_consume_errors(cli, mq_path, topic):
    p = ("--path", mq_path)
    r = cli("consume", "no-such-topic", "--from-beginning", *p)
    assert r.code == EXIT_ERROR
    assert r.err.splitlines() == [
        "spark-mq: error: topic 'no-such-topic' does not exist; create it with: "
        "spark-mq topics create no-such-topic"
    ]
    cli("topics", "create", topic, *p)
    r = cli("consume", topic, "--partition", "4", "--from-beginning", *p)
    assert r.code == EXIT_ERROR and "has no partition 4" in r.err


# ---------------------------------------------------------------------------------------------
# perf


@pytest.mark.parametrize("batch", [False, True])
def test_perf_produce_then_consume_print_their_summary(cli, mq_path, topic, batch):
    p = ("--path", mq_path)
    cli("topics", "create", topic, "--partitions", "2", *p)
    flag = ["--batch"] if batch else []
    r = cli(
        "perf", "produce", topic, "--num-records", "3000", "--record-size", "50",
        "--batch-records", "1000", "--json", *flag, *p,
    )  # fmt: skip
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert s["operation"] == "produce" and s["records"] == 3000
    assert s["api"] == ("send_batch" if batch else "send")
    assert s["records_per_sec"] > 0 and s["mb_per_sec"] > 0
    assert set(s["latency_ms"]) == {"avg", "p50", "p95", "p99", "p99.9", "max"}
    assert 0 < s["latency_ms"]["p50"] <= s["latency_ms"]["max"]
    assert r.err == ""  # no progress bar: stderr is not a terminal

    r = cli("perf", "consume", topic, "--num-records", "3000", "--progress", *flag, *p)
    assert r.code == 0, r.err
    lines = dict(line.split(":", 1) for line in r.out.splitlines())
    assert lines["records"].strip() == "3000"
    assert lines["api"].strip() == ("poll_batch" if batch else "poll")
    for key in ("records/s", "MB/s", "latency ms p50", "latency ms p99", "latency ms max"):
        assert key in lines
    assert float(lines["MB/s"].replace(",", "")) > 0
    assert "3000/3000" in r.err  # --progress draws the bar on stderr anyway


def test_perf_consume_stops_when_nothing_arrives(cli, mq_path, topic):
    p = ("--path", mq_path)
    cli("topics", "create", topic, *p)
    cli("produce", topic, *p, stdin=b"a\nb\n")
    r = cli("perf", "consume", topic, "--num-records", "10", "--timeout-ms", "200", "--json", *p)
    assert r.code == 0 and json.loads(r.out)["records"] == 2
    assert "read 2 of 10 records" in r.err


def test_perf_consume_unknown_topic_and_unreachable_broker(cli, mq_path):
    r = cli("perf", "consume", "no-such", "--num-records", "5", "--path", mq_path)
    assert r.code == EXIT_ERROR and "topic 'no-such' does not exist" in r.err
    r = cli("topics", "list", "--bootstrap-server", "127.0.0.1:1")
    assert r.code == EXIT_ERROR
    assert r.err.startswith("spark-mq: error: cannot connect to broker at 127.0.0.1:1")
    assert "Traceback" not in r.err


# ---------------------------------------------------------------------------------------------
# broker


def test_broker_status_of_a_running_and_of_an_unused_directory(cli, mq_path, tmp_path):
    r = cli("broker", "status", "--path", mq_path, "--json")
    doc = json.loads(r.out)
    assert r.code == 0 and doc["state"] == "serving" and doc["pid"] > 0
    assert any(a.startswith("unix:") for a in doc["addresses"])
    r = cli("broker", "status", "--path", str(tmp_path / "nothing"))
    assert r.code == EXIT_ERROR and "not running" in r.out
    r = cli("broker", "stop", "--path", str(tmp_path / "nothing"))
    assert (r.code, r.out) == (0, f"No broker runs for {tmp_path / 'nothing'}.\n")


def test_broker_status_over_tcp(cli, mq_path, tmp_path):
    # The embedded broker listens on TCP only when asked.
    doc = json.loads(cli("broker", "status", "--path", mq_path, "--json").out)
    assert all(a.startswith("unix:") for a in doc["addresses"])
    path = str(tmp_path / "with-tcp")
    listeners = "listeners=UNIX://,PLAINTEXT://127.0.0.1:0"
    r = cli("broker", "start", "--detach", "--path", path, "--override", listeners, "--json")
    assert r.code == 0
    tcp = next(a for a in json.loads(r.out)["addresses"] if not a.startswith("unix:"))
    r = cli("broker", "status", "--bootstrap-server", tcp, "--json")
    assert r.code == 0 and json.loads(r.out)["state"] == "serving"
    r = cli("topics", "list", "--bootstrap-server", tcp)
    assert r.code == 0
