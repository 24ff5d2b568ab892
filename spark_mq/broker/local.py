"""The embedded local broker of a directory: find it, start it, stop it, ask how it is.

docs/architecture.md, "One owner per log directory": a client given ``path=DIR`` talks to the
broker that owns DIR and starts one if none runs. The broker is a detached process
(``python -m spark_mq.broker --log-dir DIR --local``, in its own session, stdio to
``DIR/broker.out``) that takes the directory's exclusive lock, recovers the log, listens on a
Unix socket, records it in ``DIR/broker.json`` and exits after ``broker.idle.exit.ms`` (60 s
by default) with no connection and no request.

Who may use it: the socket is 0600 and everything in the directory is its owner's only
(a directory created here is 0700; the broker's umask is 077), so other local users can
neither connect nor read the data. The broker listens on TCP only when ``config`` asks
(``listeners=UNIX://,PLAINTEXT://127.0.0.1:0``), since any local user can connect to a
loopback port and nothing there authenticates clients yet.

How :func:`ensure_broker` copes with the world:

- **stale broker.json** (the broker was killed): its pid is dead, or the socket refuses the
  connection, or the broker answering has another epoch: not trusted, a new broker is started.
  The new broker gets the lock (the kernel freed it with the dead process), recovers the log,
  increments the epoch and overwrites ``broker.json``.
- **a broker starting up** (recovering a large log, no ``broker.json`` yet): the starter waits
  for it; the new process it may have spawned waits for the lock and then exits quietly.
- **a broker shutting down because it was idle**: it removes ``broker.json`` first, so the
  client starts a new broker, which waits for the old one to release the lock. A client that
  connected in the last moment sees its connection closed and calls ensure_broker again.
- **many processes at once**: starters serialise on ``DIR/.start.lock`` (flock), re-checking
  for a live broker after taking it, so normally one process spawns one broker; and if two
  brokers are started anyway, only the lock winner serves and the others exit with status 0.
- **a broker that holds DIR but does not answer** (paused with SIGSTOP, swapping, stuck): its
  pid is alive, it owns the lock and its ``broker.json`` is published, so a broker started
  now could only wait for the lock and would take the directory over whenever the owner
  stops, even when it was stopped on purpose (``stop_broker``) and nobody wants a broker any
  more. It is waited for until the caller's timeout, then BrokerNotAvailableError
  (retriable) names it; nothing is spawned.
- **a broker that cannot start** (a port taken, a damaged file): reported in one line, the
  cause it wrote last to its stderr since this start and where its log is. Settings kept in
  the directory (``server.properties``) are checked before a broker is spawned.
- **a path that holds no log**: refused with ``create=False`` (reading clients), see
  :mod:`spark_mq.broker.log_dir`.

Every check ends with a handshake (ApiVersions over the recorded socket, epoch compared), so
a returned address was serving a moment ago. ``broker.json`` is only ever a hint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from spark_mq.broker.config import LOCAL_DEFAULTS, ServerConfig
from spark_mq.broker.dir_files import Endpoint, pid_alive
from spark_mq.broker.embedded_token import TOKEN_FILE, EmbeddedToken
from spark_mq.broker.log_dir import START_LOCK_FILE, require_log_dir
from spark_mq.broker.log_setup import FAILURE_PREFIX, LOG_FILE
from spark_mq.broker.persisted_config import load_persisted
from spark_mq.errors import (
    BrokerNotAvailableError,
    ConfigError,
    CorruptCheckpointError,
    RequestTimedOutError,
    SparkMQError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import APIS, ApiKey, encode_request
from spark_mq.protocol.api_versions import ApiVersionsRequest, ApiVersionsResponse
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.framing import SIZE, decode_response
from spark_mq.protocol.token_listener import OpenTokenListenerRequest, OpenTokenListenerResponse
from spark_mq.storage.dir_lock import LOCK_FILE_NAME, read_owner

OUT_FILE: Final = "broker.out"
#: broker.out (stdio of the detached process: only what escapes logging) is truncated at
#: the next start once it is this large.
MAX_OUT_BYTES: Final = 1024 * 1024
#: How much of broker.out a failed start's cause is looked for in.
MAX_CAUSE_BYTES: Final = 64 * 1024
#: The broker's exit status for a configuration error (``spark_mq.broker.main``).
EXIT_CONFIG: Final = 2
HANDSHAKE_TIMEOUT_S: Final = 5.0
_POLL_S: Final = 0.02


@dataclasses.dataclass(frozen=True)
class BrokerStatus:
    """The broker that owns a directory, as seen from outside.

    ``state`` is ``"serving"`` (it answered a handshake), ``"starting or stopping"`` (it
    holds the lock but has no endpoint yet or any more) or ``"not responding"``.
    """

    pid: int
    state: str
    epoch: int | None
    addresses: tuple[BrokerAddress, ...]
    started_ms: int | None


def _round_trip(address: BrokerAddress, request: Any, key: ApiKey, timeout_s: float) -> Any:
    """One request and its response over a fresh connection."""
    sock = address.connect(timeout_s)
    try:
        sock.settimeout(timeout_s)
        head, body = encode_request(request, correlation_id=1, client_id="ensure_broker")
        sock.sendall(head + body)
        size = SIZE.unpack(_recv_exactly(sock, SIZE.size))[0]
        if not 0 <= size <= 16 * 1024 * 1024:
            raise BrokerNotAvailableError(f"{address} answered with a {size}-byte frame")
        frame = decode_response(_recv_exactly(sock, size))
        if frame.frame_error:
            raise BrokerNotAvailableError(f"{address} refused {key.name} ({frame.frame_error})")
        return APIS[key].decode_response(frame.body)
    finally:
        sock.close()


def handshake(address: BrokerAddress, timeout_s: float) -> ApiVersionsResponse:
    """One ApiVersions round trip over a fresh connection (any listener answers it before
    authentication): BrokerNotAvailableError saying why when ``address`` does not answer."""
    response: ApiVersionsResponse = _round_trip(
        address, ApiVersionsRequest(), ApiKey.API_VERSIONS, timeout_s
    )
    return response


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise BrokerNotAvailableError("the broker closed the connection mid-handshake")
        buf += chunk
    return bytes(buf)


def _probe(
    root: Path, timeout_s: float = HANDSHAKE_TIMEOUT_S
) -> tuple[BrokerAddress, Endpoint] | None:
    """The address of the live broker of ``root`` (handshake done), or None."""
    endpoint = Endpoint.read(root)
    if endpoint is None or not pid_alive(endpoint.pid):
        return None
    for address in endpoint.addresses:
        try:
            response = handshake(address, timeout_s)
        except (SparkMQError, OSError):
            continue
        if response.broker_epoch == endpoint.epoch:
            return address, endpoint
    return None


def _handshake_timeout_s(deadline: float) -> float:
    """A handshake's timeout that ends by ``deadline`` (a paused broker must not hold a
    caller past its own timeout)."""
    return max(min(HANDSHAKE_TIMEOUT_S, deadline - time.monotonic()), 0.001)


def _lock_held(root: Path) -> bool:
    """Whether some process holds the directory's lock (tested without taking it for long)."""
    try:
        fd = os.open(root / LOCK_FILE_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the lock if we got it
    return False


def _unanswering_owner(root: Path) -> int | None:
    """The pid of a broker that owns ``root`` and has published its endpoint but did not
    answer the last probe; None when the endpoint is missing or stale (its pid is dead, the
    lock file names another process, or nobody holds the lock: a killed broker whose pid
    was reused).

    The test a starting ``--local`` broker makes before it exits as the loser of a race
    (``spark_mq.broker.main``), plus the lock itself: a broker that passes it still owns the
    directory, so starting another cannot help."""
    endpoint = Endpoint.read(root)
    if endpoint is None or not pid_alive(endpoint.pid):
        return None
    owner = read_owner(root)
    if owner is None or owner.pid != endpoint.pid or not _lock_held(root):
        return None
    return endpoint.pid


@contextlib.contextmanager
def _start_lock(root: Path, deadline: float) -> Iterator[bool]:
    """Yield True holding ``DIR/.start.lock``, or False (not holding it) if a live broker
    appeared while waiting for it. Raises BrokerNotAvailableError at the deadline."""
    fd = os.open(root / START_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if _probe(root, _handshake_timeout_s(deadline)) is not None:
                    yield False
                    return
                if time.monotonic() > deadline:
                    raise BrokerNotAvailableError(
                        f"timed out waiting for another process to start the broker of {root}; "
                        f"see {root / 'broker.log'}"
                    ) from None
                time.sleep(_POLL_S)
        yield True
    finally:
        os.close(fd)


def _package_root() -> str:
    # spark_mq/broker/local.py: the directory that holds the spark_mq package.
    return str(Path(__file__).resolve().parents[2])


def _spawn(root: Path, config: Mapping[str, str] | None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "spark_mq.broker", "--log-dir", str(root), "--local"]
    for key, value in (config or {}).items():
        cmd += ["--override", f"{key}={value}"]
    out_path = root / OUT_FILE
    with contextlib.suppress(FileNotFoundError):
        if out_path.stat().st_size > MAX_OUT_BYTES:
            out_path.unlink()
    env = dict(os.environ)
    # The broker must import the same spark_mq as this process, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_package_root(), env.get("PYTHONPATH")]))
    out_fd = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    with open(out_fd, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
            cwd="/",
            env=env,
        )
    # Reap it whenever it exits, so a long-lived client never keeps a zombie around.
    threading.Thread(target=proc.wait, name=f"reap-broker-{proc.pid}", daemon=True).start()
    return proc


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _failure_cause(root: Path, out_start: int) -> str:
    """Why the broker just started failed, in one line: the last line it wrote to its stderr
    from ``out_start`` on (a failing broker writes ``FAILURE_PREFIX`` + cause last; a crash
    ends with the exception's line)."""
    try:
        with open(root / OUT_FILE, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            # Smaller than before the start: it was truncated when the broker was spawned.
            start = out_start if size >= out_start else 0
            begin = max(start, size - MAX_CAUSE_BYTES)
            f.seek(begin)
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return "it gave no reason"
    if begin > start:
        lines = lines[1:]  # the first one was cut
    lines = [line.strip() for line in lines if line.strip()]
    for line in reversed(lines):
        if line.startswith(FAILURE_PREFIX):
            return line[len(FAILURE_PREFIX) :]
    return lines[-1] if lines else "it gave no reason"


def _wait_ready(
    root: Path, proc: subprocess.Popen[bytes], deadline: float, out_start: int
) -> BrokerAddress | None:
    """The address once a broker serves ``root``; None if ``proc`` exited quietly (it lost
    a race, or went idle); raises if it failed or the deadline passes."""
    while True:
        found = _probe(root, _handshake_timeout_s(deadline))
        if found is not None:
            return found[0]
        code = proc.poll()
        if code == 0:
            return None
        if code is not None:
            if code < 0:
                cause = f"it was killed by {signal.Signals(-code).name}"
            else:
                cause = _failure_cause(root, out_start)
            message = (
                f"the broker for {root} could not start: {cause} (exit status {code}; full "
                f"log: {root / LOG_FILE}, output: {root / OUT_FILE})"
            )
            if code == EXIT_CONFIG:
                raise ConfigError(message)
            raise BrokerNotAvailableError(message)
        if time.monotonic() > deadline:
            raise BrokerNotAvailableError(
                f"the broker for {root} (pid {proc.pid}) did not start serving in time; it may "
                f"still be recovering a large log: see {root / 'broker.log'}, then retry"
            )
        time.sleep(_POLL_S)


def ensure_broker(
    path: str | os.PathLike[str],
    *,
    timeout_ms: int = 30000,
    config: Mapping[str, str] | None = None,
    create: bool = True,
) -> BrokerAddress:
    """The address of the broker that owns directory ``path``, starting one if none runs.

    ``config`` holds broker properties for a broker this call starts (Kafka's key names,
    e.g. ``{"broker.idle.exit.ms": "300000"}``, or
    ``{"listeners": "UNIX://,PLAINTEXT://127.0.0.1:0"}`` for a TCP listener too), over the
    settings kept in the directory (``DIR/server.properties``); a broker already running
    keeps its own. ``create=False`` (what reading clients pass) refuses a path that holds no
    log yet instead of creating it. Returns the Unix socket address (a TCP one, if asked
    for, is in :func:`broker_status`). Raises
    :class:`~spark_mq.errors.BrokerNotAvailableError` (retriable) if no broker serves within
    ``timeout_ms`` or the broker started failed (the message gives its cause and where its
    log is), :class:`~spark_mq.errors.ConfigError` for a bad ``config`` or kept setting, and
    :class:`~spark_mq.errors.LogDirectoryNotFoundError` for a path that is a file, or holds
    no log when ``create`` is False.

        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> address = ensure_broker(d)
        >>> address == ensure_broker(d)
        True
        >>> stop_broker(d)
        True
    """
    root = Path(path).resolve()
    ServerConfig.from_properties({**LOCAL_DEFAULTS, **(config or {}), "log.dirs": str(root)})
    # A directory created here is the owner's only (log_dir.require_log_dir), as
    # everything the broker creates in it; one that exists keeps its mode (see
    # dir_files.exposure_warning).
    require_log_dir(root, create=create)
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        found = _probe(root, _handshake_timeout_s(deadline))
        if found is not None:
            return found[0]
        if _wait_for_owner(root, deadline):
            continue
        with _start_lock(root, deadline) as holding:
            if not holding:
                continue
            found = _probe(root, _handshake_timeout_s(deadline))
            if found is not None:
                return found[0]
            if _wait_for_owner(root, deadline):
                continue
            kept = load_persisted(root)
            ServerConfig.from_properties(
                {**LOCAL_DEFAULTS, **kept, **(config or {}), "log.dirs": str(root)}
            )
            out_start = _size(root / OUT_FILE)
            proc = _spawn(root, config)
            address = _wait_ready(root, proc, deadline, out_start)
            if address is not None:
                return address
        if time.monotonic() > deadline:
            raise BrokerNotAvailableError(f"no broker could be started for {root} in time")


def _wait_for_owner(root: Path, deadline: float) -> bool:
    """After a failed probe: True (having paused a moment) when a live broker still owns
    ``root`` and is only slow to answer, so the caller probes again instead of starting a
    broker (see the module docstring); raises BrokerNotAvailableError once ``deadline``
    passes. False when no broker owns it, and one may be started."""
    pid = _unanswering_owner(root)
    if pid is None:
        return False
    if time.monotonic() > deadline:
        raise BrokerNotAvailableError(
            f"the broker of {root} (pid {pid}) owns the directory but did not answer in time; "
            f"it may be paused, overloaded or stuck (see {root / LOG_FILE}). Retry later, or "
            f"stop it ('kill -9 {pid}' if it hangs: the log recovers at the next start)"
        )
    time.sleep(_POLL_S)
    return True


def open_token_listener(
    path: str | os.PathLike[str], host: str, *, timeout_ms: int = 30000, create: bool = True
) -> tuple[BrokerAddress, BrokerAddress, EmbeddedToken]:
    """Make the broker of directory ``path`` (found or started, as :func:`ensure_broker`)
    listen on TCP at ``host`` for Spark executors: ``(its Unix socket, the token listener,
    the token)``. Only the directory's token authenticates there (SASL SCRAM with
    ``tokenauth=true``; docs/security.md, "The embedded broker's token"). Asking again
    returns the same listener while the broker runs. Raises what :func:`ensure_broker`
    raises, :class:`~spark_mq.errors.ConfigError` for a host the broker cannot listen on,
    :class:`~spark_mq.errors.CorruptCheckpointError` naming ``DIR/embedded-token.json`` if
    that cannot be read as a token (the broker could not renew it either; deleting it makes
    the broker issue a new one), and :class:`~spark_mq.errors.ClusterAuthorizationError` if
    the broker refuses (a cluster broker holds the directory).
    """
    root = Path(path).resolve()
    deadline = time.monotonic() + timeout_ms / 1000
    unix = ensure_broker(root, timeout_ms=timeout_ms, create=create)
    # Read here first: the broker would fail on it too, but its answer is a storage error
    # code, and the caller must tell a token it cannot use from a broker it cannot reach.
    _read_token(root)
    response: OpenTokenListenerResponse = _round_trip(
        unix,
        OpenTokenListenerRequest(host),
        ApiKey.OPEN_TOKEN_LISTENER,
        _handshake_timeout_s(deadline),
    )
    if response.error_code == ErrorCode.INVALID_REQUEST:
        raise ConfigError(
            f"the broker of {root} cannot listen for executors: {response.error_message}",
            key="host",
            value=host,
        )
    if response.error_code:
        raise error_from_code(response.error_code, response.error_message)
    token = _read_token(root)
    if token is None:
        raise BrokerNotAvailableError(
            f"the broker of {root} opened a token listener but {root / TOKEN_FILE} is gone "
            "(deleted meanwhile?); retry"
        )
    return unix, BrokerAddress(host=response.host, port=response.port), token


def _read_token(root: Path) -> EmbeddedToken | None:
    """The directory's token; CorruptCheckpointError naming the file if it is not one or
    cannot be read."""
    try:
        return EmbeddedToken.read(root)
    except OSError as exc:
        path = root / TOKEN_FILE
        raise CorruptCheckpointError(
            f"{path} cannot be read ({exc.strerror or exc}); delete it and the broker makes a "
            "new one when a Spark query next needs its TCP listener",
            path=str(path),
        ) from exc


def broker_status(path: str | os.PathLike[str]) -> BrokerStatus | None:
    """How the broker of directory ``path`` is doing; None if no process owns it."""
    root = Path(path).resolve()
    if not _lock_held(root):
        return None
    found = _probe(root)
    if found is not None:
        _, live = found
        return BrokerStatus(live.pid, "serving", live.epoch, tuple(live.addresses), live.started_ms)
    recorded = Endpoint.read(root)
    owner = read_owner(root)
    if (
        recorded is not None
        and pid_alive(recorded.pid)
        and (owner is None or owner.pid == recorded.pid)
    ):
        return BrokerStatus(
            recorded.pid,
            "not responding",
            recorded.epoch,
            tuple(recorded.addresses),
            recorded.started_ms,
        )
    pid = owner.pid if owner is not None else -1
    start = owner.start_time_ms if owner is not None else None
    return BrokerStatus(pid, "starting or stopping", None, (), start)


def stop_broker(path: str | os.PathLike[str], *, timeout_ms: int = 30000) -> bool:
    """Stop the broker that owns directory ``path`` (SIGTERM: a clean shutdown).

    Returns True once it has released the directory, False if no broker owned it. Raises
    :class:`~spark_mq.errors.RequestTimedOutError` if it still holds the directory after
    ``timeout_ms`` (it may be finishing a long request; ``kill -9`` it if it hangs: the log
    is recovered at the next start).
    """
    root = Path(path).resolve()
    status = broker_status(root)
    if status is None:
        return False
    if status.pid <= 0:
        raise BrokerNotAvailableError(
            f"a process holds {root} but has not recorded its pid yet; retry in a moment"
        )
    with contextlib.suppress(ProcessLookupError):
        os.kill(status.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_ms / 1000
    while _lock_held(root):
        if time.monotonic() > deadline:
            raise RequestTimedOutError(
                f"the broker of {root} (pid {status.pid}) did not stop within {timeout_ms} ms; "
                f"kill it with 'kill -9 {status.pid}' if it hangs (the log recovers on restart)"
            )
        time.sleep(_POLL_S)
    return True
