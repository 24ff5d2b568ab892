"""Where a broker listens: a TCP ``host:port`` or a local (Unix domain) socket.

>>> BrokerAddress.parse("localhost:9092")
BrokerAddress(host='localhost', port=9092, unix_path=None)
>>> str(BrokerAddress.parse("unix:/tmp/mq/broker.sock"))
'unix:/tmp/mq/broker.sock'
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from spark_mq.errors import BrokerNotAvailableError, ConfigError

UNIX_PREFIX = "unix:"


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """A broker endpoint; exactly one of (``host``, ``port``) or ``unix_path`` is used."""

    host: str = ""
    port: int = 0
    unix_path: str | None = None

    @classmethod
    def parse(cls, text: str) -> BrokerAddress:
        """Parse ``host:port``, ``[ipv6]:port`` or ``unix:/path/to/socket``."""
        text = text.strip()
        if text.startswith(UNIX_PREFIX):
            path = text[len(UNIX_PREFIX) :]
            if not path:
                raise ConfigError(
                    "a unix: address needs a socket path, e.g. unix:/tmp/mq/broker.sock",
                    key="bootstrap.servers",
                    value=text,
                )
            return cls(unix_path=path)
        host, sep, port_text = text.rpartition(":")
        # str.isdigit() accepts non-ASCII digits ("²", "٩") that int() refuses or misreads.
        port_ok = port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536
        bracketed = host.startswith("[") and host.endswith("]")
        if bracketed:
            host = host[1:-1]
        # An IPv6 host needs its brackets: in "fe80::1:9092" the port cannot be told apart.
        host_ok = bool(host) and "[" not in host and "]" not in host
        if not sep or not port_ok or not host_ok or (":" in host and not bracketed):
            raise ConfigError(
                f"broker address {text!r} is not host:port (for example localhost:9092, "
                "or [::1]:9092 for IPv6)",
                key="bootstrap.servers",
                value=text,
            )
        return cls(host=host, port=int(port_text))

    @classmethod
    def parse_list(cls, text: str | list[str] | tuple[str, ...]) -> list[BrokerAddress]:
        """Parse ``bootstrap.servers``: a comma-separated string or a list."""
        items = text.split(",") if isinstance(text, str) else list(text)
        addresses = [cls.parse(item) for item in items if item.strip()]
        if not addresses:
            raise ConfigError(
                "bootstrap.servers is empty: give at least one host:port",
                key="bootstrap.servers",
                value=text,
            )
        return addresses

    def __str__(self) -> str:
        if self.unix_path is not None:
            return UNIX_PREFIX + self.unix_path
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def connect(self, timeout_s: float | None = 10.0) -> socket.socket:
        """Open a blocking stream socket to the broker (TCP_NODELAY set on TCP)."""
        try:
            if self.unix_path is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(timeout_s)
                    sock.connect(self.unix_path)
                except BaseException:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection((self.host, self.port), timeout=timeout_s)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise BrokerNotAvailableError(
                f"cannot connect to broker at {self}: {exc.strerror or exc}; "
                "is it running and is the address right?"
            ) from exc
        sock.settimeout(None)
        return sock
