"""A broker's SASL settings (``ServerConfig.sasl``), Kafka's keys.

``connection.failed.authentication.delay.ms`` (Kafka's, default 100): a failed authentication
is answered, and its connection closed, only after this delay, so that one connection cannot
try passwords at the speed of the network.

``sasl.enabled.mechanisms``: Kafka's default is GSSAPI (Kerberos), which spark_mq does not
build; ours is ``SCRAM-SHA-256,SCRAM-SHA-512``. PLAIN is accepted only when listed: it sends
the password itself to the broker (in the clear on a SASL_PLAINTEXT listener), where SCRAM
proves knowledge of it without sending it, so it has to be chosen on purpose.

    >>> SaslConfig.from_properties({}).sasl_enabled_mechanisms
    ('SCRAM-SHA-256', 'SCRAM-SHA-512')

``connections.max.reauth.ms`` (Kafka's, KIP-368; default 0: off): above 0, a SASL
connection's session lasts that long after each authentication; the client must
re-authenticate on the same connection before then, or the broker closes the connection at
its next request (``broker/sasl/authenticator.py``).

Between brokers (when ``inter.broker.listener.name`` is a SASL_PLAINTEXT or SASL_SSL
listener): ``sasl.mechanism.inter.broker.protocol`` (Kafka's; its default GSSAPI is not built,
ours is SCRAM-SHA-512) is the mechanism a broker's own connections use, with the credentials
of ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (Kafka's key, listener and
mechanism in lower case). That key holds a password, so it is kept as a
:class:`~spark_mq.client.sasl.Password` apart from the other settings
(:func:`split_listener_jaas_key`) and never described.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from spark_mq.config import Config, between, parse_int, parse_list, setting
from spark_mq.errors import ConfigError

#: The mechanisms spark_mq implements.
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LISTENER_PREFIX: Final = "listener.name."
_JAAS_SUFFIX: Final = ".sasl.jaas.config"
_REAUTH_SUFFIX: Final = ".connections.max.reauth.ms"


def _split_listener_mechanism_key(key: str, suffix: str) -> tuple[str, str] | None:
    """``listener.name.<listener>.<mechanism><suffix>`` -> (LISTENER, MECHANISM), upper
    case; None for a key of another shape. An unknown mechanism is a ConfigError."""
    lower = key.lower()
    if not lower.startswith(_LISTENER_PREFIX) or not lower.endswith(suffix):
        return None
    middle = key[len(_LISTENER_PREFIX) : -len(suffix)]
    listener, dot, mechanism = middle.partition(".")
    if not dot or not listener or mechanism.upper() not in MECHANISMS:
        raise ConfigError(
            f"{key}: write listener.name.<listener>.<mechanism>{suffix} with a "
            f"mechanism among {', '.join(m.lower() for m in MECHANISMS)}",
            key=key,
        )
    return listener.upper(), mechanism.upper()


def split_listener_jaas_key(key: str) -> tuple[str, str] | None:
    """``listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config`` -> ("SASL_SSL",
    "SCRAM-SHA-512"); None for any other key. An unknown mechanism is a ConfigError."""
    return _split_listener_mechanism_key(key, _JAAS_SUFFIX)


def split_listener_reauth_key(key: str, value: object) -> tuple[tuple[str, str], int] | None:
    """``listener.name.sasl_ssl.scram-sha-512.connections.max.reauth.ms`` (Kafka's
    per-listener, per-mechanism form) -> (("SASL_SSL", "SCRAM-SHA-512"), milliseconds); None
    for any other key. A bad mechanism or value is a ConfigError naming the key."""
    split = _split_listener_mechanism_key(key, _REAUTH_SUFFIX)
    if split is None:
        return None
    milliseconds = parse_int(key, value)
    between(0, 2**63 - 1)(key, milliseconds)
    return split, milliseconds


def _check_mechanism(key: str, value: Any) -> None:
    if value not in MECHANISMS:
        raise ConfigError(
            f"{key}={value} is not supported (GSSAPI and OAUTHBEARER are not built); choose "
            f"among {', '.join(MECHANISMS)}",
            key=key,
            value=value,
        )


def _check_mechanisms(key: str, value: Any) -> None:
    unknown = [m for m in value if m not in MECHANISMS]
    if unknown:
        hint = " (GSSAPI and OAUTHBEARER are not built)" if unknown else ""
        raise ConfigError(
            f"{key}: {', '.join(unknown)} not supported{hint}; choose among "
            f"{', '.join(MECHANISMS)}",
            key=key,
            value=",".join(value),
        )
    if not value:
        raise ConfigError(f"{key} must name at least one mechanism", key=key, value=value)


@dataclasses.dataclass(frozen=True)
class SaslConfig(Config):
    """SASL on the broker's SASL_PLAINTEXT listeners."""

    component = "SASL"

    sasl_enabled_mechanisms: tuple[str, ...] = setting(
        "sasl.enabled.mechanisms",
        ("SCRAM-SHA-256", "SCRAM-SHA-512"),
        "The SASL mechanisms a SASL listener accepts: SCRAM-SHA-256, SCRAM-SHA-512 and, only "
        "when listed, PLAIN (it sends the password itself).",
        parse=lambda key, value: tuple(m.upper() for m in parse_list(key, value)),
        check=_check_mechanisms,
    )

    connection_failed_authentication_delay_ms: int = setting(
        "connection.failed.authentication.delay.ms",
        100,
        "How long the broker waits before it answers a failed authentication and closes the "
        "connection (Kafka's default): slows down password guessing without holding a "
        "thread. 0: answer at once.",
        parse=parse_int,
        check=between(0, 60_000),
    )

    connections_max_reauth_ms: int = setting(
        "connections.max.reauth.ms",
        0,
        "Kafka's (KIP-368): above 0, the longest a SASL connection's session lasts after it "
        "authenticated (the SaslAuthenticate response tells the client, as "
        "session_lifetime_ms). The client re-authenticates on the same connection before "
        "then; a connection whose session expired is closed at its next request other than "
        "SaslHandshake, so a user removed or whose password changed loses its connections "
        "within this time. 0 (the default): sessions do not expire.",
        parse=parse_int,
        check=between(0, 2**63 - 1),
    )

    sasl_server_max_receive_size: int = setting(
        "sasl.server.max.receive.size",
        524_288,
        "Kafka's key and default (512 KiB): on a SASL listener, the largest frame a "
        "connection may send before it has authenticated. A larger size prefix closes the "
        "connection at once, so unauthenticated peers cannot hold the queued.max.request.bytes "
        "memory pool (a size prefix reserves its frame's bytes there) and stall every other "
        "client.",
        parse=parse_int,
        check=between(1024, 2**31 - 1),
    )

    delegation_token_expiry_time_ms: int = setting(
        "delegation.token.expiry.time.ms",
        86_400_000,
        "Kafka's key and default (24 hours): an embedded broker's token (the one its token "
        "listener for Spark executors accepts) expires this long after it was made or last "
        "renewed; every request for the listener (a Spark driver planning a batch or "
        "creating a writer) renews it. Raise it for batch jobs whose tasks still connect "
        "longer than this after the job was planned.",
        parse=parse_int,
        check=between(1, 2**63 - 1),
    )

    sasl_mechanism_inter_broker_protocol: str = setting(
        "sasl.mechanism.inter.broker.protocol",
        "SCRAM-SHA-512",
        "The SASL mechanism of a broker's connections to the other brokers when "
        "inter.broker.listener.name is a SASL listener; it must be in sasl.enabled.mechanisms. "
        "The broker's user and password come from "
        "listener.name.<listener>.<mechanism>.sasl.jaas.config.",
        parse=lambda key, value: str(value).strip().upper(),
        check=_check_mechanism,
    )

    @classmethod
    def owns(cls, key: str) -> bool:
        """Whether ``key`` (dotted or underscored) is one of these settings."""
        settings: dict[str, Any] = cls.settings()
        return key in settings or key.replace("_", ".") in settings
