"""How a broker reaches the other brokers of its cluster: the listener named by
``inter.broker.listener.name`` (PLAINTEXT unless set), over TLS when that listener is SSL.

The controller's channels, the replica fetchers, the ISR and controlled-shutdown requests
and the transaction marker channel all connect through one :class:`InterBrokerTransport`:
they look the other broker's endpoint of that listener up in its registration (every broker
registers one endpoint per listener, ``/brokers/ids/<id>``), and wrap the socket in the
broker's client TLS context (its ``ssl.*`` settings, or the listener's
``listener.name.<name>.ssl.*``): its certificate is shown to the other broker, and the other
broker's must chain to ``ssl.ca.location`` and, with
``ssl.endpoint.identification.algorithm=https``, name the host it is registered under.
"""

from __future__ import annotations

import dataclasses
import ssl
from typing import TYPE_CHECKING, Any

from spark_mq.protocol.address import BrokerAddress
from spark_mq.tls import TLS_PROTOCOLS, client_context

if TYPE_CHECKING:
    from spark_mq.broker.config import ServerConfig
    from spark_mq.broker.zk.znodes import BrokerRegistration
    from spark_mq.client.connection import BrokerConnection


@dataclasses.dataclass(frozen=True)
class InterBrokerTransport:
    """The listener name and TLS context of this broker's connections to the others."""

    listener_name: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None

    def address(self, registration: BrokerRegistration) -> BrokerAddress:
        """Where ``registration``'s broker listens for other brokers (its endpoint of the
        inter-broker listener; the first endpoint of a broker registered without it)."""
        try:
            endpoint = registration.endpoint(self.listener_name)
        except KeyError:
            endpoint = registration.endpoint()
        return BrokerAddress(host=endpoint.host, port=endpoint.port)

    def connection(self, address: BrokerAddress, **kwargs: Any) -> BrokerConnection:
        """A (not yet connected) connection to another broker at ``address``."""
        # Imported here: a single-node broker never connects to another, and does not load
        # the client modules at all.
        from spark_mq.client.connection import BrokerConnection  # noqa: PLC0415

        return BrokerConnection(address, ssl_context=self.ssl_context, **kwargs)


#: Brokers that talk PLAINTEXT between themselves (the default).
PLAINTEXT_TRANSPORT = InterBrokerTransport()


def inter_broker_transport(config: ServerConfig) -> InterBrokerTransport:
    """The transport ``config`` asks for; a TLS listener's client context is built here, so
    a bad certificate stops the start with a ConfigError."""
    broker = config.broker
    name = broker.inter_broker_listener
    protocol = broker.protocol_map.get(name, "PLAINTEXT")
    if protocol not in TLS_PROTOCOLS:
        return InterBrokerTransport(name)
    prefix = f"listener.name.{name.lower()}." if name in config.listener_tls else ""
    return InterBrokerTransport(name, client_context(config.tls_for(name).tls_settings(prefix)))
