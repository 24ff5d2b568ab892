"""One client connection: read frames, dispatch them in order, write the responses.

Requests on a connection are handled one at a time and answered in the order they came, as
Kafka guarantees; a long-polling fetch therefore delays later responses on its connection
only. What the broker does with bad input:

- bytes that are not a frame (a size out of range, a header cut short): log, close this
  connection (after answering the whole frames that came before), keep serving the others;
- an unknown API key or version: a response with ``frame_error`` UNSUPPORTED_VERSION;
- a body that does not decode, or records sections whose sizes do not add up: a response
  with ``frame_error`` INVALID_REQUEST (the frame boundary is intact, so the connection
  stays usable);
- an exception escaping a handler: answered by :func:`~spark_mq.broker.handlers.errors.answer`
  with the API's error response (a bug: logged with its traceback, UNKNOWN_SERVER_ERROR).

Reading. :class:`Connection` is an :class:`asyncio.BufferedProtocol` with no receive buffer
of its own: the loop ``recv_into``\\ s the server's one scratch buffer
(:data:`RECEIVE_BUFFER_BYTES`; ``get_buffer``, the read and ``buffer_updated`` are one
callback, so connections never share it at once) and every byte is moved out before the
callback returns, so an idle connection holds at most a size prefix cut short. Each size
prefix is checked against ``socket.request.max.bytes`` (``sasl.server.max.receive.size``
on a SASL listener until the peer has authenticated) as it arrives, then the frame's size
is counted in the ``queued.max.request.bytes`` pool (``request_memory.py``) until it has been
served; a frame that does not fit stops the reading until memory frees (while the pool is
full, reads stop at a size prefix). A frame that came whole is copied out; one still arriving
gets a buffer of exactly its size (an anonymous map over :data:`LARGE_FRAME_BYTES`, whose
memory grows as bytes arrive), read into directly while :data:`DIRECT_READ_MIN_BYTES` or more
are missing. Reading pauses while :data:`READ_AHEAD_BYTES` of complete frames wait. The
server's sweep closes a connection whose begun frame got no byte for
``socket.request.read.timeout.ms`` (:meth:`Connection.stalled_for`).

Writing. Responses are queued and written together when the connection's task next yields
to the event loop (one ``send`` for a run of pipelined produce responses instead of one
each), never held across a wait: a long poll, an append on the executor, a ``sendfile``.
The socket's send buffer is :data:`SEND_BUFFER_BYTES` so that a whole fetch response can
sit in the kernel while the client decodes the previous one. TCP sockets get
``TCP_NODELAY``: without it a response written in two parts (head, then records) waits for
the client's delayed ACK of the first part, 40 ms on Linux. After each response the task
waits while the transport is over its high-water mark (backpressure).

Throttling (client quotas, KIP-219). A client over a quota gets its response at once, with
``throttle_time_ms``; then the connection stops reading and serving that client until the
throttle time has passed (:meth:`Connection._mute`), so one that ignores the field gains
nothing. The request-time quota is recorded here, after the handler, for every API but the
ones that authenticate (:func:`~spark_mq.broker.quotas.throttling.throttle_of`).

Records of a fetch response follow its head and body: a file range of at least
:data:`SENDFILE_MIN_BYTES` goes out with ``loop.sendfile`` (``sendfile(2)`` straight from the
segment file to the socket, TCP or Unix; partial sends and EAGAIN are handled by the loop), a
smaller one is read with one ``pread`` and written, which is cheaper than pausing the
transport for a sendfile. A range that comes up short (the file was truncated under the
reader) would leave the client with a frame shorter than announced, so the connection is
closed. File ranges are closed on every path.

Threads: everything here runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import logging
import os
import pwd
import socket
import ssl
import struct
import sys
import termios
from typing import IO, TYPE_CHECKING, Any, Final, cast

from spark_mq.broker.connection_quotas import UNIX_PEER, peer_host
from spark_mq.broker.context import ConnectionSession, RequestContext, Response
from spark_mq.broker.embedded_token import TokenCredentials
from spark_mq.broker.handlers.errors import REPEATED, UnanswerableError, answer
from spark_mq.broker.quotas.throttling import throttle_of
from spark_mq.broker.request_memory import MemoryWaiter
from spark_mq.broker.sasl.authenticator import PRE_AUTHENTICATION_APIS, SaslServerSession
from spark_mq.errors import CorruptFrameError, StorageError, UnsupportedVersionError
from spark_mq.principal import KafkaPrincipal
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import ApiKey, encode_frame_error, encode_response, spec_for
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import SIZE, decode_request, frame_size
from spark_mq.storage.file_records import FileRange
from spark_mq.tls import describe_tls_failure, principal_of

if TYPE_CHECKING:
    from spark_mq.broker.server import BrokerServer

logger = logging.getLogger("spark_mq.broker.connection")

#: File ranges smaller than this are copied (one pread) instead of sent with sendfile.
SENDFILE_MIN_BYTES: Final = 64 * 1024
#: The server's scratch receive buffer; one ``recv_into`` reads at most this much.
RECEIVE_BUFFER_BYTES: Final = 256 * 1024
#: Frames larger than this get a buffer of the FrameBufferPool; smaller ones are copied.
LARGE_FRAME_BYTES: Final = RECEIVE_BUFFER_BYTES // 2
#: A frame missing at least this many bytes is read into directly; a shorter rest goes
#: through the scratch buffer with whatever follows it (one read instead of two).
DIRECT_READ_MIN_BYTES: Final = 64 * 1024
#: Bytes of complete frames waiting to be served before the connection stops reading: room
#: for a producer's five in-flight requests of 1 MB.
READ_AHEAD_BYTES: Final = 8 * 1024 * 1024
#: SO_SNDBUF of accepted sockets (the kernel caps it at net.core.wmem_max). A Unix socket's
#: default (about 200 KiB) would hold a 1 MB fetch response back until the client reads.
SEND_BUFFER_BYTES: Final = 4 * 1024 * 1024


class _RangeFile:
    """The file-object face of a FileRange that ``loop.sendfile`` needs: ``fileno`` for the
    native path, ``seek``/``readinto`` for the fallback (uvloop, or a loop without
    sendfile). Reads are positional, so the shared file offset never matters."""

    mode = "rb"

    def __init__(self, file_range: FileRange) -> None:
        self._range = file_range
        self._pos = 0

    def fileno(self) -> int:
        return self._range.fd

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        data = os.pread(self._range.fd, len(view), self._pos)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


def peer_user(sock: Any) -> str | None:
    """The OS user name of a Unix-socket peer, from its credentials (SO_PEERCRED): the
    kernel's word, not the peer's. None where the platform cannot tell."""
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
    except OSError:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)  # a user with no passwd entry (a container's): its uid


def tune_socket(sock: Any) -> None:
    """``TCP_NODELAY`` on TCP, a large send buffer on every stream socket (best effort)."""
    if sock is None:
        return
    with contextlib.suppress(OSError):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)


class Connection(asyncio.BufferedProtocol):
    """Serves one accepted socket until EOF, garbage, a timeout or shutdown."""

    def __init__(
        self,
        server: BrokerServer,
        listener: BrokerAddress,
        sasl_required: bool = False,
        *,
        listener_name: str = "PLAINTEXT",
        tls: ssl.SSLContext | None = None,
        token: TokenCredentials | None = None,
    ) -> None:
        self.server = server
        self.core = server.core
        self.listener = listener
        self.listener_name = listener_name
        #: The listener's TLS context: the connection's first bytes are a TLS handshake.
        self._tls = tls
        self.peer = str(listener)
        #: What the peer has proven (a broker of the cluster, after AuthenticateBroker; a
        #: user, after SASL on a SASL listener).
        # The loop, looked up once: get_running_loop() costs a getpid() per call.
        self._loop = asyncio.get_running_loop()
        sasl = self.core.config.sasl
        self.session = ConnectionSession(
            sasl=SaslServerSession(
                self.core.credentials,
                sasl.sasl_enabled_mechanisms,
                token,
                # Frames are timed on the loop's clock, so the session's expiry is too.
                max_reauth_ms=self.core.config.max_reauth_ms_by_mechanism(listener_name),
                clock=self._loop.time,
            )
            if sasl_required
            else None
        )
        #: The address this connection counts under for max.connections.per.ip.
        self.host = ""
        self.busy = False
        self.last_activity = self._loop.time()
        #: When bytes last arrived, or reading last resumed (the stall clock).
        self.last_read = self.last_activity
        self.task: asyncio.Task[None] | None = None
        self._max_frame_bytes = self.core.config.broker.socket_request_max_bytes
        self._max_unauthenticated_bytes = self.core.config.sasl.sasl_server_max_receive_size
        self._memory = server.memory
        self._transport: asyncio.Transport | None = None
        self._fd = -1  # the socket's descriptor, for sendfile
        self._sendfile_ok = True  # False on TLS: sendfile would skip the encryption
        #: Counted by the server's ConnectionQuotas (released when the connection ends).
        self.admitted = False
        self._closed = False
        # Receiving. Bytes read but not consumed: a size prefix cut short, or, while a frame
        # waits for memory, everything from that frame's prefix on.
        self._pending = b""
        # Where the last get_buffer pointed: the scratch buffer after this many pending
        # bytes, or (-1) the rest of the frame being filled.
        self._scratch_base = 0
        # The frame being received into a buffer of its own, and how much of it is there.
        self._filling: memoryview | None = None
        self._filled = 0
        self._waiter: MemoryWaiter | None = None
        # Memory granted to the first frame of _pending while it waited.
        self._granted: int | None = None
        self._frames: collections.deque[memoryview] = collections.deque()
        #: When each queued frame's last byte came (loop time), for the queue-time metric.
        self._received_at: collections.deque[float] = collections.deque()
        self._frame_received = 0.0
        self._frames_bytes = 0
        self._frame_waiter: asyncio.Future[None] | None = None
        self._reading = True
        #: Throttled for a client quota: nothing is read until the throttle time passes.
        self._muted = False
        self._throttle_ms = 0
        self._eof = False
        self._lost = False
        self._bad_prefix: CorruptFrameError | None = None
        # Sending: responses not yet handed to the transport, and backpressure.
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None

    # -- protocol callbacks (event loop) --------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if self.server.stopping:
            transport.close()
            return
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}"
        self.host = peer_host(peer)
        self.session.host = self.host
        if self.host == UNIX_PEER:
            # The OS proved who the peer is: the owner of the connecting process.
            user = peer_user(transport.get_extra_info("socket"))
            if user is not None:
                self.session.principal = KafkaPrincipal.user(user)
        if not self.server.quotas.admit(self.host, self.peer):
            transport.close()
            return
        self.admitted = True
        sock = transport.get_extra_info("socket")
        tune_socket(sock)
        self._fd = sock.fileno() if sock is not None else -1
        if self._tls is not None:
            # Nothing is read until start_tls takes the transport over: the first bytes are
            # the client's TLS hello, not a frame.
            self._transport.pause_reading()
        self.server.connections.add(self)
        self.core.touch()
        self.task = self._loop.create_task(self._run())

    def get_buffer(self, sizehint: int) -> memoryview:
        filling = self._filling
        if filling is not None and len(filling) - self._filled >= DIRECT_READ_MIN_BYTES:
            self._scratch_base = -1
            return filling[self._filled :]
        server = self.server
        scratch = server.scratch
        server.scratch_user = self
        pending = self._pending
        held = len(pending)
        # Between frames only a size prefix cut short is pending (a frame waiting for
        # memory pauses reading): it goes in front of the new bytes.
        assert held < SIZE.size and (not held or filling is None)
        if held:
            scratch[:held] = pending
        self._scratch_base = held
        if filling is None and self._memory.exhausted:
            # No memory for another frame: read no further than its size prefix, so that a
            # connection that has to wait holds only those four bytes.
            return scratch[held : SIZE.size]
        return scratch[held:]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_read = self._loop.time()
        base = self._scratch_base
        if base < 0:
            filling = self._filling
            assert filling is not None
            self._filled += nbytes
            if self._filled == len(filling):
                self._filling = None
                self._push(filling)
        else:
            assert self.server.scratch_user is self
            self.server.scratch_user = None
            self._pending = b""
            self._consume(self.server.scratch, base + nbytes)
        if self._waiter is not None or self._frames_bytes >= READ_AHEAD_BYTES:
            self._update_reading()

    def eof_received(self) -> bool:
        # Keep the transport open: the frames that came before the EOF are still answered.
        self._eof = True
        self._wake_reader()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake_reader()
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- receiving ------------------------------------------------------------------------

    def _consume(self, view: memoryview, end: int) -> None:
        """Move ``view[:end]`` (bytes that will not stay there) into frames: the rest of the
        frame being filled, whole frames, the start of the next one."""
        pos = 0
        filling = self._filling
        if filling is not None:
            filled = self._filled
            take = min(len(filling) - filled, end)
            filling[filled : filled + take] = view[:take]
            self._filled = filled + take
            if self._filled < len(filling):
                return
            pos = take
            self._filling = None
            self._push(filling)
        max_bytes, limit = self._max_frame_bytes, "socket.request.max.bytes"
        if self.session.awaiting_sasl and self._max_unauthenticated_bytes < max_bytes:
            # Before authentication (Kafka's sasl.server.max.receive.size): a peer that has
            # proven nothing reserves no more of the request memory pool than a SASL frame.
            max_bytes, limit = self._max_unauthenticated_bytes, "sasl.server.max.receive.size"
        memory = self._memory
        while pos < end:
            available = end - pos
            if available < SIZE.size:
                self._pending = bytes(view[pos:end])
                return
            try:
                size = frame_size(view[pos : pos + SIZE.size], max_bytes, limit)
            except CorruptFrameError as exc:
                # Answer the frames that came before, then close (see _next_frame).
                self._bad_prefix = exc
                self._update_reading()
                self._wake_reader()
                return
            if self._granted is not None:
                assert self._granted == size, "memory granted to another frame"
                self._granted = None
            elif not memory.try_reserve(size):
                self._pending = bytes(view[pos:end])
                self._waiter = memory.wait(size, self._memory_granted)
                return
            begin = pos + SIZE.size
            have = min(available - SIZE.size, size)
            pos = begin + have
            if have == size and size <= LARGE_FRAME_BYTES:
                frame = memoryview(view[begin:pos].tobytes())
            else:
                if size > LARGE_FRAME_BYTES:
                    frame = self.server.frame_buffers.take(size)
                else:
                    frame = memoryview(bytearray(size))
                frame[:have] = view[begin:pos]
                if have < size:
                    self._filling, self._filled = frame, have
                    return
            self._push(frame)

    def _memory_granted(self, size: int) -> None:
        """The pool counted ``size`` bytes for the frame at the front of ``_pending``."""
        self._waiter = None
        if self._closed:
            self._memory.release(size)
            return
        self._granted = size
        pending, self._pending = self._pending, b""
        self._consume(memoryview(pending), len(pending))
        self.last_read = self._loop.time()
        self._update_reading()

    def _update_reading(self) -> None:
        """Read the socket unless a frame waits for memory, READ_AHEAD_BYTES of frames wait
        to be served, or the stream is garbage."""
        reading = (
            self._waiter is None
            and self._frames_bytes < READ_AHEAD_BYTES
            and self._bad_prefix is None
            and not self._lost
            and not self._muted
        )
        if reading == self._reading:
            return
        self._reading = reading
        transport = self._transport
        if transport is None or self._lost:
            return
        if reading:
            self.last_read = self._loop.time()
            transport.resume_reading()
        else:
            transport.pause_reading()

    def _push(self, frame: memoryview) -> None:
        self._frames.append(frame)
        self._received_at.append(self._loop.time())
        self._frames_bytes += len(frame)
        self._wake_reader()

    def _wake_reader(self) -> None:
        waiter, self._frame_waiter = self._frame_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _release(self, frame: memoryview) -> None:
        """The frame was served: its memory is free, its buffer may be reused."""
        self._memory.release(len(frame))
        buf = frame.obj
        if not isinstance(buf, bytes | bytearray):
            # Drops this view's hold on the buffer even while the caller still names it; a
            # view that something else exported keeps it (BufferError), and then the pool
            # sees the extra reference and lets the buffer go.
            with contextlib.suppress(BufferError):
                frame.release()
            del frame
            self.server.frame_buffers.give(buf)

    def _drop_received(self) -> None:
        """The connection is done: give back the memory of every frame not served."""
        self._closed = True
        memory = self._memory
        while self._frames:
            memory.release(len(self._frames.popleft()))
        self._received_at.clear()
        self._frames_bytes = 0
        if self._filling is not None:
            memory.release(len(self._filling))
            self._filling = None
        if self._granted is not None:
            memory.release(self._granted)
            self._granted = None
        if self._waiter is not None:
            # A waiter granted already has its callback scheduled: it sees _closed.
            memory.cancel(self._waiter)
            self._waiter = None
        self._pending = b""

    def stalled_for(self, now: float) -> float:
        """Seconds the frame this connection has begun has gone without a byte while the
        broker was reading (0 when no frame is begun, or the client has closed its side:
        the frames before are answered, then the connection closes)."""
        if not self._reading or self._eof or (self._filling is None and not self._pending):
            return 0.0
        return now - self.last_read

    def describe_partial(self) -> str:
        """What has arrived of the frame begun, for the log."""
        if self._filling is not None:
            return f"{self._filled} of {len(self._filling)} bytes of a request frame"
        return f"{len(self._pending)} of the {SIZE.size} bytes of a size prefix"

    def unread_bytes(self) -> int:
        """Bytes the kernel holds for this socket that the broker has not read yet."""
        if self._fd < 0:
            return 0
        try:
            out = fcntl.ioctl(self._fd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return 0
        return int.from_bytes(out, sys.byteorder)

    async def _next_frame(self) -> memoryview | None:
        """The next complete frame; None at EOF, when the connection is gone, or after a
        bad size prefix (logged)."""
        while not self._frames:
            if self._bad_prefix is not None:
                logger.warning("closing connection from %s: %s", self.peer, self._bad_prefix)
                return None
            if self._eof or self._lost:
                return None
            waiter = self._loop.create_future()
            self._frame_waiter = waiter
            await waiter
        frame = self._frames.popleft()
        self._frame_received = self._received_at.popleft()
        self._frames_bytes -= len(frame)
        if not self._reading:
            self._update_reading()
        return frame

    # -- serving --------------------------------------------------------------------------

    async def _start_tls(self, context: ssl.SSLContext) -> bool:
        """The server side of the TLS handshake, on the event loop (asyncio's ssl), within
        ``socket.request.read.timeout.ms``. A failure (plaintext bytes, a refused
        certificate, a timeout) is logged rate-limited and ends the connection. On success
        the session's principal is the client certificate's subject, if it showed one."""
        transport = self._transport
        assert transport is not None
        timeout_s = self.core.config.broker.socket_request_read_timeout_ms / 1000
        try:
            tls_transport = await self._loop.start_tls(
                transport, self, context, server_side=True, ssl_handshake_timeout=timeout_s
            )
        except (TimeoutError, OSError, ConnectionError) as exc:
            self._lost = True
            self.server.tls_failures.log(
                ("tls handshake", self.listener_name, type(exc).__name__),
                logging.WARNING,
                "closing connection from %s on listener %s: TLS handshake failed: %s",
                self.peer,
                self.listener_name,
                describe_tls_failure(exc),
            )
            return False
        if tls_transport is None:
            return False
        self._transport = tls_transport
        # sendfile(2) on the socket would bypass the encryption: file ranges go through the
        # TLS transport (loop.sendfile falls back to reading and writing).
        self._sendfile_ok = False
        self.session.principal = principal_of(tls_transport.get_extra_info("ssl_object"))
        self._reading = True
        return True

    async def _run(self) -> None:
        try:
            if self._tls is not None and not await self._start_tls(self._tls):
                return
            while not self.server.stopping:
                frame = await self._next_frame()
                if frame is None:
                    return
                self.busy = True
                self.last_activity = self._loop.time()
                self.core.touch()
                try:
                    keep_open = await self._serve(frame)
                finally:
                    self._release(frame)
                    self.busy = False
                    self.core.touch()
                if not keep_open:
                    return
                if self._write_paused:
                    await self._drain()
                if self._throttle_ms:
                    await self._mute()
        except (ConnectionError, OSError) as exc:
            logger.debug("connection from %s failed: %s", self.peer, exc)
        except StorageError as exc:
            # A response's records could not be read after its head went out.
            logger.error("closing connection from %s: %s", self.peer, exc)
        except Exception:
            logger.exception("connection from %s failed unexpectedly; closing it", self.peer)
        finally:
            self._flush()
            if self._transport is not None:
                self._transport.close()
            self._drop_received()
            self.server.forget(self)
            self.core.touch()

    async def _serve(self, data: memoryview) -> bool:
        """Handle one frame; returns False when the connection must be closed."""
        loop = self._loop
        started = loop.time()
        try:
            frame = decode_request(data)
        except CorruptFrameError as exc:
            logger.warning("closing connection from %s: %s", self.peer, exc)
            self.core.metrics.requests.frame_error(None, ErrorCode.CORRUPT_MESSAGE)
            return False
        header = frame.header
        cid = header.correlation_id
        try:
            spec = spec_for(header.api_key, header.api_version)
            handler = self.core.handlers.get(spec.key)
            if handler is None:
                raise UnsupportedVersionError(f"{spec.key.name} is not served by this broker")
            if self.session.awaiting_sasl and spec.key not in PRE_AUTHENTICATION_APIS:
                return self._refuse_unauthenticated(spec.key)
            sasl = self.session.sasl
            if (
                sasl is not None
                and spec.key is not ApiKey.SASL_HANDSHAKE
                and sasl.expired(self._frame_received)
            ):
                return self._close_expired(spec.key)
            request = spec.decode_request(frame.body)
        except UnsupportedVersionError as exc:
            return self._frame_error(cid, ErrorCode.UNSUPPORTED_VERSION, str(exc), header.api_key)
        except CorruptFrameError as exc:
            return self._frame_error(cid, ErrorCode.INVALID_REQUEST, str(exc), header.api_key)
        except Exception as exc:  # any decoder failure means the same: a bad body
            return self._frame_error(
                cid,
                ErrorCode.INVALID_REQUEST,
                f"undecodable request body: {exc!r}",
                header.api_key,
            )
        session = self.session
        ctx = RequestContext(
            self.core,
            header,
            self.listener,
            self.peer,
            inter_broker=session.broker_id is not None,
            session=session,
            listener_name=self.listener_name,
        )
        try:
            # Every error a handler raises is answered there, once (handlers.errors).
            response = await answer(spec, handler, ctx, request, frame.records)
        except CorruptFrameError as exc:
            return self._frame_error(cid, ErrorCode.INVALID_REQUEST, str(exc), header.api_key)
        except UnanswerableError as exc:
            return self._frame_error(cid, ErrorCode(exc.code), exc.message, header.api_key)
        handled = loop.time()
        if self.core.quotas.enabled and spec.key not in PRE_AUTHENTICATION_APIS:
            self._throttle_ms = throttle_of(ctx, response, handled - started)
        body = None if response is None or response.silent else response.body
        keep_open = True if response is None else await self._send(cid, response)
        self.core.metrics.requests.observe(
            spec.key,
            body,
            received=self._frame_received,
            started=started,
            handled=handled,
            sent=loop.time(),
            remote_s=ctx.timing.remote_s,
        )
        return keep_open

    async def _mute(self) -> None:
        """KIP-219: the response of a throttled request went out at once; now read and
        serve nothing more from this client until its throttle time has passed."""
        delay_s, self._throttle_ms = self._throttle_ms / 1000, 0
        self._muted = True
        self._update_reading()
        try:
            await asyncio.sleep(delay_s)
        finally:
            self._muted = False
            self._update_reading()

    def _refuse_unauthenticated(self, api: ApiKey) -> bool:
        """A request before SASL authentication completed: close without serving it (Kafka
        closes such a connection too; an answer would tell an unauthenticated peer about
        the broker). Logged rate-limited, per peer host."""
        REPEATED.log(
            ("unauthenticated request", self.host),
            logging.WARNING,
            "closing connection from %s: %s before SASL authentication (a SASL listener "
            "serves only ApiVersions, SaslHandshake and SaslAuthenticate until the client "
            "has authenticated; set the client's security.protocol=SASL_PLAINTEXT and "
            "sasl.mechanism)",
            self.peer,
            api.name,
        )
        return False

    def _close_expired(self, api: ApiKey) -> bool:
        """A request other than SaslHandshake on a connection whose SASL session expired
        (by when the request arrived, as Kafka judges it): close without serving it. The
        client did not re-authenticate in time (connections.max.reauth.ms)."""
        sasl = self.session.sasl
        assert sasl is not None
        self.core.metrics.sasl.expired_connections_killed.inc()
        REPEATED.log(
            ("expired session", self.host),
            logging.INFO,
            "closing connection from %s (%s): its SASL session expired (lifetime %d ms, "
            "connections.max.reauth.ms) and it sent %s instead of re-authenticating",
            self.peer,
            self.session.principal,
            sasl.session_lifetime_ms,
            api.name,
        )
        return False

    def _frame_error(
        self, correlation_id: int, code: ErrorCode, message: str, api_key: int | None = None
    ) -> bool:
        logger.info("frame error %s for %s: %s", code.name, self.peer, message)
        self.core.metrics.requests.frame_error(_api_or_none(api_key), code)
        self._write(encode_frame_error(correlation_id, int(code), message))
        return True

    async def _send(self, correlation_id: int, response: Response) -> bool:
        try:
            if response.silent:
                return not response.close_connection
            head, body = encode_response(
                response.body, correlation_id=correlation_id, records_len=response.records_size
            )
            self._write(head)
            self._write(body)
            for item in response.records:
                if isinstance(item, bytes):
                    self._write(item)
                elif item.size < SENDFILE_MIN_BYTES:
                    self._write(item.read())
                elif not self._sendfile_ok:
                    # TLS: the bytes must pass through the encryption. One pread on a worker
                    # thread, then the TLS transport: loop.sendfile's fallback reads 256 KiB
                    # at a time on the executor, several times slower (bench_tls.py).
                    self._write(await self.core.run_blocking(item.read))
                    if self._write_paused:
                        await self._drain()
                elif not await self._sendfile(item):
                    return False
            return not response.close_connection
        finally:
            response.close()

    async def _sendfile(self, item: FileRange) -> bool:
        """Send a file range after everything queued; False if it came up short."""
        self._flush()
        transport = self._transport
        assert transport is not None
        if self._lost or transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        sent = 0
        if self._fd >= 0 and self._sendfile_ok and not transport.get_write_buffer_size():
            # Nothing is waiting in the transport, so the socket may be written directly: one
            # sendfile(2) usually moves the whole range into the send buffer, without the
            # pause, resume and futures of loop.sendfile (a third of a fetch's loop time).
            try:
                sent = item.send_to(self._fd)
            except (BlockingIOError, InterruptedError):
                sent = 0
            else:
                if sent == item.size:
                    return True
                if sent == 0:
                    return self._short_range(item, 0)
        file = cast(IO[bytes], _RangeFile(item))
        sent += await self._loop.sendfile(transport, file, item.position + sent, item.size - sent)
        return sent == item.size or self._short_range(item, sent)

    def _short_range(self, item: FileRange, sent: int) -> bool:
        logger.error(
            "sent %d of %d bytes of %s to %s: the segment was truncated under the read; "
            "closing the connection (the client retries the fetch)",
            sent,
            item.size,
            item.path,
            self.peer,
        )
        return False

    # -- writing --------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        """Queue ``data``; it is written when this task next yields to the event loop."""
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        self._out = []
        transport = self._transport
        if transport is None or self._lost:
            return
        transport.write(out[0] if len(out) == 1 else b"".join(out))

    async def _drain(self) -> None:
        """Wait while the transport holds more than its high-water mark."""
        self._flush()
        while self._write_paused:
            if self._lost:
                raise ConnectionResetError("the client closed the connection")
            waiter = self._loop.create_future()
            self._drain_waiter = waiter
            await waiter


def _api_or_none(api_key: int | None) -> ApiKey | None:
    """The API of a request refused before decoding, when its key is one we know."""
    if api_key is None:
        return None
    try:
        return ApiKey(api_key)
    except ValueError:
        return None
