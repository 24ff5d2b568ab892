"""The broker's files in its log directory: broker.meta.json, broker.json, the socket path."""

from __future__ import annotations

import os

import pytest

from spark_mq.broker.dir_files import (
    ENDPOINT_FILE,
    META_FILE,
    BrokerMeta,
    Endpoint,
    pid_alive,
    socket_path_for,
)
from spark_mq.errors import CorruptCheckpointError
from spark_mq.protocol.address import BrokerAddress


def test_every_takeover_increments_the_epoch_and_keeps_the_cluster_id(tmp_path):
    assert BrokerMeta.read(tmp_path) is None
    first = BrokerMeta.take_over(tmp_path)
    second = BrokerMeta.take_over(tmp_path)
    assert (first.epoch, second.epoch) == (1, 2)
    assert first.cluster_id == second.cluster_id and len(first.cluster_id) == 22
    assert BrokerMeta.read(tmp_path) == second


def test_a_damaged_meta_file_is_refused(tmp_path):
    (tmp_path / META_FILE).write_text('{"version": 0, "epoch": "x"}')
    with pytest.raises(CorruptCheckpointError, match="broker meta"):
        BrokerMeta.take_over(tmp_path)


def test_endpoint_round_trip_and_addresses(tmp_path):
    endpoint = Endpoint(os.getpid(), 3, 0, "/tmp/x.sock", "127.0.0.1", 9092, 123)
    endpoint.write(tmp_path)
    assert Endpoint.read(tmp_path) == endpoint
    assert endpoint.addresses == [
        BrokerAddress(unix_path="/tmp/x.sock"),
        BrokerAddress("127.0.0.1", 9092),
    ]
    Endpoint.remove_if_ours(tmp_path, os.getpid(), 2)  # another epoch: not ours
    assert (tmp_path / ENDPOINT_FILE).exists()
    Endpoint.remove_if_ours(tmp_path, os.getpid(), 3)
    assert Endpoint.read(tmp_path) is None


@pytest.mark.parametrize("content", ["", "{", '{"version": 9}', '{"version": 0, "pid": "x"}', "[]"])
def test_unreadable_endpoints_are_ignored(tmp_path, content):
    (tmp_path / ENDPOINT_FILE).write_text(content)
    assert Endpoint.read(tmp_path) is None


def test_socket_path_short_and_long(tmp_path, monkeypatch):
    short = tmp_path / "d"
    assert socket_path_for(short) == str(short.resolve() / "broker.sock")
    run = tmp_path.parent / "r"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    deep = tmp_path / ("x" * 120)
    path = socket_path_for(deep)
    assert path.startswith(str(run / "spark-mq"))
    assert path == socket_path_for(deep)  # one fixed path per directory
    assert path != socket_path_for(tmp_path / ("y" * 120))
    assert len(path.encode()) <= 100
    # A runtime dir too deep for a socket path: /tmp is used instead.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / ("z" * 80)))
    assert socket_path_for(deep).startswith(f"/tmp/spark-mq-{os.getuid()}/")


def test_pid_alive():
    assert pid_alive(os.getpid())
    assert not pid_alive(2**22 + 12345)
