"""BrokerConfig / ServerConfig: keys, aliases, topic defaults, properties files, listeners."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_mq.broker.config import (
    LOCAL_DEFAULTS,
    TOPIC_DEFAULT_KEYS,
    BrokerConfig,
    Listener,
    ServerConfig,
)
from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.main import load_config, parse_args
from spark_mq.broker.properties_file import (
    parse_override,
    parse_properties,
    read_properties_file,
)
from spark_mq.errors import ConfigError
from spark_mq.storage.log_config import LogConfig

REPO = Path(__file__).resolve().parents[2]

#: Kafka's broker defaults for the keys we share.
KAFKA_DEFAULTS = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "socket.request.max.bytes": "104857600",
    "connections.max.idle.ms": "600000",
    "log.retention.check.interval.ms": "300000",
    "log.cleaner.enable": "true",
    "log.cleaner.backoff.ms": "15000",
    "log.flush.offset.checkpoint.interval.ms": "60000",
    "node.id": "0",
    "max.connections": "2147483647",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
}


def test_defaults_match_kafka():
    props = BrokerConfig().to_properties()
    for key, value in KAFKA_DEFAULTS.items():
        assert props[key] == value, key


def test_every_topic_default_key_maps_to_a_log_config_key():
    assert set(TOPIC_DEFAULT_KEYS.values()) <= set(LogConfig.settings())
    # Every topic setting has a broker-level default key.
    assert set(TOPIC_DEFAULT_KEYS.values()) == set(LogConfig.settings())


def test_topic_defaults_and_aliases():
    cfg = ServerConfig.from_properties(
        {
            "log.dir": "/data/mq",
            "broker.id": "3",
            "log.retention.hours": "2",
            "log.segment.bytes": "1048576",
            "message.max.bytes": "5000",
            "log.cleanup.policy": "compact,delete",
        }
    )
    assert cfg.broker.log_dir == "/data/mq"
    assert cfg.broker.node_id == 3
    assert cfg.log_defaults.retention_ms == 2 * 3_600_000
    assert cfg.log_defaults.segment_bytes == 1048576
    assert cfg.log_defaults.max_message_bytes == 5000
    assert cfg.log_defaults.compact and cfg.log_defaults.delete
    props = cfg.to_properties()
    assert props["log.retention.ms"] == "7200000"
    assert props["message.max.bytes"] == "5000"
    assert "retention.ms" not in props


def test_bad_topic_default_names_the_broker_key():
    with pytest.raises(ConfigError) as exc:
        ServerConfig.from_properties({"log.retention.ms": "soon"})
    assert exc.value.key == "log.retention.ms"
    assert "log.retention.ms" in str(exc.value)


def test_unknown_key_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"did you mean 'num\.partitions'"):
        ServerConfig.from_properties({"num.partition": "3"})
    with pytest.raises(ConfigError, match=r"log\. form"):
        ServerConfig.from_properties({"retention.ms": "3"})


def test_one_log_dir_only_and_required():
    with pytest.raises(ConfigError, match="exactly one log directory"):
        ServerConfig.from_properties({"log.dirs": "/a,/b"})
    with pytest.raises(ConfigError, match="--log-dir"):
        _ = ServerConfig.from_properties({}).broker.log_dir


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PLAINTEXT://127.0.0.1:9092", Listener("PLAINTEXT", "127.0.0.1", 9092)),
        ("plaintext://:0", Listener("PLAINTEXT", "0.0.0.0", 0)),
        ("PLAINTEXT://[::1]:9092", Listener("PLAINTEXT", "::1", 9092)),
        ("UNIX://", Listener("UNIX")),
        ("UNIX:///run/mq.sock", Listener("UNIX", unix_path="/run/mq.sock")),
        ("SSL://h:9093", Listener("SSL", "h", 9093, security_protocol="SSL")),
        ("sasl_ssl://h:1", Listener("SASL_SSL", "h", 1, security_protocol="SASL_SSL")),
    ],
)
def test_listeners_parse(text, expected):
    assert Listener.parse(text) == expected


@pytest.mark.parametrize(
    "text", ["127.0.0.1:9092", "NOPE://h:1", "PLAINTEXT://h", "PLAINTEXT://h:99999"]
)
def test_bad_listeners(text):
    with pytest.raises(ConfigError, match="listener"):
        Listener.parse(text)


def test_at_most_one_unix_listener():
    with pytest.raises(ConfigError, match="at most one UNIX"):
        BrokerConfig.from_properties({"listeners": "UNIX://,UNIX:///x.sock"})


def test_idle_exit():
    assert BrokerConfig().idle_exit_ms is None
    assert BrokerConfig.from_properties({"broker.idle.exit.ms": "0"}).idle_exit_ms is None
    assert BrokerConfig.from_properties({"broker.idle.exit.ms": "500"}).idle_exit_ms == 500
    with pytest.raises(ConfigError):
        BrokerConfig.from_properties({"broker.idle.exit.ms": "-5"})


def test_connection_and_memory_limits():
    cfg = BrokerConfig.from_properties(
        {
            "max.connections": "100",
            "max.connections.per.ip": "0",
            "max.connections.per.ip.overrides": "127.0.0.1:10, unix:50,[::ffff:10.0.0.1]:3",
            "queued.max.request.bytes": "-1",
            "socket.request.read.timeout.ms": "2500",
            "broker.fd.headroom": "1000",
        }
    )
    assert cfg.max_connections == 100 and cfg.max_connections_per_ip == 0
    assert cfg.per_ip_overrides == {"127.0.0.1": 10, "unix": 50, "10.0.0.1": 3}
    assert cfg.request_memory_bytes is None
    assert cfg.socket_request_read_timeout_ms == 2500 and cfg.broker_fd_headroom == 1000
    defaults = BrokerConfig()
    assert defaults.request_memory_bytes == 256 * 1024 * 1024 and defaults.per_ip_overrides == {}
    assert defaults.broker_fd_headroom == -1


@pytest.mark.parametrize(
    ("props", "key", "says"),
    [
        ({"max.connections": "0"}, "max.connections", "at least 1"),
        ({"max.connections.per.ip": "-1"}, "max.connections.per.ip", "at least 0"),
        ({"max.connections.per.ip": "0"}, "max.connections.per.ip", "overrides"),
        ({"max.connections.per.ip.overrides": "db1:5"}, "max.connections.per.ip.overrides", "IP"),
        (
            {"max.connections.per.ip.overrides": "unix"},
            "max.connections.per.ip.overrides",
            ":COUNT",
        ),
        (
            {"max.connections.per.ip.overrides": "unix:1,unix:2"},
            "max.connections.per.ip.overrides",
            "more than once",
        ),
        ({"queued.max.request.bytes": "0"}, "queued.max.request.bytes", "-1 (unlimited)"),
        ({"queued.max.request.bytes": "lots"}, "queued.max.request.bytes", "integer"),
        ({"socket.request.read.timeout.ms": "0"}, "socket.request.read.timeout.ms", "at least"),
        ({"broker.fd.headroom": "-2"}, "broker.fd.headroom", "automatic"),
    ],
)
def test_bad_limits_name_their_key(props, key, says):
    with pytest.raises(ConfigError, match=re.escape(says)) as exc:
        ServerConfig.from_properties(props)
    assert exc.value.key == key and key in str(exc.value)


def test_example_file_and_docs_carry_every_broker_default():
    props = read_properties_file(REPO / "conf" / "broker.properties")
    doc = (REPO / "docs" / "broker.md").read_text(encoding="utf-8")
    for key, value in BrokerConfig().to_properties().items():
        if key in ("log.dirs", "listeners", "node.id"):
            continue  # the file sets them for an installation; the docs say "(required)"
        assert props.get(key) == value, key
        shown = f"`{value}`" if value else "(none)"
        assert f"| `{key}` | {shown} |" in doc, key


def test_properties_syntax():
    text = "\n".join(
        [
            "# comment",
            "! also a comment",
            "a=1",
            "b : two words ",
            "c three",
            "d=line \\",
            "   continued",
            "e=tab\\there",
            "f",
            "a=last wins",
        ]
    )
    assert parse_properties(text) == {
        "a": "last wins",
        "b": "two words ",
        "c": "three",
        "d": "line continued",
        "e": "tab\there",
        "f": "",
    }


def test_example_file_is_valid_and_documents_the_defaults():
    props = read_properties_file(REPO / "conf" / "broker.properties")
    cfg = ServerConfig.from_properties(props)
    assert cfg.broker.listeners == ("PLAINTEXT://127.0.0.1:9092", "UNIX://")
    assert cfg.log_defaults == LogConfig()
    assert cfg.groups == GroupConfig()


def test_command_line_overrides_the_file(tmp_path):
    conf = tmp_path / "b.properties"
    conf.write_text("log.dirs=/from/file\nnum.partitions=2\n")
    args = parse_args(["--config", str(conf), "--override", "num.partitions=5"])
    cfg = load_config(args)
    assert (cfg.broker.log_dir, cfg.broker.num_partitions) == ("/from/file", 5)
    args = parse_args(["--config", str(conf), "--log-dir", "/flag"])
    assert load_config(args).broker.log_dir == "/flag"
    local = load_config(parse_args(["--log-dir", "/x", "--local"]))
    assert local.broker.idle_exit_ms == int(LOCAL_DEFAULTS["broker.idle.exit.ms"])
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("novalue")


def test_missing_config_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.properties"):
        read_properties_file(tmp_path / "nope.properties")


def test_with_overrides_keeps_what_was_set():
    cfg = ServerConfig.from_properties({"log.dirs": "/d", "num.partitions": "4"})
    again = cfg.with_overrides({"log.retention.ms": "1000"})
    assert again.broker.num_partitions == 4 and again.log_defaults.retention_ms == 1000
    assert ServerConfig.documentation("log.retention.ms")
    assert ServerConfig.documentation("num.partitions")
