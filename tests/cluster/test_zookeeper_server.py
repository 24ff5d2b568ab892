"""The ZooKeeper server runner: starts the real server on a free port, answers the
four-letter words, keeps data across restarts, and says what to install when it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from spark_mq.cluster.zookeeper_server import (
    ZooKeeperServer,
    ZooKeeperServerConfig,
    four_letter_word,
)
from spark_mq.errors import ConfigError, ZooKeeperNotInstalledError, ZooKeeperStartError


def test_missing_java_is_a_typed_error_that_says_how_to_install(tmp_path: Path) -> None:
    config = ZooKeeperServerConfig(data_dir=tmp_path, java_executable="/nonexistent/java")
    with pytest.raises(ZooKeeperNotInstalledError, match="apt-get install -y zookeeper") as info:
        ZooKeeperServer(config).start()
    assert info.value.missing == "java"


def test_missing_package_is_a_typed_error_that_says_how_to_install(tmp_path: Path) -> None:
    config = ZooKeeperServerConfig(
        data_dir=tmp_path, java_executable="sh", zookeeper_jar=tmp_path / "zookeeper.jar"
    )
    with pytest.raises(ZooKeeperNotInstalledError, match="apt-get install") as info:
        ZooKeeperServer(config).start()
    assert info.value.missing == "zookeeper"


def test_bad_settings_are_refused_with_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        ZooKeeperServerConfig(data_dir=tmp_path, client_port=70000)
    assert info.value.key == "clientPort"


def test_connect_string_before_start_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperStartError, match="call start"):
        _ = ZooKeeperServer(ZooKeeperServerConfig(data_dir=tmp_path)).connect_string


def test_server_serves_clients_and_keeps_znodes_across_restart(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    # The session fixture proves the package is there; this test runs a server of its own.
    server = ZooKeeperServer(ZooKeeperServerConfig(data_dir=tmp_path / "zk"))
    with server:
        assert server.port is not None
        assert four_letter_word("127.0.0.1", server.port, "ruok") == "imok"
        assert "Mode: standalone" in four_letter_word("127.0.0.1", server.port, "srvr")
        client = KazooClient(hosts=server.connect_string)
        client.start(timeout=10)
        client.create("/kept", b"42")
        client.stop()
        client.close()
        pid = server.pid
    assert not server.is_running()
    assert (tmp_path / "zk" / "version-2").is_dir()
    with server:
        assert server.pid != pid
        client = KazooClient(hosts=server.connect_string)
        client.start(timeout=10)
        assert client.get("/kept")[0] == b"42"
        client.stop()
        client.close()


def test_a_server_that_cannot_start_reports_its_log(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    # The port is taken by the session's server, which would answer in its place.
    assert zookeeper.port is not None
    server = ZooKeeperServer(
        ZooKeeperServerConfig(
            data_dir=tmp_path, client_port=zookeeper.port, start_timeout_ms=20_000
        )
    )
    with pytest.raises(ZooKeeperStartError) as info:
        server.start()
    assert info.value.log_path == str(tmp_path / "zookeeper.log")
    assert not server.is_running()
    assert "already in use" in str(info.value)
