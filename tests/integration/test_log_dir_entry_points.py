"""Reading and creating entry points of ``path=DIR`` with the Python clients, against real
local brokers: a Consumer or an Admin that only reads refuses a path that holds no log (and
creates nothing), a Producer and ``Admin.create_topic`` create it."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spark_mq import Admin, Consumer, LogDirectoryNotFoundError, Producer, TopicPartition
from spark_mq.broker import broker_status, ensure_broker, stop_broker


@pytest.fixture
def new_path(tmp_path: Path) -> Iterator[Path]:
    """A path that does not exist yet; a broker started for it is stopped at the end."""
    d = tmp_path / "new" / "mq"
    yield d
    try:
        stop_broker(d, timeout_ms=30_000)
    except Exception:
        status = broker_status(d)
        if status is not None and status.pid > 0:
            os.kill(status.pid, signal.SIGKILL)


def _consumer_topics(d: Path) -> None:
    with Consumer(path=d) as c:
        c.topics()


def _assign_and_poll(d: Path) -> None:
    with Consumer(path=d, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("t", 0)])
        c.poll(timeout_ms=100)


def _subscribe_and_poll(d: Path) -> None:
    with Consumer(path=d, group_id="g") as c:
        c.subscribe(["t"])
        c.poll(timeout_ms=100)


def _admin(call: Callable[[Admin], object]) -> Callable[[Path], None]:
    def read(d: Path) -> None:
        with Admin(path=d) as admin:
            call(admin)

    return read


READS: dict[str, Callable[[Path], None]] = {
    "consumer topics": _consumer_topics,
    "consumer assign and poll": _assign_and_poll,
    "consumer subscribe and poll": _subscribe_and_poll,
    "admin list_topics": _admin(lambda a: a.list_topics()),
    "admin describe_topic": _admin(lambda a: a.describe_topic("t")),
    "admin list_groups": _admin(lambda a: a.list_groups()),
    "admin list_transactions": _admin(lambda a: a.list_transactions()),
}


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_reading_a_missing_path_fails_and_creates_nothing(new_path, read):
    with pytest.raises(LogDirectoryNotFoundError) as caught:
        read(new_path)
    assert caught.value.path == str(new_path)
    assert f"no log directory at {new_path} (it does not exist)" in str(caught.value)
    assert not new_path.parent.exists()


@pytest.mark.parametrize("read", list(READS.values())[:4], ids=list(READS)[:4])
def test_reading_an_empty_directory_fails_and_leaves_it_empty(new_path, read):
    new_path.mkdir(parents=True)
    with pytest.raises(LogDirectoryNotFoundError, match="holds no spark_mq log"):
        read(new_path)
    assert list(new_path.iterdir()) == []


def test_a_producer_creates_the_log_and_readers_then_find_it(new_path):
    with Producer(path=new_path) as producer:
        producer.send("t", b"first").get(timeout=60)
    with Consumer(path=new_path, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("t", 0)])
        assert [r.value for r in c.poll(timeout_ms=5000)[TopicPartition("t", 0)]] == [b"first"]


def test_admin_create_topic_creates_the_log_after_a_refused_read(new_path):
    with Admin(path=new_path) as admin:
        with pytest.raises(LogDirectoryNotFoundError):
            admin.list_topics()
        admin.create_topic("t", partitions=2)
        assert admin.list_topics() == ["t"]


def test_readers_start_the_broker_of_a_log_that_has_none_running(new_path):
    ensure_broker(new_path)
    assert stop_broker(new_path)
    with Admin(path=new_path) as admin:
        assert admin.list_topics() == []
    assert broker_status(new_path) is not None


def test_a_reader_waits_for_a_broker_a_creator_is_starting(new_path):
    """A creating client makes ``.start.lock`` before it starts the broker: a reader that
    comes in between finds a log (being made), not a mistake."""
    new_path.mkdir(parents=True)
    (new_path / ".start.lock").touch()
    with Admin(path=new_path) as admin:
        assert admin.list_topics() == []
