"""Executors reach the embedded broker of ``path`` through the endpoint the driver resolved
(spark_mq/datasource/executor_endpoint.py): with ``executor.endpoint=tcp`` (the path
executors on other hosts take) a stream reads and writes through the token listener, a
client without the token is refused, and an executor that cannot reach the broker fails its
task naming the address, without starting one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from sink_helpers import create_topic, produce, values

from spark_mq import Admin, Producer
from spark_mq.broker.embedded_token import TOKEN_FILE, EmbeddedToken
from spark_mq.broker.local import broker_status
from spark_mq.client.records import TopicPartition
from spark_mq.client.sasl import Password
from spark_mq.datasource.executor_endpoint import ExecutorEndpoint, parse_executor_endpoint
from spark_mq.errors import (
    AuthenticationError,
    ConfigError,
    CorruptCheckpointError,
    ExecutorEndpointError,
)

TCP = {"executor.endpoint": "tcp", "executor.endpoint.host": "127.0.0.1"}


def _broker_pids(directory: Path) -> set[int]:
    """The processes running a broker of ``directory`` (python -m spark_mq.broker)."""
    wanted = str(directory.resolve())
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in args]
        if "spark_mq.broker" in text and wanted in text:
            pids.add(int(entry))
    return pids


def _tcp_logins(directory: Path) -> int:
    """How many connections the broker log shows authenticated with SASL over TCP."""
    log = (directory / "broker.log").read_text()
    return sum(1 for line in log.splitlines() if "authenticated as User:" in line)


def test_a_stream_reads_and_writes_through_the_token_listener(
    spark: Any, mq_dir: Path, tmp_path: Path
) -> None:
    create_topic(mq_dir, "src", 1)
    create_topic(mq_dir, "dst", 1)
    produce(mq_dir, "src", [b"v%03d" % i for i in range(20)])
    before = _broker_pids(mq_dir)
    assert len(before) == 1
    query = (
        spark.readStream.format("spark_mq")
        .option("path", str(mq_dir))
        .option("subscribe", "src")
        .option("startingOffsets", "earliest")
        .options(**TCP)
        .load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
        .writeStream.format("spark_mq")
        .option("path", str(mq_dir))
        .option("topic", "dst")
        .options(**TCP)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert values(mq_dir, "dst") == [b"V%03d" % i for i in range(20)]
    # The executors came over TCP with the token (the broker logs each SASL login), and no
    # other broker was started for the directory.
    assert _tcp_logins(mq_dir) >= 2  # at least one reader task and one writer task
    assert _broker_pids(mq_dir) == before
    endpoint = json.loads((mq_dir / "broker.json").read_text())
    assert [a.startswith("127.0.0.1:") for a in endpoint["token_listeners"]] == [True]
    assert (mq_dir / TOKEN_FILE).stat().st_mode & 0o777 == 0o600


def test_a_client_without_the_token_is_refused_and_writes_nothing(spark: Any, mq_dir: Path) -> None:
    create_topic(mq_dir, "t", 1)
    # A batch read with the TCP path opens the token listener (and reads nothing).
    rows = (
        spark.read.format("spark_mq").option("path", str(mq_dir)).option("subscribe", "t")
    ).options(**TCP)
    assert rows.load().count() == 0
    (address,) = json.loads((mq_dir / "broker.json").read_text())["token_listeners"]
    token = EmbeddedToken.read(mq_dir)
    assert token is not None
    wrong = Password(token.jaas_config().replace(token.hmac, "x" * 43))
    missing_extension = Password(token.jaas_config().replace(' tokenauth="true"', ""))
    for jaas in (wrong, missing_extension):
        with (
            pytest.raises(AuthenticationError, match="token") as refused,
            Producer(
                bootstrap_servers=address,
                **{
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.jaas.config": jaas,
                    "max.block.ms": 5000,
                },
            ) as producer,
        ):
            producer.send("t", b"intruder").get(timeout=10)
        assert token.hmac not in str(refused.value)
    with Admin(path=str(mq_dir)) as admin:
        latest = admin.list_offsets({TopicPartition("t", 0): "latest"})
        assert latest[TopicPartition("t", 0)].offset == 0


def _stop_the_broker(path: str) -> Any:
    def stop(batches: Any) -> Any:
        from spark_mq.broker.local import stop_broker

        stop_broker(path)
        yield from batches

    return stop


def test_an_executor_that_cannot_reach_the_broker_fails_its_task_naming_the_address(
    spark: Any, mq_dir: Path
) -> None:
    create_topic(mq_dir, "out", 1)
    # The writer is made (the endpoint resolved, on the driver) while the broker runs; the
    # first stage stops the broker, and after the shuffle the write stage's tasks find
    # nothing at the address. Adaptive execution would plan the write stage (and make the
    # writer, starting a new broker) only after the first stage ran; a read would not do
    # either: Spark plans it again at each action.
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    frame = (
        spark.range(4, numPartitions=1)
        .selectExpr("CAST(id AS STRING) AS value")
        .mapInPandas(_stop_the_broker(str(mq_dir)), "value string")
        .repartition(2)
    )
    try:
        with pytest.raises(Exception, match="ExecutorEndpointError") as failed:
            (
                frame.write.format("spark_mq")
                .option("path", str(mq_dir))
                .option("topic", "out")
                .option("exactlyOnce", "false")  # nothing for the driver to abort afterwards
                .options(**TCP)
                .mode("append")
                .save()
            )
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")
    assert "cannot reach the broker of" in str(failed.value)
    assert "127.0.0.1:" in str(failed.value)
    # Nobody started a broker for the directory again: not the executor, which must never.
    assert broker_status(mq_dir) is None
    assert _broker_pids(mq_dir) == set()


def test_the_executor_endpoint_checks_its_address_before_any_client_opens(
    tmp_path: Path,
) -> None:
    free = tmp_path / "nothing.sock"
    endpoint = ExecutorEndpoint(
        str(tmp_path),
        "tcp",
        "driver-host",
        tcp_address="127.0.0.1:9",
        token_jaas=Password("secret-hmac-value"),
    )
    with pytest.raises(ExecutorEndpointError, match=r"127\.0\.0\.1:9") as failed:
        endpoint.client_properties()
    assert failed.value.addresses == ("127.0.0.1:9",)
    assert "secret-hmac-value" not in repr(endpoint) + str(failed.value)
    unix_elsewhere = ExecutorEndpoint(str(tmp_path), "unix", "driver-host", unix_path=str(free))
    with pytest.raises(ExecutorEndpointError, match=r"nothing\.sock"):
        unix_elsewhere.client_properties()
    assert broker_status(tmp_path) is None


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"path": "/d", "executor.endpoint": "ssh"}, "use auto, unix or tcp"),
        ({"path": "/d", "executor.endpoint": "unix", "executor.endpoint.host": "h"}, "opens"),
        ({"path": "/d", "executor.endpoint.host": "a b"}, "not a host name"),
        ({"path": "/d", "executor.endpoint.host": "0.0.0.0"}, "wildcard"),
        ({"path": "/d", "executor.endpoint.host": "[::]"}, "wildcard"),
        ({"bootstrap.servers": "h:1", "executor.endpoint": "tcp"}, "for the embedded broker"),
    ],
)
def test_bad_executor_endpoint_options_are_refused_naming_the_option(
    options: dict[str, str], match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as refused:
        parse_executor_endpoint(options)
    assert refused.value.key in ("executor.endpoint", "executor.endpoint.host")


def test_auto_falls_back_to_the_socket_when_the_guessed_address_cannot_be_bound(
    mq_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from spark_mq.datasource import executor_endpoint

    create_topic(mq_dir, "t", 1)
    monkeypatch.setattr(executor_endpoint, "driver_host", lambda: "192.0.2.77")  # not ours
    found = executor_endpoint.resolve_executor_endpoint(str(mq_dir), "auto", None, create=False)
    assert found.unix_path is not None and found.tcp_address is None
    assert "executor.endpoint.host" in caplog.text
    with pytest.raises(ConfigError, match="cannot listen"):
        executor_endpoint.resolve_executor_endpoint(str(mq_dir), "tcp", None, create=False)


def _spoil_token_file(mq_dir: Path, how: str) -> None:
    if how == "not json":
        (mq_dir / TOKEN_FILE).write_text("{not json")
    else:  # unreadable: a directory where the file should be
        (mq_dir / TOKEN_FILE).mkdir()


@pytest.mark.parametrize("how", ["not json", "unreadable"])
def test_auto_falls_back_to_the_socket_when_the_token_file_is_bad(
    mq_dir: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    from spark_mq.datasource import executor_endpoint

    create_topic(mq_dir, "t", 1)
    _spoil_token_file(mq_dir, how)
    caplog.set_level("WARNING", logger=executor_endpoint.__name__)
    for host in (None, "127.0.0.1"):
        found = executor_endpoint.resolve_executor_endpoint(str(mq_dir), "auto", host, create=False)
        assert found.unix_path is not None and found.tcp_address is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings  # one per resolution
    assert all(TOKEN_FILE in w and "Unix socket only" in w for w in warnings)
    with pytest.raises(CorruptCheckpointError, match="delete it") as refused:
        executor_endpoint.resolve_executor_endpoint(str(mq_dir), "tcp", "127.0.0.1", create=False)
    assert refused.value.path == str(mq_dir / TOKEN_FILE)
    assert "executor.endpoint=tcp" in str(refused.value)


def test_a_query_in_auto_mode_runs_over_the_socket_when_the_token_file_is_corrupt(
    spark: Any, mq_dir: Path
) -> None:
    create_topic(mq_dir, "t", 1)
    produce(mq_dir, "t", [b"a", b"b", b"c"])
    _spoil_token_file(mq_dir, "not json")
    rows = spark.read.format("spark_mq").option("path", str(mq_dir)).option("subscribe", "t")
    assert rows.load().count() == 3
