"""``spark-mq groups`` against a live group on a real local broker: list, describe with lag,
reset-offsets (dry run, execute, refused while members are active, --to-datetime in the
local zone) and delete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker import ensure_broker, stop_broker
from spark_mq.cli.common import EXIT_ERROR, EXIT_USAGE, CliUsageError
from spark_mq.cli.groups import parse_datetime_ms

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def group_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local broker with no initial rebalance delay, so a group forms at once."""
    directory = tmp_path_factory.mktemp("cli-groups") / "mq"
    ensure_broker(
        directory,
        config={"broker.idle.exit.ms": "-1", "group.initial.rebalance.delay.ms": "0"},
    )
    yield str(directory)
    stop_broker(directory)


def fill(path: str, topic: str) -> None:
    with Admin(path=path) as admin:
        admin.create_topic(topic, partitions=2)
    with Producer(path=path) as producer:
        for p in range(2):
            for i in range(10):
                producer.send(topic, str(i).encode(), partition=p, timestamp_ms=1000 * (i + 1))
        producer.flush()


def live_member(path: str, group: str, topic: str, reads: int) -> Consumer:
    """A member of ``group`` that read ``reads`` records and committed them."""
    c = Consumer(
        path=path,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=reads,
    )
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < reads and time.monotonic() < deadline:
        got += sum(len(rs) for rs in c.poll(timeout_ms=100).values())
    assert got == reads
    c.commit()
    return c


def test_describe_a_live_group_shows_members_and_lag(cli: Any, group_path: str) -> None:
    fill(group_path, "orders")
    c = live_member(group_path, "billing", "orders", 4)
    try:
        r = cli("groups", "list", "--path", group_path)
        assert r.code == 0 and "billing" in r.out and "Stable" in r.out
        r = cli("groups", "describe", "billing", "--path", group_path, "--json")
        assert r.code == 0, r.err
        doc = json.loads(r.out)
        assert doc["state"] == "Stable" and len(doc["members"]) == 1
        member_id = c.group_metadata().member_id
        assert doc["members"][0]["member_id"] == member_id
        by_partition = {p["partition"]: p for p in doc["partitions"]}
        committed = {p: by_partition[p]["committed_offset"] or 0 for p in (0, 1)}
        assert sum(committed.values()) == 4
        for p in (0, 1):
            assert by_partition[p]["end_offset"] == 10
            assert by_partition[p]["member_id"] == member_id
            if by_partition[p]["committed_offset"] is not None:
                assert by_partition[p]["lag"] == 10 - committed[p]
        r = cli("groups", "describe", "billing", "--path", group_path)
        assert r.code == 0 and "Stable" in r.out and "lag" in r.out and member_id in r.out
        # reset-offsets refuses a group with members, as kafka-consumer-groups does.
        r = cli(
            "groups",
            "reset-offsets",
            "billing",
            "--topic",
            "orders",
            "--to-earliest",
            "--execute",
            "--path",
            group_path,
        )
        assert r.code == EXIT_ERROR and "stop its consumers" in r.err
    finally:
        c.close()


def test_reset_offsets_dry_run_then_execute(cli: Any, group_path: str) -> None:
    fill(group_path, "events")
    live_member(group_path, "etl", "events", 20).close()
    base = ("groups", "reset-offsets", "etl", "--topic", "events", "--path", group_path)
    r = cli(*base, "--to-offset", "3", "--json")
    assert r.code == 0, r.err
    plan = json.loads(r.out)
    assert plan["executed"] is False
    assert [(p["partition"], p["current_offset"], p["new_offset"]) for p in plan["partitions"]] == [
        (0, 10, 3),
        (1, 10, 3),
    ]
    assert "Dry run" in r.err
    with Admin(path=group_path) as admin:
        assert {o.offset for o in admin.list_group_offsets("etl").values()} == {10}
    r = cli(*base, "--to-offset", "3", "--execute")
    assert r.code == 0 and "new offset" in r.out
    r = cli(*base, "--shift-by", "-5", "--partition", "1", "--execute", "--json")
    assert [p["new_offset"] for p in json.loads(r.out)["partitions"]] == [0]  # clamped
    r = cli(*base, "--to-datetime", "1970-01-01T00:00:05.5Z", "--execute", "--json")
    assert [p["new_offset"] for p in json.loads(r.out)["partitions"]] == [5, 5]
    r = cli(*base, "--to-latest", "--partition", "0", "--execute")
    with Admin(path=group_path) as admin:
        offsets = admin.list_group_offsets("etl")
    assert {tp: o.offset for tp, o in offsets.items()} == {
        TopicPartition("events", 0): 10,
        TopicPartition("events", 1): 5,
    }
    r = cli(*base, "--to-earliest", "--to-latest")
    assert r.code == EXIT_USAGE


