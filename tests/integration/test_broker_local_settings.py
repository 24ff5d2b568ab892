"""The local broker's kept settings (``DIR/server.properties``) across restarts on demand, and
how a broker that cannot start is reported: one line, its cause and where its log is. Real
broker processes throughout."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_mq import Admin, Consumer, Producer
from spark_mq.broker import broker_status, ensure_broker, stop_broker
from spark_mq.broker.dir_files import META_FILE
from spark_mq.broker.local import OUT_FILE
from spark_mq.broker.persisted_config import PROPERTIES_FILE
from spark_mq.cli import main as cli_main
from spark_mq.errors import BrokerNotAvailableError, ConfigError


@pytest.fixture
def local_dir(tmp_path: Path) -> Iterator[Path]:
    """A log directory whose local broker is stopped (or killed) at the end of the test."""
    d = tmp_path / "mq"
    yield d
    try:
        stop_broker(d, timeout_ms=30_000)
    except Exception:
        status = broker_status(d)
        if status is not None and status.pid > 0:
            os.kill(status.pid, signal.SIGKILL)


def partitions_of_a_new_topic(path: Path, topic: str) -> int:
    """Auto-create ``topic`` by producing to it (the broker gives it num.partitions)."""
    with Producer(path=path) as producer:
        producer.send(topic, b"x").get(timeout=60)
    with Admin(path=path) as admin:
        return admin.describe_topic(topic).partition_count


def test_an_override_holds_when_a_client_restarts_the_broker(local_dir, capsys):
    code = cli_main(
        [
            "broker",
            "start",
            "--detach",
            "--path",
            str(local_dir),
            "--override",
            "num.partitions=3",
            "--override",
            "log.retention.ms=3600000",
        ]
    )
    assert code == 0, capsys.readouterr().err
    first = broker_status(local_dir)
    assert partitions_of_a_new_topic(local_dir, "first") == 3
    assert stop_broker(local_dir)

    # The next client starts the broker on demand: with the kept settings, not the defaults.
    assert partitions_of_a_new_topic(local_dir, "second") == 3
    again = broker_status(local_dir)
    assert again.pid != first.pid and again.epoch == first.epoch + 1
    with Admin(path=local_dir) as admin:
        assert admin.describe_configs("second")["retention.ms"] == "3600000"

    # Removing one (here while the broker runs) applies from the next start on.
    assert (
        cli_main(
            ["broker", "config", "--path", str(local_dir), "--delete-config", "num.partitions"]
        )
        == 0
    )
    assert "keeps its settings until it restarts" in capsys.readouterr().out
    assert partitions_of_a_new_topic(local_dir, "third") == 3
    assert stop_broker(local_dir)
    assert partitions_of_a_new_topic(local_dir, "fourth") == 1
    with Admin(path=local_dir) as admin:
        assert admin.describe_configs("fourth")["retention.ms"] == "3600000"


def test_a_later_start_merges_its_overrides_into_the_kept_ones(local_dir, capsys):
    assert (
        cli_main(
            [
                "broker",
                "start",
                "--detach",
                "--path",
                str(local_dir),
                "--override",
                "num.partitions=2",
            ]
        )
        == 0
    )
    assert stop_broker(local_dir)
    assert (
        cli_main(
            [
                "broker",
                "start",
                "--detach",
                "--path",
                str(local_dir),
                "--override",
                "log.retention.ms=120000",
            ]
        )
        == 0
    )
    assert partitions_of_a_new_topic(local_dir, "t") == 2
    with Admin(path=local_dir) as admin:
        assert admin.describe_configs("t")["retention.ms"] == "120000"
    capsys.readouterr()
    assert cli_main(["broker", "config", "--path", str(local_dir)]) == 0
    assert capsys.readouterr().out.splitlines() == ["log.retention.ms=120000", "num.partitions=2"]


def test_a_bad_kept_setting_is_reported_with_its_file_and_key(local_dir):
    ensure_broker(local_dir)
    assert stop_broker(local_dir)
    (local_dir / PROPERTIES_FILE).write_text("num.partitions=3\nlog.retention.ms=soon\n")
    with pytest.raises(ConfigError) as caught, Consumer(path=local_dir) as consumer:
        consumer.topics()
    assert str(caught.value).startswith(
        f"{local_dir / PROPERTIES_FILE}: log.retention.ms must be an integer"
    )
    assert caught.value.key == "log.retention.ms"
    assert broker_status(local_dir) is None  # refused before a broker was started


def busy_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


def test_a_broker_that_cannot_listen_is_reported_in_one_line(local_dir):
    local_dir.mkdir()
    # What an earlier start left in broker.out is not this start's cause.
    (local_dir / OUT_FILE).write_text("spark_mq broker: an earlier failure\n")
    held, port = busy_port()
    with held, pytest.raises(BrokerNotAvailableError) as caught:
        ensure_broker(local_dir, config={"listeners": f"UNIX://,PLAINTEXT://127.0.0.1:{port}"})
    text = str(caught.value)
    assert "\n" not in text and '{"' not in text, text
    assert text.startswith(f"the broker for {local_dir} could not start: cannot serve")
    assert "Address already in use" in text and f"127.0.0.1:{port}" in text
    assert f"full log: {local_dir / 'broker.log'}" in text
    assert "earlier failure" not in text


def test_a_broker_that_cannot_read_its_directory_is_reported_in_one_line(local_dir):
    ensure_broker(local_dir)
    assert stop_broker(local_dir)
    (local_dir / META_FILE).write_text("not json")
    with pytest.raises(BrokerNotAvailableError) as caught:
        ensure_broker(local_dir)
    text = str(caught.value)
    assert "\n" not in text and '{"' not in text, text
    assert f"{local_dir / META_FILE} is not a valid broker meta file" in text
    assert "exit status 1" in text and str(local_dir / "broker.log") in text


def test_broker_start_detach_prints_the_one_line(local_dir, capsys):
    held, port = busy_port()
    with held:
        code = cli_main(
            [
                "broker",
                "start",
                "--detach",
                "--path",
                str(local_dir),
                "--override",
                f"listeners=UNIX://,PLAINTEXT://127.0.0.1:{port}",
            ]
        )
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("spark-mq: error: the broker for "), err
    assert "Address already in use" in err and '{"' not in err
    assert f"full log: {local_dir / 'broker.log'}" in err
