"""Kafka's listener model (spark_mq/broker/listeners.py) and which endpoint a client is
given: names mapped to security protocols, unknown names refused with the setting to change,
and Metadata's endpoints of the listener the client came through."""

from __future__ import annotations

import pytest

from spark_mq.broker.handlers.metadata import client_endpoint
from spark_mq.broker.listeners import Listener, parse_protocol_map, protocol_map_of
from spark_mq.broker.metadata_cache import BrokerEndpoint, LiveBroker
from spark_mq.errors import ConfigError


def test_names_take_their_protocol_from_the_map() -> None:
    protocols = protocol_map_of(parse_protocol_map("m", "internal:ssl, EXTERNAL:SASL_SSL"))
    assert protocols == {"INTERNAL": "SSL", "EXTERNAL": "SASL_SSL"}
    internal = Listener.parse("internal://10.0.0.1:9093", protocols)
    assert (internal.name, internal.security_protocol, internal.tls) == ("INTERNAL", "SSL", True)
    assert str(Listener.parse("EXTERNAL://[::1]:9094", protocols)) == "EXTERNAL://[::1]:9094"
    with pytest.raises(ConfigError, match=r"add e\.g\. OTHER:SSL"):
        Listener.parse("OTHER://h:1", protocols)


@pytest.mark.parametrize("text", ["INTERNAL", "INTERNAL:TLS", "A:SSL,A:PLAINTEXT", "B C:SSL"])
def test_bad_protocol_maps(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_protocol_map("listener.security.protocol.map", text)
    assert caught.value.key == "listener.security.protocol.map"


def test_clients_get_the_endpoints_of_their_listener() -> None:
    both = LiveBroker(
        1,
        (
            BrokerEndpoint("INTERNAL", "10.0.0.1", 9092),
            BrokerEndpoint("SSL", "mq1.example.com", 9093, "SSL"),
        ),
    )
    internal_only = LiveBroker(2, (BrokerEndpoint("INTERNAL", "10.0.0.2", 9092),))
    assert client_endpoint(both, "SSL") == BrokerEndpoint("SSL", "mq1.example.com", 9093, "SSL")
    assert client_endpoint(both, "INTERNAL") == BrokerEndpoint("INTERNAL", "10.0.0.1", 9092)
    # Kafka leaves out a broker without the client's listener.
    assert client_endpoint(internal_only, "SSL") is None
    # The Unix socket is no registered listener: the PLAINTEXT endpoint, else the first.
    assert client_endpoint(internal_only, "UNIX") == BrokerEndpoint("INTERNAL", "10.0.0.2", 9092)