def test_delete_a_group(cli: Any, group_path: str) -> None:
    fill(group_path, "logs")
    live_member(group_path, "gone", "logs", 2).close()
    r = cli("groups", "delete", "gone", "--path", group_path)
    assert (r.code, r.out) == (0, "Deleted group gone.\n")
    r = cli("groups", "describe", "gone", "--path", group_path)
    assert r.code == EXIT_ERROR and "does not exist" in r.err
    r = cli("groups", "delete", "gone", "--path", group_path)
    assert r.code == EXIT_ERROR
    r = cli("groups", "list", "--path", group_path, "--json")
    assert "gone" not in [g["group"] for g in json.loads(r.out)]
    assert Path(group_path).exists()


# ---------------------------------------------------------------------------------------------
# --to-datetime and time zones

#: POSIX TZ strings (no tz database needed): "XYZ-2" is two hours east of UTC.
EAST_2 = "XYZ-2"
WEST_5 = "ABC+5"


@pytest.fixture
def local_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """``local_zone(tz)``: make ``tz`` this process's local zone for the test."""

    def _set(tz: str) -> None:
        monkeypatch.setenv("TZ", tz)
        time.tzset()

    yield _set
    monkeypatch.undo()
    time.tzset()


def test_a_datetime_without_a_zone_is_local_time(local_zone: Callable[[str], None]) -> None:
    local_zone(EAST_2)
    assert parse_datetime_ms("1970-01-01T02:00:05.5") == 5_500
    assert parse_datetime_ms("1970-01-01 02:00:05") == 5_000
    local_zone(WEST_5)
    assert parse_datetime_ms("1970-01-01T00:00:05.5") == 5 * 3_600_000 + 5_500
    assert parse_datetime_ms("1970-01-02") == 29 * 3_600_000  # a date alone: local midnight
    # An explicit zone is what it says, whatever the local zone.
    for zone in (EAST_2, WEST_5):
        local_zone(zone)
        assert parse_datetime_ms("1970-01-01T00:00:05.5Z") == 5_500
        assert parse_datetime_ms("1970-01-01T02:00:05.5+02:00") == 5_500
        assert parse_datetime_ms("1969-12-31T19:00:05.5-05:00") == 5_500


def test_a_datetime_that_does_not_parse_is_a_usage_error() -> None:
    for bad in ("yesterday", "2026-13-01T00:00:00", "1970-01-01T00:00:00+25:00", ""):
        with pytest.raises(CliUsageError, match="ISO 8601"):
            parse_datetime_ms(bad)


def test_reset_to_a_local_datetime_from_the_shell(run_cli: Any, group_path: str) -> None:
    """The zone comes from the TZ of the command's environment, as in a shell."""
    fill(group_path, "zoned")
    live_member(group_path, "tz", "zoned", 20).close()
    args = ("groups", "reset-offsets", "tz", "--topic", "zoned", "--path", group_path)
    env = {k: v for k, v in os.environ.items() if k != "SPARK_MQ_PATH"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["TZ"] = EAST_2
    local = ("--to-datetime", "1970-01-01T02:00:05.5", "--json")
    done = subprocess.run(
        [sys.executable, "-m", "spark_mq.cli", *args, *local],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [p["new_offset"] for p in plan["partitions"]] == [5, 5]
    # The same wall-clock time read in UTC is two hours later: every record is older.
    utc = run_cli(*args, "--to-datetime", "1970-01-01T02:00:05.5Z", "--json")
    assert [p["new_offset"] for p in json.loads(utc.stdout)["partitions"]] == [10, 10]
