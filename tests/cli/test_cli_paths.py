"""``--path`` as the commands treat it: reading commands refuse a path that holds no log (and
create nothing), creating ones create it, a file is refused by both; and the help and
validation messages a new user reads first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_mq.broker import broker_status, stop_broker
from spark_mq.cli.common import EXIT_ERROR, EXIT_USAGE
from spark_mq.client.config import AdminConfig, ConsumerConfig, ProducerConfig

READING = [
    ["consume", "t", "--from-beginning"],
    ["topics", "list"],
    ["topics", "describe", "t"],
    ["topics", "alter", "t", "--partitions", "2"],
    ["topics", "delete", "t"],
    ["groups", "list"],
    ["groups", "describe", "g"],
    ["transactions", "list"],
    ["perf", "consume", "t", "--num-records", "1"],
]


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("spark-mq: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("args", READING, ids=lambda a: " ".join(a[:2]))
def test_reading_commands_refuse_a_missing_path_and_create_nothing(cli, tmp_path, args):
    typo = tmp_path / "typo"
    r = cli(*args, "--path", str(typo))
    assert r.code == EXIT_ERROR and r.out == ""
    line = one_error_line(r.err)
    assert f"no log directory at {typo} (it does not exist)" in line
    assert f"spark-mq topics create TOPIC --path {typo}" in line
    assert not typo.exists()


@pytest.mark.parametrize("args", READING[:2], ids=lambda a: " ".join(a[:2]))
def test_reading_commands_refuse_an_empty_directory(cli, tmp_path, args):
    r = cli(*args, "--path", str(tmp_path))
    assert r.code == EXIT_ERROR
    assert "holds no spark_mq log" in one_error_line(r.err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "create", "t"],
        ["produce", "t"],
        ["broker", "start", "--detach"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_creating_commands_create_the_directory(cli, tmp_path, args):
    new = tmp_path / "new" / "mq"
    try:
        r = cli(*args, "--path", str(new), stdin=b"one\n")
        assert r.code == 0, r.err
        assert broker_status(new) is not None
        # Now it holds a log, and reading it works.
        r = cli("topics", "list", "--path", str(new))
        assert r.code == 0, r.err
    finally:
        stop_broker(new)


@pytest.mark.parametrize(
    "args",
    [*READING[:2], ["topics", "create", "t"], ["produce", "t"], ["broker", "start", "--detach"]],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_file_is_not_a_log_directory(cli, tmp_path, args):
    file = tmp_path / "mq"
    file.write_text("not a directory")
    r = cli(*args, "--path", str(file), stdin=b"one\n")
    assert r.code == EXIT_ERROR
    assert f"{file} is a file, not a log directory" in one_error_line(r.err)
    assert file.read_text() == "not a directory"


@pytest.mark.parametrize(
    ("command", "config_class"),
    [
        (["consume", "t"], ConsumerConfig),
        (["produce", "t"], ProducerConfig),
        (["perf", "consume", "t"], ConsumerConfig),
        (["perf", "produce", "t"], ProducerConfig),
        (["topics", "list"], AdminConfig),
    ],
)
def test_the_property_example_in_help_is_a_key_the_client_takes(cli, command, config_class):
    r = cli(*command, "--help")
    assert r.code == 0
    help_text = " ".join(r.out.split())
    example = re.search(r"--command-config\), e\.g\. -X (\S+)=(\S+)", help_text)
    assert example is not None, help_text
    key, value = example.groups()
    config_class.from_properties({"path": "/x", key: value})


@pytest.mark.parametrize("value", ["-3", "0"])
@pytest.mark.parametrize("command", [["topics", "create", "t"], ["topics", "alter", "t"]])
def test_partitions_must_be_one_or_more(cli, command, value):
    r = cli(*command, "--path", "/x", "--partitions", value)
    assert r.code == EXIT_USAGE
    assert f"argument --partitions: expected 1 or more, got {value}" in one_error_line(r.err)


def test_topics_create_takes_the_brokers_num_partitions(cli, tmp_path):
    path = tmp_path / "mq"
    try:
        r = cli(
            "broker", "start", "--detach", "--path", str(path), "--override", "num.partitions=4"
        )
        assert r.code == 0, r.err
        r = cli("topics", "create", "t", "--path", str(path))
        assert (r.code, r.out) == (0, "Created topic t with 4 partitions.\n")
    finally:
        stop_broker(path)


def test_broker_config_shows_sets_and_removes(cli, tmp_path):
    path = tmp_path / "mq"
    r = cli("broker", "config", "--path", str(path))
    assert r.code == EXIT_ERROR and "no log directory" in r.err and not path.exists()
    r = cli(
        "broker",
        "config",
        "--path",
        str(path),
        "--add-config",
        "log.retention.ms=60000",
        "--add-config",
        "num.partitions=2",
    )
    assert (r.code, r.out) == (0, "log.retention.ms=60000\nnum.partitions=2\n")
    r = cli("broker", "config", "--path", str(path), "--delete-config", "num.partitions")
    assert (r.code, r.out) == (0, "log.retention.ms=60000\n")
    r = cli("broker", "config", "--path", str(path), "--add-config", "log.retention.ms=soon")
    assert r.code == EXIT_USAGE and "log.retention.ms must be an integer" in r.err
    r = cli(
        "broker", "config", "--path", str(path), "--delete-config", "log.retention.ms", "--json"
    )
    assert r.code == 0 and '"settings": {}' in r.out
    assert not (Path(path) / "server.properties").exists()
    assert broker_status(path) is None  # configuring starts no broker
