"""``spark-mq consume --group``: each run is a separate process that resumes at the group's
committed offsets, commits what it printed (at --max-messages, at the end, on SIGTERM), and
applies --from-beginning only where the group has no offset, as Kafka's console consumer."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import cli_command, subprocess_env

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker import ensure_broker, stop_broker
from spark_mq.cli.common import EXIT_TERMINATED, EXIT_USAGE


@pytest.fixture(scope="module")
def group_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local broker with no initial rebalance delay, so a group forms at once."""
    directory = tmp_path_factory.mktemp("cli-consume-group") / "mq"
    ensure_broker(
        directory,
        config={"broker.idle.exit.ms": "-1", "group.initial.rebalance.delay.ms": "0"},
    )
    yield str(directory)
    stop_broker(directory)


def fill(path: str, topic: str, values: list[str], partitions: int = 3) -> None:
    with Admin(path=path) as admin:
        if topic not in admin.list_topics():
            admin.create_topic(topic, partitions=partitions)
    with Producer(path=path) as producer:
        for value in values:
            producer.send(topic, value.encode())
        producer.flush()


def consume(run_cli: Any, path: str, topic: str, *args: str) -> list[str]:
    r = run_cli("consume", topic, "--path", path, *args)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode().splitlines()


def committed(path: str, group: str, topic: str, partitions: int = 3) -> dict[int, int | None]:
    with Consumer(path=path, group_id=group) as c:
        found = c.committed([TopicPartition(topic, p) for p in range(partitions)])
    return {tp.partition: None if o is None else o.offset for tp, o in found.items()}


@pytest.mark.parametrize("first_run", [["--group", "G"], ["-X", "group.id=G"]])
def test_the_group_resumes_where_the_last_run_stopped(run_cli, group_path, first_run):
    topic = f"resume-{first_run[0].strip('-')}"
    values = [f"v{i}" for i in range(10)]
    fill(group_path, topic, values)
    first = consume(
        run_cli, group_path, topic, *first_run, "--from-beginning", "--max-messages", "4"
    )
    assert len(first) == 4
    rest = consume(run_cli, group_path, topic, *first_run, "--from-beginning")
    assert len(rest) == 6 and sorted(first + rest) == sorted(values)
    assert consume(run_cli, group_path, topic, *first_run, "--from-beginning") == []
    # Everything printed is committed: the group is at the end of every partition.
    with Consumer(path=group_path) as c:
        ends = c.end_offsets([TopicPartition(topic, p) for p in range(3)])
    assert committed(group_path, "G", topic) == {tp.partition: o for tp, o in ends.items()}


def test_from_beginning_only_where_the_group_has_no_offset(run_cli, group_path):
    topic = "from-beginning"
    fill(group_path, topic, ["a", "b", "c"])
    assert sorted(consume(run_cli, group_path, topic, "--group", "H", "--from-beginning")) == [
        "a",
        "b",
        "c",
    ]
    fill(group_path, topic, ["d"])
    assert consume(run_cli, group_path, topic, "--group", "H", "--from-beginning") == ["d"]


def test_a_new_group_without_from_beginning_starts_at_the_end_and_keeps_it(run_cli, group_path):
    topic = "latest"
    fill(group_path, topic, ["old"])
    assert consume(run_cli, group_path, topic, "--group", "L") == []
    # The end it started at was committed, so the next run reads what came since.
    fill(group_path, topic, ["new"])
    assert consume(run_cli, group_path, topic, "--group", "L") == ["new"]


def test_without_auto_commit_nothing_is_committed(run_cli, group_path):
    topic = "no-commit"
    fill(group_path, topic, ["a", "b"])
    args = ("--group", "N", "--from-beginning", "-X", "enable.auto.commit=false")
    assert sorted(consume(run_cli, group_path, topic, *args)) == ["a", "b"]
    assert sorted(consume(run_cli, group_path, topic, *args)) == ["a", "b"]
    assert committed(group_path, "N", topic) == {0: None, 1: None, 2: None}


def test_sigterm_commits_what_was_printed(group_path):
    topic = "follow"
    fill(group_path, topic, [f"v{i}" for i in range(5)], partitions=1)
    proc = subprocess.Popen(
        cli_command(
            ["consume", topic, "--path", group_path, "--group", "F", "--from-beginning", "--follow"]
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(5)]
        assert [line.strip() for line in lines] == [b"v%d" % i for i in range(5)]
        time.sleep(0.5)  # waiting in poll() for more
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_TERMINATED, err.decode()
    assert committed(group_path, "F", topic, partitions=1) == {0: 5}


def test_an_idle_follower_commits_what_it_printed_within_the_interval(group_path):
    """A --follow consumer that caught up and waits commits its last records once
    auto.commit.interval.ms has passed, as Kafka's auto-commit does, not only when more
    records come: otherwise the group's lag (console, lag exporter) stays stale while nothing
    is produced. The records are printed well within the first interval, so only a commit
    made while idle can bring the offset to 5."""
    topic = "follow-idle"
    fill(group_path, topic, [f"v{i}" for i in range(5)], partitions=1)
    command = ["consume", topic, "--path", group_path, "--group", "I", "--from-beginning"]
    proc = subprocess.Popen(
        cli_command([*command, "--follow", "-X", "auto.commit.interval.ms=3000"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(5)]
        assert [line.strip() for line in lines] == [b"v%d" % i for i in range(5)]
        deadline = time.monotonic() + 15
        while committed(group_path, "I", topic, partitions=1) != {0: 5}:
            assert time.monotonic() < deadline, "the idle follower never committed"
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.communicate(timeout=30)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--group", "G", "--partition", "0"], "--partition (and --offset) read one partition"),
        (["--group", "G", "-X", "group.id=H"], "--group G and -X group.id=H disagree"),
        (
            ["--group", "G", "--from-beginning", "-X", "auto.offset.reset=latest"],
            "cannot be combined with -X auto.offset.reset=latest",
        ),
    ],
)
def test_contradictory_group_options_are_usage_errors(run_cli, group_path, args, message):
    r = run_cli("consume", "any", "--path", group_path, *args)
    assert r.returncode == EXIT_USAGE
    assert message in r.stderr.decode()
