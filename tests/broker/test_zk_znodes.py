"""Kafka's znode JSON: our values decode what Kafka writes, round-trip through encode, and
corrupt data is a typed error naming the znode."""

from __future__ import annotations

import pytest

from spark_mq.broker.zk import znodes
from spark_mq.errors import CorruptZnodeError

# Written by Kafka 2.8 brokers and controllers (the shapes of ZkData.scala's encoders).
KAFKA_BROKER = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},'
    b'"endpoints":["PLAINTEXT://h1:9092","SSL://[::1]:9093"],"jmx_port":-1,"port":9092,'
    b'"host":"h1","version":5,"timestamp":"1700000000000","rack":"r1"}'
)
KAFKA_STATE = b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":7,"isr":[2,1]}'
KAFKA_TOPIC = (
    b'{"version":2,"partitions":{"1":[2,3],"0":[1,2]},"adding_replicas":{},"removing_replicas":{}}'
)


def test_decodes_kafkas_own_json() -> None:
    broker = znodes.BrokerRegistration.decode(1, KAFKA_BROKER)
    assert broker.rack == "r1" and broker.timestamp_ms == 1_700_000_000_000
    assert broker.endpoint("SSL") == znodes.EndPoint("SSL", "::1", 9093, "SSL")
    state = znodes.PartitionState.decode("t", 0, KAFKA_STATE)
    assert state == znodes.PartitionState(2, 7, (2, 1), 3)
    topic = znodes.TopicAssignment.decode("t", KAFKA_TOPIC)
    assert topic.partitions == {0: (1, 2), 1: (2, 3)}
    controller = znodes.ControllerRegistration.decode(b'{"version":1,"brokerid":4,"timestamp":"5"}')
    assert controller == znodes.ControllerRegistration(4, 5)
    assert znodes.decode_controller_epoch(b"12") == 12


def test_every_value_round_trips() -> None:
    broker = znodes.BrokerRegistration.decode(1, KAFKA_BROKER)
    assert znodes.BrokerRegistration.decode(1, broker.encode()) == broker
    state = znodes.PartitionState(1, 0, (1, 2), 1)
    assert znodes.PartitionState.decode("t", 0, state.encode()) == state
    topic = znodes.TopicAssignment({0: (1,), 1: (2,)}, adding={1: (3,)}, topic_id="abc")
    assert znodes.TopicAssignment.decode("t", topic.encode()) == topic
    config = znodes.TopicConfigOverrides({"retention.ms": "5"})
    assert znodes.TopicConfigOverrides.decode("t", config.encode()) == config
    controller = znodes.ControllerRegistration(2, 9)
    assert znodes.ControllerRegistration.decode(controller.encode()) == controller
    assert znodes.decode_controller_epoch(znodes.encode_controller_epoch(3)) == 3


@pytest.mark.parametrize(
    ("decode", "data", "path", "complaint"),
    [
        (lambda d: znodes.PartitionState.decode("t", 0, d), b"{not json", "/state", "JSON"),
        (lambda d: znodes.PartitionState.decode("t", 0, d), b"", "/state", "empty"),
        (lambda d: znodes.PartitionState.decode("t", 0, d), b"[1]", "/state", "object"),
        (
            lambda d: znodes.PartitionState.decode("t", 0, d),
            b'{"leader":true,"leader_epoch":0,"isr":[1],"controller_epoch":1}',
            "/state",
            "'leader' must be an integer",
        ),
        (
            lambda d: znodes.PartitionState.decode("t", 0, d),
            b'{"leader":1,"leader_epoch":0,"isr":[1,1],"controller_epoch":1}',
            "/state",
            "twice",
        ),
        (
            lambda d: znodes.TopicAssignment.decode("t", d),
            b'{"version":2,"partitions":{"0":[1],"2":[1]}}',
            "/brokers/topics/t",
            "0..n-1",
        ),
        (
            lambda d: znodes.BrokerRegistration.decode(1, d),
            b'{"version":5,"endpoints":["nohost"],"timestamp":"1"}',
            "/brokers/ids/1",
            "LISTENER://host:port",
        ),
        (znodes.decode_controller_epoch, b"x1", "/controller_epoch", "decimal"),
        (
            lambda d: znodes.TopicConfigOverrides.decode("t", d),
            b'{"version":1,"config":{"retention.ms":5}}',
            "/config/topics/t",
            "string values",
        ),
    ],
)
def test_corrupt_data_is_a_typed_error_naming_the_znode(
    decode: object, data: bytes, path: str, complaint: str
) -> None:
    with pytest.raises(CorruptZnodeError, match=complaint) as info:
        decode(data)  # type: ignore[operator]
    assert info.value.path.endswith(path)


def test_config_change_notifications_as_kafka_writes_them() -> None:
    notice = znodes.ConfigChangeNotification(znodes.TOPIC_ENTITY, "t.a_b")
    assert notice.encode() == b'{"version":2,"entity_path":"topics/t.a_b"}'
    name = "config_change_0000000012"
    assert znodes.config_change_sequence(name) == 12
    assert znodes.config_change_sequence("config_change_") is None
    assert znodes.config_change_sequence("other_0000000012") is None
    assert znodes.ConfigChangeNotification.decode(name, notice.encode()) == notice
    # Kafka before 1.1 wrote version 1; its brokers still read it.
    old = b'{"version":1,"entity_type":"clients","entity_name":"app"}'
    assert znodes.ConfigChangeNotification.decode(name, old) == (
        znodes.ConfigChangeNotification("clients", "app")
    )
    for bad in (b'{"version":2,"entity_path":"topics"}', b'{"version":3,"entity_path":"a/b"}'):
        with pytest.raises(CorruptZnodeError, match="/config/changes/config_change_0000000012"):
            znodes.ConfigChangeNotification.decode(name, bad)
