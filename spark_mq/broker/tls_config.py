"""A broker's TLS settings: ``ssl.*`` for every TLS listener (and for the broker's own
connections to other brokers over an SSL inter-broker listener), and Kafka's per-listener
overrides ``listener.name.<name>.ssl.*``.

The keys, their defaults and their meaning are those of :mod:`spark_mq.tls`. A listener
named ``INTERNAL`` takes ``listener.name.internal.ssl.certificate.location`` over
``ssl.certificate.location`` (the name is matched without regard to case, as Kafka writes
it in lower case); every key it does not override comes from the ``ssl.*`` settings.

    >>> cfg = BrokerTlsConfig.from_properties({"ssl.client.auth": "required"})
    >>> cfg.tls_settings().client_auth
    'required'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from spark_mq.config import Config, one_of, parse_list, parse_str, setting
from spark_mq.errors import ConfigError
from spark_mq.tls import (
    CLIENT_AUTH_CHOICES,
    DEFAULT_PROTOCOLS,
    HTTPS,
    TlsSettings,
    check_endpoint_identification,
    parse_protocols,
)

#: The prefix of a per-listener override: ``listener.name.<name>.ssl.<setting>``.
LISTENER_PREFIX: Final = "listener.name."


@dataclasses.dataclass(frozen=True)
class BrokerTlsConfig(Config):
    """The ``ssl.*`` settings of the broker's TLS listeners and inter-broker connections."""

    component = "broker TLS"

    ssl_certificate_location: str = setting(
        "ssl.certificate.location",
        "",
        "The broker's certificate chain (PEM), shown on SSL and SASL_SSL listeners and, as a "
        "client certificate, to other brokers over an SSL inter-broker listener.",
        parse=parse_str,
    )
    ssl_key_location: str = setting(
        "ssl.key.location",
        "",
        "The private key (PEM) of ssl.certificate.location. Empty: the key is in that file.",
        parse=parse_str,
    )
    ssl_key_password: str = setting(
        "ssl.key.password",
        "",
        "The password of an encrypted ssl.key.location.",
        parse=parse_str,
    )
    ssl_ca_location: str = setting(
        "ssl.ca.location",
        "",
        "CA certificates (PEM) that clients' certificates (ssl.client.auth) and other brokers' "
        "certificates must chain to.",
        parse=parse_str,
    )
    ssl_client_auth: str = setting(
        "ssl.client.auth",
        "none",
        "none: clients show no certificate; requested: a client may show one (and is then "
        "User:<its subject DN>); required: a client without a valid one is refused.",
        parse=lambda key, value: parse_str(key, value).lower(),
        check=one_of(*CLIENT_AUTH_CHOICES),
    )
    ssl_enabled_protocols: tuple[str, ...] = setting(
        "ssl.enabled.protocols",
        DEFAULT_PROTOCOLS,
        "TLS versions accepted: TLSv1.2 and TLSv1.3 (older ones are refused).",
        parse=parse_protocols,
    )
    ssl_cipher_suites: tuple[str, ...] = setting(
        "ssl.cipher.suites",
        (),
        "OpenSSL cipher names allowed for TLS 1.2. Empty: OpenSSL's secure defaults.",
        parse=parse_list,
    )
    ssl_endpoint_identification_algorithm: str = setting(
        "ssl.endpoint.identification.algorithm",
        HTTPS,
        "https: a broker connecting to another checks that the other's certificate names "
        "the host it connects to; empty: no check.",
        parse=parse_str,
        check=check_endpoint_identification,
    )

    @classmethod
    def owns(cls, key: str) -> bool:
        """Whether ``key`` is an ``ssl.*`` setting (dotted or underscored)."""
        settings: dict[str, Any] = cls.settings()
        return key in settings or key.replace("_", ".") in settings

    def tls_settings(self, key_prefix: str = "") -> TlsSettings:
        return TlsSettings(
            certificate_location=self.ssl_certificate_location,
            key_location=self.ssl_key_location,
            key_password=self.ssl_key_password,
            ca_location=self.ssl_ca_location,
            client_auth=self.ssl_client_auth,
            enabled_protocols=self.ssl_enabled_protocols,
            cipher_suites=self.ssl_cipher_suites,
            endpoint_identification_algorithm=self.ssl_endpoint_identification_algorithm,
            key_prefix=key_prefix,
        )


def split_listener_key(key: str) -> tuple[str, str] | None:
    """``listener.name.internal.ssl.key.location`` -> ("INTERNAL", "ssl.key.location");
    None for a key that is not a per-listener TLS override. Another
    ``listener.name.<name>.*`` key (a SASL setting, say) is not ours either."""
    if not key.lower().startswith(LISTENER_PREFIX):
        return None
    rest = key[len(LISTENER_PREFIX) :]
    name, dot, setting_key = rest.partition(".")
    if not dot or not name or not setting_key.startswith("ssl."):
        return None
    if not BrokerTlsConfig.owns(setting_key):
        raise ConfigError(
            f"unknown per-listener TLS setting {key!r}: listener.name.<name>. takes the ssl.* "
            f"keys ({', '.join(sorted(BrokerTlsConfig.settings()))})",
            key=key,
        )
    return name.upper(), setting_key


def listener_configs(
    base: Mapping[str, object], overrides: Mapping[str, Mapping[str, object]]
) -> dict[str, BrokerTlsConfig]:
    """The TLS config of each listener with overrides: the base ``ssl.*`` properties with
    the listener's own on top (errors name the per-listener key)."""
    out = {}
    for name, props in overrides.items():
        try:
            out[name] = BrokerTlsConfig.from_properties({**base, **props})
        except ConfigError as exc:
            key = f"{LISTENER_PREFIX}{name.lower()}.{exc.key}" if exc.key in props else exc.key
            raise ConfigError(f"listener {name}: {exc}", key=key, value=exc.value) from exc
    return out
