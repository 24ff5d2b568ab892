"""One client connection to one broker: pipelined requests, responses in order.

Requests are written whole (``sendmsg`` of the head, the MessagePack body and the raw record
batches, with no joining copy) and recorded in an in-flight queue with their correlation id
and a caller-supplied context. The broker answers requests of one connection in the order it
received them, so responses are matched against the head of that queue; a mismatch means the
stream is corrupt and the connection is closed.

Receiving reads into a fixed receive buffer with ``recv_into``; each frame's size prefix is
checked against ``receive.message.max.bytes`` before anything of it is kept. Small frames are
decoded in place (their records section, if any, is copied out because the buffer is reused);
a frame larger than half the buffer, typically a fetch response, gets a buffer of its own that
it is read into directly and then handed over whole, so Arrow arrays decoded from its records
reference it with no copy. That buffer is allocated without zeroing it (numpy ``empty``), and
after a large frame the next read takes only the next size prefix, so that a run of fetch
responses is not first read into the receive buffer and copied out again.

A connection that fails (the peer closed it, a socket error, a timeout writing) raises
:class:`~spark_mq.errors.NetworkError` (retriable) and is closed; :meth:`close` returns the
contexts of the requests that got no answer so the owner can retry them. A response whose
``frame_error`` is set (the broker could not parse the request) is delivered as a
:class:`Response` carrying the typed error.

TLS (``security.protocol`` SSL or SASL_SSL): the socket is wrapped with the client's
``ssl.SSLContext`` and the handshake runs within ``socket.connection.setup.timeout.ms``,
checking the broker's host name unless the context turns that off. A refused handshake (an
expired or unknown certificate, a host name the certificate does not list, a broker that
wants a client certificate) raises :class:`~spark_mq.errors.SslAuthenticationError`, which
is not retried. A TLS socket cannot ``sendmsg``: each buffer is sent in turn (one TLS record
per 16 KiB), and every read drains what the TLS layer has already decrypted, so that a
``select`` on the socket never waits for bytes that were read already.

SASL re-authentication (Kafka's KIP-368): when the broker gives the session a lifetime
(``session_lifetime_ms``, from its ``connections.max.reauth.ms``), the connection runs the
SASL exchange again on the same socket once a random 85-95 % of the lifetime has passed, as
Kafka's clients do (the spread keeps a client's connections from all re-authenticating at
once; the rest leaves room for the exchange before the broker's deadline). It does so in
:meth:`BrokerConnection.send`, before writing the next request and only when nothing is in
flight, so no response is ever waiting behind the exchange and the owner, which waits on the
socket, never misses one; an owner that pipelines stops adding requests to a connection
that is due (:attr:`BrokerConnection.reauthentication_due`) until its responses are in.
A refusal (a user removed, or whose password changed) raises AuthenticationError from that
``send`` and closes the connection, as a refused first authentication does.

Threads: a connection belongs to one thread at a time; it has no lock.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import random
import select
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import msgspec
import numpy as np

from spark_mq.client.sasl import SaslCredentials
from spark_mq.errors import CorruptFrameError, NetworkError, SparkMQError, SslAuthenticationError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import ApiSpec, decode_frame_error, encode_request, spec_for_request
from spark_mq.protocol.error_codes import error_from_code
from spark_mq.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    SIZE,
    decode_response,
    frame_size,
)
from spark_mq.tls import describe_tls_failure, is_authentication_failure

#: Bytes of the reusable receive buffer.
RECEIVE_BUFFER_BYTES = 256 * 1024
#: sendmsg takes at most IOV_MAX (1024 on Linux) buffers per call.
_MAX_IOV = 1000


class FrameBufferPool:
    """Buffers for large response frames, reused once nothing points into them any more.

    A fetch response's record batches are decoded without a copy: the Arrow columns a
    consumer returns point into the frame's buffer, and keep it alive as long as they live.
    Allocating a fresh buffer for every frame makes the kernel hand out (and zero) new pages
    for every byte received, which costs more than the receive itself (benchmarks/
    bench_source.py); a buffer whose only reference left is this pool's is free, so it is
    read into again. Nothing is reused while any view, Arrow buffer or array made from it is
    alive: Python's reference count says so. At most ``max_buffers`` buffers and ``max_bytes``
    bytes are kept between frames; a frame past that gets a buffer freed with it.

    Connections share one pool per process (:data:`SHARED_FRAME_BUFFERS`), so that a process
    that opens a consumer per job (a Spark Python worker runs one per task) keeps reusing
    the same pages instead of faulting in new ones for every consumer. ``take`` holds a lock:
    consumers in several threads may share the pool. A forked child starts with an empty one.
    """

    def __init__(self, max_buffers: int = 4, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._max_buffers = max_buffers
        self._max_bytes = max_bytes
        self._buffers: list[np.ndarray[Any, Any]] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> memoryview:
        """A writable ``size``-byte view, in a free pooled buffer when one is big enough."""
        with self._lock:
            buffers = self._buffers
            for index in range(len(buffers)):
                if buffers[index].nbytes >= size and self._free(index):
                    # The view holds a reference before the lock is let go, so no other
                    # thread can find this buffer free.
                    return buffers[index][:size].data
            fresh = np.empty(size, dtype=np.uint8)
            pooled = sum(b.nbytes for b in buffers)
            if len(buffers) < self._max_buffers and pooled + size <= self._max_bytes:
                buffers.append(fresh)
            else:
                for index in range(len(buffers)):
                    old = buffers[index].nbytes
                    if old < size and pooled - old + size <= self._max_bytes and self._free(index):
                        buffers[index] = fresh  # a free one too small: replace it
                        break
            return fresh[:size].data

    def _free(self, index: int) -> bool:
        # Two references: the pool's list and getrefcount's own argument. Any other is a
        # view, an Arrow buffer or an array made from an earlier frame, still alive.
        return sys.getrefcount(self._buffers[index]) == 2

    @property
    def pooled_bytes(self) -> int:
        """Bytes of the buffers kept, in use or free."""
        with self._lock:
            return sum(b.nbytes for b in self._buffers)

    def clear(self) -> None:
        """Drop every buffer (those still in use live on until their last reference goes)."""
        with self._lock:
            self._buffers.clear()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._buffers = []


#: The pool of every connection in this process.
SHARED_FRAME_BUFFERS = FrameBufferPool()
os.register_at_fork(after_in_child=SHARED_FRAME_BUFFERS._after_fork_in_child)


_correlation_ids = itertools.count(1)


@dataclass(slots=True)
class Response:
    """A decoded response; ``error`` is set (and ``body`` None) when ``frame_error`` was."""

    correlation_id: int
    body: Any
    records: memoryview
    context: Any
    error: SparkMQError | None = None

    def result(self) -> Any:
        """The body, or raise the frame error."""
        if self.error is not None:
            raise self.error
        return self.body


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    spec: ApiSpec[Any, Any]
    context: Any
    sent_at: float


class BrokerConnection:
    """A connection to one broker (see the module docstring)."""

    def __init__(
        self,
        address: BrokerAddress,
        *,
        node_id: int = -1,
        client_id: str | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        connect_timeout_ms: int = 10_000,
        request_timeout_ms: int = 30_000,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        clock: Callable[[], float] = time.monotonic,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.address = address
        #: TLS (security.protocol SSL or SASL_SSL): the context every socket is wrapped in.
        self.ssl_context = ssl_context
        #: Credentials to authenticate with right after connecting (a SASL listener).
        self.sasl = sasl
        #: When (on ``clock``) the SASL session is to be re-authenticated; None: never.
        self._reauth_at: float | None = None
        #: Draws the point in a session's lifetime where it is re-authenticated.
        self._rng = rng if rng is not None else random.Random()
        #: Monotonic seconds: when requests were sent, and the request timeout's deadline.
        self._clock = clock
        self.node_id = node_id
        self.client_id = client_id
        self._max_frame_bytes = max_frame_bytes
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._request_timeout_s = request_timeout_ms / 1000
        self._send_buffer_bytes = send_buffer_bytes
        self._receive_buffer_bytes = receive_buffer_bytes
        self._sock: socket.socket | None = None
        #: A TLS 1.3 connection that has had no response yet: the broker checks the client's
        #: certificate after the client's side of the handshake is done, so a refusal shows
        #: as the connection closing before the first response.
        self._tls13_unconfirmed = False
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._buf = bytearray(RECEIVE_BUFFER_BYTES)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        # A frame being read into its own buffer: (buffer, bytes filled so far).
        self._big: memoryview | None = None
        self._big_filled = 0
        # The last frame was large: read just the next size prefix first.
        self._expect_big = False
        self._frames = SHARED_FRAME_BUFFERS
        #: Until when (the clock's seconds) the broker throttles this client: a response's
        #: throttle_time_ms (a client quota) says how long to send it nothing, as Kafka's
        #: NetworkClient does (KIP-219). The owners' send loops look at throttle_delay_s().
        self.throttled_until = 0.0

    def throttle_delay_s(self) -> float:
        """Seconds until the broker's throttle of this client ends (0: not throttled)."""
        return max(0.0, self.throttled_until - self._clock()) if self.throttled_until else 0.0

    # -- lifecycle ------------------------------------------------------------------------

    def connect(self) -> None:
        """Open the socket if it is not open and authenticate with ``sasl`` if set; raise
        BrokerNotAvailableError on failure, AuthenticationError if the broker refuses."""
        if self._sock is None:
            sock = self.address.connect(self._connect_timeout_s)
            if self.ssl_context is not None:
                sock = self._handshake(sock, self.ssl_context)
                self._tls13_unconfirmed = sock.version() == "TLSv1.3"
            # Large kernel buffers let pipelined requests (and a fetch response) sit in the
            # socket while both ends work, instead of the writer blocking until the broker
            # reads; the kernel caps them at net.core.wmem_max / rmem_max.
            for option, size in (
                (socket.SO_SNDBUF, self._send_buffer_bytes),
                (socket.SO_RCVBUF, self._receive_buffer_bytes),
            ):
                if size > 0:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, option, size)
            # Non-blocking: reads happen only when select() said readable, and writes wait
            # with select() only when the send buffer is full. A socket with a timeout would
            # poll() before every send and recv, a second system call each time.
            sock.setblocking(False)
            self._sock = sock
            if self.sasl is not None:
                # Before anything else: a SASL listener serves nothing else until then.
                began = self._clock()
                lifetime_ms = self.sasl.authenticate(self, timeout_s=self._connect_timeout_s)
                self._schedule_reauthentication(began, lifetime_ms)

    def _schedule_reauthentication(self, began: float, lifetime_ms: int) -> None:
        """Re-authenticate after a random 85-95 % of the session's lifetime (Kafka's
        spread), counted from ``began``, when this client started the exchange: the broker
        counts from when it completed, later, so the client never counts past the broker's
        deadline, and the 5 % or more left is room for the next exchange and for a broker
        slow to read the next request (it judges expiry by when a request arrived)."""
        if lifetime_ms <= 0:
            self._reauth_at = None
            return
        share = 0.85 + 0.1 * self._rng.random()
        self._reauth_at = began + lifetime_ms * share / 1000

    @property
    def reauthentication_due(self) -> bool:
        """Whether the SASL session should be re-authenticated before the next request
        (which :meth:`send` does once nothing is in flight)."""
        at = self._reauth_at
        return at is not None and self._clock() >= at

    def _reauthenticate(self) -> None:
        """Run the SASL exchange again on this connection (nothing is in flight)."""
        assert self.sasl is not None and not self._in_flight
        # Cleared first: the exchange's own requests go through send().
        self._reauth_at = None
        began = self._clock()
        lifetime_ms = self.sasl.authenticate(
            self, timeout_s=self._connect_timeout_s, reauthenticating=True
        )
        self._schedule_reauthentication(began, lifetime_ms)

    def _handshake(self, raw: socket.socket, context: ssl.SSLContext) -> ssl.SSLSocket:
        """The client side of the TLS handshake, blocking for at most the connection setup
        timeout. A refusal raises SslAuthenticationError (not retried); a connection that
        breaks or times out during it, NetworkError (retried)."""
        address = self.address
        raw.settimeout(self._connect_timeout_s)
        try:
            # Brokers connected by address: the certificate must list that address.
            sock = context.wrap_socket(raw, server_hostname=address.host or None)
        except (ssl.SSLError, ssl.CertificateError) as exc:
            raw.close()
            if is_authentication_failure(exc):
                raise SslAuthenticationError(
                    f"TLS handshake with broker {address} refused: {describe_tls_failure(exc)}",
                    broker=str(address),
                ) from exc
            raise NetworkError(
                f"TLS handshake with broker {address} failed: {describe_tls_failure(exc)}"
            ) from exc
        except OSError as exc:
            raw.close()
            raise NetworkError(
                f"TLS handshake with broker {address} failed: {exc}; is its listener SSL, and "
                "is it up?"
            ) from exc
        sock.settimeout(None)
        return sock

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def fileno(self) -> int:
        return self._sock.fileno() if self._sock is not None else -1

    def close(self) -> list[Any]:
        """Close the socket; return the contexts of requests that got no response."""
        self.close_keep_in_flight()
        pending = [entry.context for entry in self._in_flight]
        self._in_flight.clear()
        self._start = self._end = 0
        self._big = None
        self._big_filled = 0
        return pending

    # -- sending --------------------------------------------------------------------------

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def oldest_request_age_s(self, now: float | None = None) -> float:
        """Seconds since the oldest unanswered request was sent (0 when none is)."""
        if not self._in_flight:
            return 0.0
        return (self._clock() if now is None else now) - self._in_flight[0].sent_at

    def send(
        self,
        request: msgspec.Struct,
        *,
        records: Sequence[bytes | bytearray | memoryview] = (),
        context: Any = None,
        expect_response: bool = True,
    ) -> int:
        """Write one request; returns its correlation id. With ``expect_response`` False
        (Produce with acks=0) nothing is queued because the broker will not answer."""
        self.connect()
        if self._reauth_at is not None and not self._in_flight and self.reauthentication_due:
            self._reauthenticate()
        assert self._sock is not None
        spec = spec_for_request(request)
        correlation_id = next(_correlation_ids) & 0x7FFFFFFF
        records_len = sum(memoryview(r).nbytes for r in records)
        head, body = encode_request(
            request,
            correlation_id=correlation_id,
            client_id=self.client_id,
            records_len=records_len,
        )
        self._write([head, body, *records])
        if expect_response:
            self._in_flight.append(_InFlight(correlation_id, spec, context, self._clock()))
        return correlation_id

    def _write(self, buffers: list[Any]) -> None:
        sock = self._sock
        assert sock is not None
        views = [memoryview(b).cast("B") for b in buffers if len(b)]
        deadline: float | None = None
        tls = isinstance(sock, ssl.SSLSocket)
        try:
            while views:
                try:
                    # A TLS socket has no sendmsg; send() writes a buffer whole or not at all
                    # (OpenSSL without partial writes), and is retried with the same buffer.
                    sent = sock.send(views[0]) if tls else sock.sendmsg(views[:_MAX_IOV])
                except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                    sent = 0
                except ssl.SSLWantReadError:
                    sent = 0
                # Drop what was written; a partial write leaves the tail of one buffer.
                full = sent < sum(len(v) for v in views[:_MAX_IOV])
                while sent and views:
                    first = views[0]
                    if sent >= len(first):
                        sent -= len(first)
                        views.pop(0)
                    else:
                        views[0] = first[sent:]
                        sent = 0
                if views and full:
                    # The send buffer is full: wait until the broker reads, at most the
                    # request timeout in all.
                    now = self._clock()
                    if deadline is None:
                        deadline = now + self._request_timeout_s
                    if now >= deadline:
                        raise TimeoutError(
                            f"the broker read nothing for request.timeout.ms="
                            f"{round(self._request_timeout_s * 1000)}"
                        )
                    select.select([], [sock], [], deadline - now)
        except (OSError, ValueError) as exc:
            self._fail(exc, "writing a request")

    def _tls_pending(self) -> bool:
        """Whether the TLS layer holds decrypted bytes not read yet (select cannot see
        them: they are read before waiting)."""
        sock = self._sock
        return isinstance(sock, ssl.SSLSocket) and sock.pending() > 0

    def _tls_drain(self, sock: ssl.SSLSocket) -> int:
        """Read on while the TLS socket has bytes, decrypted or in the kernel: one
        ``recv_into`` returns at most one TLS record (16 KiB), and what the TLS layer holds
        is invisible to ``select``. Returns the bytes read."""
        total = 0
        while True:
            try:
                if self._big is not None and self._big_filled < len(self._big):
                    n = sock.recv_into(self._big[self._big_filled :])
                    self._big_filled += n
                else:
                    if self._end == len(self._buf):
                        self._compact()
                    if self._end == len(self._buf):
                        # Full of complete frames: they are parsed before the next read.
                        break
                    n = sock.recv_into(self._view[self._end :], len(self._buf) - self._end)
                    self._end += n
            except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                break
            if n == 0:
                break
            total += n
            if (
                self._big is None
                and self._end - self._start > len(self._buf) // 2
                and not sock.pending()
            ):
                # Enough to parse (a large frame moves to its own buffer first); what is left
                # is in the kernel, where select sees it.
                break
        return total

    def _fail(self, exc: BaseException, doing: str) -> NoReturn:
        address = self.address
        self.close_keep_in_flight()
        if self._tls13_unconfirmed and isinstance(exc, ConnectionError | ssl.SSLEOFError):
            self._tls13_unconfirmed = False
            raise SslAuthenticationError(
                f"broker {address} closed the TLS connection before its first response: it "
                "refused this client's certificate, or requires one (ssl.client.auth=required;"
                " set ssl.certificate.location and ssl.key.location). The broker's log says "
                "which",
                broker=str(address),
            ) from exc
        if is_authentication_failure(exc):
            # TLS 1.3 refuses a client certificate after the client's handshake is done: the
            # refusal arrives with the first response.
            raise SslAuthenticationError(
                f"broker {address} refused the TLS connection while {doing}: "
                f"{describe_tls_failure(exc)}",
                broker=str(address),
            ) from exc
        raise NetworkError(
            f"connection to broker {address} failed while {doing}: {exc}; "
            "the request will be retried on a new connection"
        ) from exc

    def close_keep_in_flight(self) -> None:
        """Close the socket but keep the in-flight queue for :meth:`close` to return."""
        self._reauth_at = None
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    # -- receiving ------------------------------------------------------------------------

    def receive(self, timeout_s: float | None = None) -> Response | None:
        """The next response, waiting up to ``timeout_s`` (None: the request timeout).
        Returns None when it has not arrived in time; a partly read frame is kept."""
        if not self._in_flight:
            raise AssertionError("receive() with no request in flight")
        response = self._parse_one()
        if response is not None:
            return response
        deadline = self._clock() + (self._request_timeout_s if timeout_s is None else timeout_s)
        while True:
            remaining = deadline - self._clock()
            if remaining <= 0 or not (self._tls_pending() or self._wait_readable(remaining)):
                return None
            self._read_some()
            response = self._parse_one()
            if response is not None:
                return response

    def read_available(self) -> list[Response]:
        """Read what the socket has (call when it is readable) and return every complete
        response; raise NetworkError if the peer closed the connection."""
        self._read_some()
        out = []
        while self._in_flight:
            response = self._parse_one()
            if response is None:
                # The first read of a large frame takes its size only; the rest is usually
                # waiting in the socket already, so read on rather than select again.
                if (self._big is not None or self._tls_pending()) and self._read_some():
                    continue
                break
            out.append(response)
        return out

    def request(self, request: msgspec.Struct, *, timeout_s: float | None = None) -> Any:
        """Send one request and wait for its response body (nothing else may be in flight);
        a frame error raises its typed error, a timeout NetworkError."""
        if self._in_flight:
            raise AssertionError("request() while other requests are in flight")
        self.send(request)
        response = self.receive(timeout_s)
        if response is None:
            self.close()
            raise NetworkError(
                f"no response from broker {self.address} within "
                f"{self._request_timeout_s if timeout_s is None else timeout_s} s to "
                f"{type(request).__name__}; the connection was closed"
            )
        return response.result()

    def _wait_readable(self, timeout_s: float) -> bool:
        sock = self._sock
        if sock is None:
            raise NetworkError(f"connection to broker {self.address} is closed")
        try:
            readable, _, _ = select.select([sock], [], [], timeout_s)
        except (OSError, ValueError) as exc:
            self._fail(exc, "waiting for a response")
        return bool(readable)

    def _read_some(self) -> int:
        """One ``recv_into``: into the current big frame, or the receive buffer. Returns the
        bytes read (0 when nothing was there)."""
        sock = self._sock
        if sock is None:
            raise NetworkError(f"connection to broker {self.address} is closed")
        try:
            if self._big is not None:
                if self._big_filled == len(self._big):
                    return 0  # complete, waiting to be parsed
                n = sock.recv_into(self._big[self._big_filled :])
                self._big_filled += n
            else:
                if self._end == len(self._buf):
                    self._compact()
                # Frames over half the buffer get their own, so unparsed bytes never fill it.
                assert self._end < len(self._buf), "receive buffer full of unparsed bytes"
                want = len(self._buf) - self._end
                if self._expect_big and self._end - self._start < SIZE.size:
                    want = min(want, self._start + SIZE.size - self._end)
                n = sock.recv_into(self._view[self._end :], want)
                self._end += n
            if n and isinstance(sock, ssl.SSLSocket):
                n += self._tls_drain(sock)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return 0  # not readable after all (a spurious wake-up, or half a TLS record)
        except OSError as exc:
            self._fail(exc, "reading a response")
        if n == 0:
            self._fail(ConnectionResetError("the broker closed the connection"), "reading")
        return n

    def _compact(self) -> None:
        """Move the unparsed bytes to the front of the receive buffer."""
        start, end = self._start, self._end
        if start:
            self._view[: end - start] = self._view[start:end]
            self._start, self._end = 0, end - start

    def _parse_one(self) -> Response | None:
        """Take one complete frame from what has been read, or None."""
        big = self._big
        if big is not None:
            if self._big_filled < len(big):
                return None
            self._big = None
            return self._decode(big, owned=True)
        available = self._end - self._start
        if available < SIZE.size:
            if self._start and self._start == self._end:
                self._start = self._end = 0
            return None
        start = self._start
        try:
            size = frame_size(self._view[start : start + SIZE.size], self._max_frame_bytes)
        except CorruptFrameError as exc:
            self._fail(exc, "reading a frame size (over receive.message.max.bytes?)")
        begin = start + SIZE.size
        self._expect_big = size > len(self._buf) // 2
        if self._expect_big:
            # A large frame: read it into a buffer of its own, starting with what we have.
            big = self._frames.take(size)
            have = min(available - SIZE.size, size)
            big[:have] = self._view[begin : begin + have]
            self._start = begin + have
            if self._start == self._end:
                self._start = self._end = 0
            self._big, self._big_filled = big, have
            return self._parse_one()
        if available - SIZE.size < size:
            if begin + size > len(self._buf):
                self._compact()
            return None
        self._start = begin + size
        return self._decode(self._view[begin : begin + size], owned=False)

    def _decode(self, frame: memoryview, *, owned: bool) -> Response:
        entry = self._in_flight[0]
        try:
            parsed = decode_response(frame)
            if parsed.correlation_id != entry.correlation_id:
                raise CorruptFrameError(
                    f"correlation id {parsed.correlation_id} where {entry.correlation_id} was next"
                )
            error_body = decode_frame_error(parsed) if parsed.frame_error else None
            body = None if error_body else entry.spec.decode_response(parsed.body)
        except CorruptFrameError as exc:
            # The stream can no longer be trusted: drop it, and let the owner retry the
            # requests on a new connection like after any other connection failure.
            self._fail(exc, "decoding a response")
        self._in_flight.popleft()
        self._tls13_unconfirmed = False
        throttle_ms = getattr(body, "throttle_time_ms", 0)
        if throttle_ms > 0:
            self.throttled_until = max(self.throttled_until, self._clock() + throttle_ms / 1000)
        records = (
            parsed.records
            if owned or not len(parsed.records)
            else memoryview(bytes(parsed.records))
        )
        if error_body is not None:
            error = error_from_code(parsed.frame_error, error_body.error_message)
            return Response(entry.correlation_id, None, records, entry.context, error)
        return Response(entry.correlation_id, body, records, entry.context)
