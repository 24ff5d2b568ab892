"""The cluster keys of the broker config (Kafka's names): zookeeper.connect's syntax, the
session and connection timeouts, broker.rack and advertised.listeners."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_mq.broker.config import BrokerConfig, ServerConfig
from spark_mq.broker.properties_file import read_properties_file
from spark_mq.broker.zk.membership import (
    advertised_endpoint,
    advertised_endpoints,
    zk_client_config,
)
from spark_mq.errors import ConfigError
from spark_mq.protocol.address import BrokerAddress


def test_defaults_are_a_single_node_broker_with_kafkas_timeouts() -> None:
    broker = ServerConfig.from_properties({}).broker
    assert not broker.in_cluster and broker.zookeeper_connect == ""
    assert broker.zookeeper_session_timeout_ms == 18_000
    assert broker.broker_rack == "" and broker.advertised_listeners == ()


def test_cluster_keys_and_the_broker_id_alias() -> None:
    broker = ServerConfig.from_properties(
        {
            "zookeeper.connect": "zk1:2181,zk2:2181/spark_mq",
            "zookeeper.session.timeout.ms": "6000",
            "broker.id": "3",
            "broker.rack": "eu-1a",
        }
    ).broker
    assert broker.in_cluster and broker.node_id == 3 and broker.broker_rack == "eu-1a"
    zk = zk_client_config(broker)
    # -1, the default, means the session timeout, as in Kafka.
    assert (zk.connect, zk.effective_connection_timeout_ms) == ("zk1:2181,zk2:2181/spark_mq", 6000)
    explicit = ServerConfig.from_properties(
        {"zookeeper.connect": "zk1:2181", "zookeeper.connection.timeout.ms": "1500"}
    ).broker
    assert zk_client_config(explicit).effective_connection_timeout_ms == 1500


@pytest.mark.parametrize(
    ("props", "key", "says"),
    [
        ({"zookeeper.connect": "zk1"}, "zookeeper.connect", "'zk1' must be host:port"),
        ({"zookeeper.connect": "zk1:2181,:2181"}, "zookeeper.connect", "must be host:port"),
        ({"zookeeper.connect": "zk1:2181/mq/"}, "zookeeper.connect", "trailing slash"),
        ({"zookeeper.connect": "zk1:99999"}, "zookeeper.connect", "must be host:port"),
        ({"zookeeper.session.timeout.ms": "0"}, "zookeeper.session.timeout.ms", "at least 1"),
        ({"zookeeper.connection.timeout.ms": "0"}, "zookeeper.connection.timeout.ms", "-1"),
        ({"advertised.listeners": "UNIX://"}, "advertised.listeners", "cannot be advertised"),
        ({"advertised.listeners": "PLAINTEXT://h:0"}, "advertised.listeners", "not port 0"),
        ({"advertised.listeners": "PLAINTEXT://:9092"}, "advertised.listeners", "wildcard"),
        (
            {"advertised.listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"},
            "advertised.listeners",
            "names a listener twice",
        ),
        (
            {"zookeeper.connect": "zk1:2181", "listeners": "UNIX://"},
            "inter.broker.listener.name",
            "no TCP listener named PLAINTEXT",
        ),
        (
            {
                "zookeeper.connect": "zk1:2181",
                "listeners": "PLAINTEXT://:9092,SSL://:9093",
                "inter.broker.listener.name": "INTERNAL",
            },
            "inter.broker.listener.name",
            "no TCP listener named INTERNAL",
        ),
        (
            {"listeners": "INTERNAL://:9092"},
            "listeners",
            "add e.g. INTERNAL:SSL to listener.security.protocol.map",
        ),
        (
            {"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://h:9093"},
            "advertised.listeners",
            "which listeners does not have",
        ),
        (
            {"listener.security.protocol.map": "INTERNAL:TLS"},
            "listener.security.protocol.map",
            "PROTOCOL one of",
        ),
        (
            {"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"},
            "listeners",
            "names listener PLAINTEXT twice",
        ),
    ],
)
def test_bad_cluster_settings_name_their_key(props: dict[str, str], key: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as exc:
        ServerConfig.from_properties(props)
    assert exc.value.key == key


def test_every_listener_is_registered_inter_broker_first() -> None:
    """One endpoint per TCP listener, with its security protocol; the inter-broker one first
    (readers that take the first endpoint reach the broker as brokers do)."""
    broker = BrokerConfig.from_properties(
        {
            "zookeeper.connect": "zk:2181",
            "listeners": "EXTERNAL://:0,INTERNAL://127.0.0.1:0,UNIX://",
            "listener.security.protocol.map": "EXTERNAL:SSL,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "internal",
        }
    )
    bound = [BrokerAddress("127.0.0.1", 9093), BrokerAddress("127.0.0.1", 9092)]
    endpoints = advertised_endpoints(broker, [*bound, BrokerAddress(unix_path="/x.sock")])
    assert [(e.connection_string, e.security_protocol) for e in endpoints] == [
        ("INTERNAL://127.0.0.1:9092", "PLAINTEXT"),
        ("EXTERNAL://127.0.0.1:9093", "SSL"),
    ]


def test_the_registered_endpoint_is_the_bound_port_unless_advertised() -> None:
    bound = [BrokerAddress(unix_path="/d/broker.sock"), BrokerAddress("127.0.0.1", 40123)]
    plain = ServerConfig.from_properties({"zookeeper.connect": "zk:2181"}).broker
    assert advertised_endpoint(plain, bound).connection_string == "PLAINTEXT://127.0.0.1:40123"
    told = ServerConfig.from_properties(
        {"zookeeper.connect": "zk:2181", "advertised.listeners": "PLAINTEXT://host1.example:9092"}
    ).broker
    assert advertised_endpoint(told, bound).connection_string == "PLAINTEXT://host1.example:9092"


def test_the_three_host_example_is_a_valid_cluster() -> None:
    conf = Path(__file__).resolve().parents[2] / "conf" / "cluster"
    brokers = [
        ServerConfig.from_properties(read_properties_file(conf / f"broker-{i}.properties")).broker
        for i in (1, 2, 3)
    ]
    assert [b.node_id for b in brokers] == [1, 2, 3]
    assert len({b.zookeeper_connect for b in brokers}) == 1 and brokers[0].in_cluster
    assert len({b.advertised_listeners for b in brokers}) == 3
    assert sorted(b.broker_rack for b in brokers) == ["rack-a", "rack-b", "rack-c"]
