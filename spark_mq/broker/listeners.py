"""Kafka's listener model: ``listeners=NAME://host:port,...`` and the security protocol of
each name.

A listener's NAME is a security protocol (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``,
``SASL_SSL``) or any name that ``listener.security.protocol.map`` maps to one
(``INTERNAL:SSL,EXTERNAL:SASL_SSL``); Kafka's default map maps each protocol to itself.
spark_mq adds ``UNIX://path``, a local socket whose file permissions (mode 0600) are its
protection, so it is PLAINTEXT. Names are unique within ``listeners``; the broker registers
one endpoint per listener name, and a client's Metadata answer lists every broker's endpoint
of the listener the client connected through, as Kafka's does.

    >>> Listener.parse("INTERNAL://10.0.0.1:9093", {"INTERNAL": "SSL"})
    Listener(scheme='INTERNAL', host='10.0.0.1', port=9093, unix_path=None, security_protocol='SSL')
    >>> str(Listener.parse("SSL://:9094"))
    'SSL://0.0.0.0:9094'
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Final

from spark_mq.errors import ConfigError
from spark_mq.tls import SECURITY_PROTOCOLS, TLS_PROTOCOLS

#: The protocols on which a connection authenticates with SASL first.
SASL_PROTOCOLS: Final = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})

#: spark_mq's local-socket listener.
UNIX: Final = "UNIX"
#: Kafka's default listener.security.protocol.map: each protocol names itself.
DEFAULT_PROTOCOL_MAP: Final[Mapping[str, str]] = {p: p for p in SECURITY_PROTOCOLS}
#: Kafka's listener names: letters, digits, underscores and hyphens.
_NAME: Final = re.compile(r"^[A-Z0-9_-]+$")


@dataclasses.dataclass(frozen=True, slots=True)
class Listener:
    """One listener: ``NAME://host:port`` (port 0 = ephemeral) or ``UNIX://path``.
    ``scheme`` is the listener name."""

    scheme: str
    host: str = ""
    port: int = 0
    unix_path: str | None = None
    security_protocol: str = "PLAINTEXT"

    @property
    def name(self) -> str:
        return self.scheme

    @property
    def sasl_required(self) -> bool:
        """Whether a connection must authenticate with SASL before other requests."""
        return self.security_protocol in SASL_PROTOCOLS

    @property
    def tls(self) -> bool:
        """Whether connections on this listener speak TLS."""
        return self.security_protocol in TLS_PROTOCOLS

    @classmethod
    def parse(
        cls,
        text: str,
        protocol_map: Mapping[str, str] = DEFAULT_PROTOCOL_MAP,
        *,
        key: str = "listeners",
    ) -> Listener:
        scheme, sep, rest = text.strip().partition("://")
        scheme = scheme.upper()
        if not sep or not (scheme == UNIX or _NAME.match(scheme)):
            raise ConfigError(
                f"listener {text!r} must look like PLAINTEXT://127.0.0.1:9092, SSL://:9093, "
                "NAME://host:port with NAME in listener.security.protocol.map, or UNIX://"
                "/path/to.sock (UNIX:// alone: the log directory's default socket)",
                key=key,
                value=text,
            )
        if scheme == UNIX:
            return cls(UNIX, unix_path=rest or None)
        protocol = protocol_map.get(scheme)
        if protocol is None:
            raise ConfigError(
                f"{key}: listener name {scheme} is not a security protocol "
                f"({', '.join(SECURITY_PROTOCOLS)}) and listener.security.protocol.map does not "
                f"map it to one (add e.g. {scheme}:SSL to listener.security.protocol.map)",
                key=key,
                value=text,
            )
        host, colon, port_text = rest.rpartition(":")
        if not colon or not (port_text.isascii() and port_text.isdigit()):
            raise ConfigError(
                f"listener {text!r} needs a port: {scheme}://host:port (0 picks a free one)",
                key=key,
                value=text,
            )
        port = int(port_text)
        if port > 65535:
            raise ConfigError(f"listener {text!r}: port {port} is above 65535", key=key, value=text)
        # Kafka: an empty host binds every interface.
        host = host.strip("[]") or "0.0.0.0"
        return cls(scheme, host=host, port=port, security_protocol=protocol)

    def __str__(self) -> str:
        if self.scheme == UNIX:
            return f"UNIX://{self.unix_path or ''}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_protocol_map(key: str, value: object) -> tuple[str, ...]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL,...``, kept as its items."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(
            f"{key} must be NAME:PROTOCOL,... e.g. INTERNAL:SSL,EXTERNAL:SASL_SSL",
            key=key,
            value=value,
        )
    out = []
    for raw in items:
        item = str(raw).strip()
        if not item:
            continue
        name, colon, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not colon or not _NAME.match(name) or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{key}: {item!r} must be NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(SECURITY_PROTOCOLS)}",
                key=key,
                value=value,
            )
        out.append(f"{name}:{protocol}")
    names = [item.partition(":")[0] for item in out]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"{key} maps {', '.join(repeated)} twice", key=key, value=value)
    return tuple(out)


def protocol_map_of(items: tuple[str, ...]) -> dict[str, str]:
    """The parsed ``listener.security.protocol.map`` as name -> protocol."""
    return dict(item.split(":", 1) for item in items)


def check_listener_syntax(key: str, value: Any) -> None:
    """What can be checked of ``listeners`` without the protocol map: each item parses
    (with every name allowed), at most one UNIX listener, no name twice."""
    if not value:
        raise ConfigError(f"{key} must name at least one listener", key=key, value=value)
    parsed = [Listener.parse(item, _AnyName(), key=key) for item in value]
    names = [listener.scheme for listener in parsed]
    if names.count(UNIX) > 1:
        raise ConfigError(f"{key} may hold at most one UNIX listener", key=key, value=value)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(
            f"{key} names listener {', '.join(repeated)} twice: each listener needs its own "
            "name (map extra names in listener.security.protocol.map, e.g. INTERNAL:SSL)",
            key=key,
            value=",".join(value),
        )


class _AnyName(dict[str, str]):
    """A protocol map that accepts any name (syntax checks before the real map is known)."""

    def get(self, key: str, default: Any = None) -> str:
        return DEFAULT_PROTOCOL_MAP.get(key, "PLAINTEXT")
