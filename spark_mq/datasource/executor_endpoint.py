"""How Spark executors reach the embedded broker of ``path``: resolved on the driver, never
by the executor.

docs/spark_source.md and docs/spark_sink.md, "Running on a Spark cluster". With
``.option("path", DIR)`` the driver finds (or starts) the broker that owns DIR and resolves
it to an :class:`ExecutorEndpoint`, which travels to the executors inside the input
partitions and the writer. An executor connects to what it names and to nothing else: it
never reads DIR and never starts a broker (one started on another host would split the data
silently, as a second owner of a directory on a shared filesystem).

``executor.endpoint`` (option of the source and the sink) says what the driver resolves to:

- ``auto`` (default): the broker's Unix socket, and its token listener on the driver's host
  address (:func:`driver_host`). An executor on the driver's host (same host name, socket
  file present) uses the socket; any other uses TCP with the token. (Spark's master is not
  known where the source and sink plan, so the listener is opened for every query; if the
  guessed address cannot be bound, or the directory's token file cannot be read, a warning
  says so and executors get the socket only.)
- ``unix``: the socket only; no TCP listener is opened. For ``local`` and ``local-cluster``
  masters, or any cluster whose executors all run on the driver's host.
- ``tcp``: the token listener only, also for executors on the driver's host: for executors
  that share the host but not its filesystem (containers), and to test the other-host path.
  A token file that cannot be read fails the query with
  :class:`~spark_mq.errors.CorruptCheckpointError` naming it (delete it: the broker makes a
  new token).

``executor.endpoint.host`` names the address the token listener binds and executors dial
(default :func:`driver_host`, the address Spark itself defaults ``spark.driver.host`` to; set
it to ``spark.driver.host`` when you set that, since the source and the sink run in Spark's
Python planner processes, which do not see the session's conf).

On the token listener a connection proves the directory's token with SASL SCRAM-SHA-512 and
``tokenauth=true`` (:mod:`spark_mq.broker.embedded_token`), as a Kafka client proves a
delegation token; the token travels inside the endpoint as a
:class:`~spark_mq.client.sasl.Password`, so it never shows in a printed plan or option.
Resolving renews the token (it expires ``delegation.token.expiry.time.ms``, 24 hours by
default, after the last renewal): a stream renews it at every micro-batch, a batch query
when it is planned.

Before its clients open, a task checks that the endpoint answers (one ApiVersions round trip,
at most :data:`REACH_TIMEOUT_S` per address). If none does it fails with
:class:`~spark_mq.errors.ExecutorEndpointError`, naming each address and why; it does not
wait for a broker to appear. A broker that dies later fails the task as its clients' requests
time out; the driver starts a new one when it next plans or commits, and Spark's retry (or a
restart of the query from its checkpoint) goes on from there.

>>> parse_executor_endpoint({"path": "/data/mq", "executor.endpoint": "TCP"})
('tcp', None)
>>> parse_executor_endpoint({"path": "/data/mq", "executor.endpoint": "ssh"})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
spark_mq.errors.ConfigError: option executor.endpoint='ssh' is not valid: use auto, unix or tcp ...
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Mapping
from typing import Final, Literal

from spark_mq.client.sasl import Password
from spark_mq.datasource.connection import PATH_OPTION, lookup
from spark_mq.errors import (
    ConfigError,
    CorruptCheckpointError,
    ExecutorEndpointError,
    SparkMQError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.token_listener import is_wildcard

log = logging.getLogger(__name__)

EndpointMode = Literal["auto", "unix", "tcp"]
MODE_OPTION: Final = "executor.endpoint"
HOST_OPTION: Final = "executor.endpoint.host"
MODES: Final[tuple[EndpointMode, ...]] = ("auto", "unix", "tcp")
#: How long a task waits for one address of the endpoint to answer before trying the next.
REACH_TIMEOUT_S: Final = 5.0
#: The SASL mechanism executors prove the token with.
TOKEN_MECHANISM: Final = "SCRAM-SHA-512"
#: Where Spark itself looks first for the driver's address (Utils.localHostName).
_SPARK_HOST_VARIABLES: Final = ("SPARK_LOCAL_HOSTNAME", "SPARK_LOCAL_IP")


def parse_executor_endpoint(options: Mapping[str, str]) -> tuple[EndpointMode, str | None]:
    """``executor.endpoint`` (auto, unix, tcp) and ``executor.endpoint.host`` from Spark
    options; ConfigError naming the option for a bad value."""
    text = lookup(options, MODE_OPTION)
    mode = (text or "auto").strip().lower()
    if mode not in MODES:
        raise ConfigError(
            f"option {MODE_OPTION}={text!r} is not valid: use auto, unix or tcp (how executors "
            "reach the embedded broker of path: docs/spark_source.md, 'Running on a Spark "
            "cluster')",
            key=MODE_OPTION,
            value=text,
        )
    host = lookup(options, HOST_OPTION)
    if host is not None:
        host = host.strip()
        if not host or any(c in host for c in " /,"):
            raise ConfigError(
                f"option {HOST_OPTION}={host!r} is not a host name or address: give the "
                "address executors reach the driver by (spark.driver.host)",
                key=HOST_OPTION,
                value=host,
            )
        if is_wildcard(host):
            raise ConfigError(
                f"option {HOST_OPTION}={host!r} is a wildcard address, which executors "
                "cannot dial: give the address they reach the driver by (spark.driver.host)",
                key=HOST_OPTION,
                value=host,
            )
        if mode == "unix":
            raise ConfigError(
                f"option {HOST_OPTION} is for the TCP listener, but {MODE_OPTION}=unix opens "
                f"none: remove one of them",
                key=HOST_OPTION,
                value=host,
            )
    if (text is not None or host is not None) and lookup(options, PATH_OPTION) is None:
        raise ConfigError(
            f"options {MODE_OPTION} and {HOST_OPTION} are for the embedded broker of "
            f'.option("path", DIR); with bootstrap.servers executors reach the brokers '
            "at their advertised addresses",
            key=MODE_OPTION if text is not None else HOST_OPTION,
            value=text if text is not None else host,
        )
    return mode, host


def driver_host() -> str:
    """The address executors reach this host by, as Spark defaults ``spark.driver.host``:
    ``SPARK_LOCAL_HOSTNAME``, else ``SPARK_LOCAL_IP``, else the address of the host's name,
    or, when that is a loopback address, of the interface outgoing traffic leaves by."""
    for variable in _SPARK_HOST_VARIABLES:
        value = os.environ.get(variable, "").strip()
        if value:
            return value
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        address = "127.0.0.1"
    if not address.startswith("127."):
        return address
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            # A UDP "connect" sends nothing: it only picks the route (TEST-NET-1 address).
            probe.connect(("192.0.2.1", 9))
            return str(probe.getsockname()[0])
    except OSError:
        return address


@dataclasses.dataclass(frozen=True)
class ExecutorEndpoint:
    """Where executors reach the broker of ``log_dir`` (see the module docstring); plain,
    picklable data, the token hidden."""

    log_dir: str
    mode: EndpointMode
    #: The driver's host name: an executor with the same one may use the Unix socket.
    driver_host_name: str
    unix_path: str | None = None
    #: The token listener, ``host:port``.
    tcp_address: str | None = None
    #: The client's ``sasl.jaas.config`` that proves the directory's token.
    token_jaas: Password | None = dataclasses.field(default=None, repr=False)

    def _candidates(self) -> list[tuple[BrokerAddress, dict[str, object]]]:
        """The addresses this executor may use, best first, with the client settings of
        each."""
        out: list[tuple[BrokerAddress, dict[str, object]]] = []
        same_host = socket.gethostname() == self.driver_host_name
        if self.unix_path and (self.mode == "unix" or (same_host and _exists(self.unix_path))):
            out.append(
                (
                    BrokerAddress(unix_path=self.unix_path),
                    {"bootstrap.servers": f"unix:{self.unix_path}"},
                )
            )
        if self.tcp_address and self.token_jaas is not None:
            out.append(
                (
                    BrokerAddress.parse(self.tcp_address),
                    {
                        "bootstrap.servers": self.tcp_address,
                        "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": TOKEN_MECHANISM,
                        "sasl.jaas.config": self.token_jaas,
                    },
                )
            )
        return out

    def client_properties(self) -> dict[str, object]:
        """The client settings of the first address that answers (runs on the executor).
        Raises ExecutorEndpointError naming every address tried and why."""
        from spark_mq.broker.local import handshake  # noqa: PLC0415 (the executor side only)

        candidates = self._candidates()
        failures: list[str] = []
        for address, props in candidates:
            try:
                handshake(address, REACH_TIMEOUT_S)
            except (SparkMQError, OSError) as exc:
                failures.append(f"{address}: {exc}")
                continue
            return props
        here = socket.gethostname()
        if not candidates:
            why = (
                f"{MODE_OPTION}=unix gives only the driver's Unix socket {self.unix_path}, "
                f"which an executor on another host ({here}, the driver is on "
                f"{self.driver_host_name}) or in another filesystem namespace cannot use; "
                f"set {MODE_OPTION} to auto or tcp"
            )
        else:
            why = "; ".join(failures)
        raise ExecutorEndpointError(
            f"this Spark executor (host {here}) cannot reach the broker of {self.log_dir} that "
            f"the driver (host {self.driver_host_name}) resolved: {why}. The driver's broker "
            "must be reachable from every executor (a firewall must let the token listener's "
            f"port through; {HOST_OPTION} sets the address executors dial). An executor never "
            "starts a broker of its own: if the broker died, the driver starts a new one when "
            "it next plans a batch or commits",
            log_dir=self.log_dir,
            addresses=tuple(str(a) for a, _ in candidates),
        )


def _exists(path: str) -> bool:
    try:
        os.stat(path)
    except OSError:
        return False
    return True


def resolve_executor_endpoint(
    path: str,
    mode: EndpointMode,
    host: str | None,
    *,
    create: bool,
    timeout_ms: int = 30000,
) -> ExecutorEndpoint:
    """On the driver: find or start the broker of ``path`` and, unless ``mode`` is unix,
    have it open its token listener on ``host`` (default :func:`driver_host`)."""
    from spark_mq.broker.embedded_token import TOKEN_FILE  # noqa: PLC0415
    from spark_mq.broker.local import open_token_listener  # noqa: PLC0415

    log_dir = os.path.abspath(path)
    if mode == "unix":
        return _unix_only(path, log_dir, mode, timeout_ms=timeout_ms, create=create)
    listen_on = host or driver_host()
    try:
        unix, tcp, token = open_token_listener(
            path, listen_on, timeout_ms=timeout_ms, create=create
        )
    except ConfigError as exc:
        if mode == "tcp" or host is not None:
            raise
        # auto with the guessed address: executors on this host still have the socket, and
        # one elsewhere fails naming it, with this warning in the driver's log to explain.
        log.warning(
            "spark_mq: the broker of %s cannot listen for executors on %s (%s); executors on "
            "other hosts cannot reach it: set %s to an address of this host",
            log_dir,
            listen_on,
            exc,
            HOST_OPTION,
        )
        return _unix_only(path, log_dir, mode, timeout_ms=timeout_ms, create=create)
    except CorruptCheckpointError as exc:
        if os.path.basename(exc.path) != TOKEN_FILE:
            raise  # another file of the directory: the broker itself cannot serve
        if mode == "tcp":
            raise CorruptCheckpointError(
                f"{MODE_OPTION}=tcp: executors reach the broker of {log_dir} only through "
                f"its token listener, which needs the directory's token, but {exc}",
                path=exc.path,
            ) from exc
        # auto promises the socket at least: the query runs for executors on this host.
        log.warning(
            "spark_mq: %s. Executors get the broker's Unix socket only (%s=auto): those on "
            "other hosts cannot reach it until the file is deleted",
            exc,
            MODE_OPTION,
        )
        return _unix_only(path, log_dir, mode, timeout_ms=timeout_ms, create=create)
    return ExecutorEndpoint(
        log_dir,
        mode,
        socket.gethostname(),
        unix_path=unix.unix_path if mode == "auto" else None,
        tcp_address=str(tcp),
        token_jaas=Password(token.jaas_config()),
    )


def _unix_only(
    path: str, log_dir: str, mode: EndpointMode, *, timeout_ms: int, create: bool
) -> ExecutorEndpoint:
    """The broker's Unix socket alone, for executors on the driver's host."""
    from spark_mq.broker.local import ensure_broker  # noqa: PLC0415

    unix = ensure_broker(path, timeout_ms=timeout_ms, create=create)
    return ExecutorEndpoint(log_dir, mode, socket.gethostname(), unix_path=unix.unix_path)
