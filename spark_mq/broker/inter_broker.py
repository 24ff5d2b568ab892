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

When the inter-broker listener is SASL_PLAINTEXT or SASL_SSL, every such connection first
authenticates with SASL, as Kafka's brokers do: the mechanism is
``sasl.mechanism.inter.broker.protocol`` (SCRAM-SHA-512 unless set; it must be one of the
broker's ``sasl.enabled.mechanisms``) and the user and password are those of
``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (Kafka's key, e.g.
``listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.
scram.ScramLoginModule required username="broker" password="...";``). Only then does it show
the cluster's secret with AuthenticateBroker. A missing or unreadable setting stops the start
with a ConfigError naming the key; a refused password is an AuthenticationError naming the
mechanism and user on each connection (logged by whoever opened it), never the password.
"""

from __future__ import annotations

import dataclasses
import ssl
from typing import TYPE_CHECKING, Any

from spark_mq.broker.listeners import SASL_PROTOCOLS
from spark_mq.errors import ConfigError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.tls import TLS_PROTOCOLS, client_context

if TYPE_CHECKING:
    from spark_mq.broker.config import ServerConfig
    from spark_mq.broker.zk.znodes import BrokerRegistration
    from spark_mq.client.connection import BrokerConnection
    from spark_mq.client.sasl import SaslCredentials


@dataclasses.dataclass(frozen=True)
class InterBrokerTransport:
    """The listener name, TLS context and SASL credentials of this broker's connections to
    the others."""

    listener_name: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    #: The broker's own SASL user on a SASL inter-broker listener (its password is hidden
    #: in repr), None otherwise.
    sasl: SaslCredentials | None = None

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

        return BrokerConnection(address, ssl_context=self.ssl_context, sasl=self.sasl, **kwargs)


#: Brokers that talk PLAINTEXT between themselves (the default).
PLAINTEXT_TRANSPORT = InterBrokerTransport()


def inter_broker_transport(config: ServerConfig) -> InterBrokerTransport:
    """The transport ``config`` asks for; a TLS listener's client context and a SASL
    listener's credentials are built here, so a bad certificate or a missing or bad SASL
    setting stops the start with a ConfigError naming the key."""
    broker = config.broker
    name = broker.inter_broker_listener
    protocol = broker.protocol_map.get(name, "PLAINTEXT")
    sasl = inter_broker_sasl(config) if protocol in SASL_PROTOCOLS else None
    if protocol not in TLS_PROTOCOLS:
        return InterBrokerTransport(name, sasl=sasl)
    prefix = f"listener.name.{name.lower()}." if name in config.listener_tls else ""
    context = client_context(config.tls_for(name).tls_settings(prefix))
    return InterBrokerTransport(name, context, sasl)


def inter_broker_sasl(config: ServerConfig) -> SaslCredentials:
    """The broker's own SASL credentials on its inter-broker listener (see the module
    docstring); ConfigError naming the missing or bad key."""
    # Imported here for the reason given in InterBrokerTransport.connection.
    from spark_mq.client.sasl import (  # noqa: PLC0415
        LOGIN_MODULES,
        Password,
        SaslCredentials,
        parse_jaas,
    )

    name = config.broker.inter_broker_listener
    mechanism = config.sasl.sasl_mechanism_inter_broker_protocol
    mechanism_key = "sasl.mechanism.inter.broker.protocol"
    enabled = config.sasl.sasl_enabled_mechanisms
    if mechanism not in enabled:
        raise ConfigError(
            f"{mechanism_key}={mechanism} is not in sasl.enabled.mechanisms "
            f"({','.join(enabled)}): the other brokers would refuse it; enable it or choose "
            "one of them",
            key=mechanism_key,
            value=mechanism,
        )
    key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.listener_sasl_jaas.get((name, mechanism))
    if not text:
        raise ConfigError(
            f"inter.broker.listener.name={name} is a SASL listener, so the broker needs its "
            f"own {mechanism} credentials: set {key} to "
            f'\'{LOGIN_MODULES[mechanism]} required username="..." password="...";\'',
            key=key,
        )
    try:
        username, password, _ = parse_jaas(text, mechanism)
    except ConfigError as exc:
        # parse_jaas names the client's key; the broker's is the per-listener one.
        raise ConfigError(str(exc).replace("sasl.jaas.config", key, 1), key=key) from exc
    if not username or not password:
        raise ConfigError(f"{key} has an empty username or password", key=key)
    return SaslCredentials(mechanism, username, Password(password))
