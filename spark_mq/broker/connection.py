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
- an exception escaping a handler (a bug): logged, ``frame_error`` UNKNOWN_SERVER_ERROR.

Reading. :class:`Connection` is an :class:`asyncio.BufferedProtocol`: the event loop
``recv_into``\\ s the connection's own receive buffer (:data:`RECEIVE_BUFFER_BYTES`, reused),
so bytes are copied once, by the kernel, instead of into a fresh chunk per ``recv`` and again
into each frame as a ``StreamReader`` does (that cost about 2 ms of broker CPU per MB
produced). Every size prefix is checked against ``socket.request.max.bytes`` as soon as it
arrives. A frame of at most :data:`LARGE_FRAME_BYTES` is handed to its handler as a view of
the receive buffer; a larger one (a produce request of whole batches, typically) gets a
buffer of its own that the kernel fills directly. The receive buffer is never written over
while a frame in it waits or is being served: when it fills up, the unparsed tail moves to
the front only if no frame is lent out, and otherwise to a new buffer. Frames are parsed as
they arrive, so the next request is read while the current one is served; reading pauses
while :data:`READ_AHEAD_BYTES` of complete frames wait.

Writing. Responses are queued and written together when the connection's task next yields
to the event loop (one ``send`` for a run of pipelined produce responses instead of one
each), never held across a wait: a long poll, an append on the executor, a ``sendfile``.
The socket's send buffer is :data:`SEND_BUFFER_BYTES` so that a whole fetch response can
sit in the kernel while the client decodes the previous one. TCP sockets get
``TCP_NODELAY``: without it a response written in two parts (head, then records) waits for
the client's delayed ACK of the first part, 40 ms on Linux. After each response the task
waits while the transport is over its high-water mark (backpressure).

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
import logging
import os
import socket
import sys
from typing import IO, TYPE_CHECKING, Any, Final, cast

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers import HANDLERS
from spark_mq.errors import CorruptFrameError, StorageError, UnsupportedVersionError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import encode_frame_error, encode_response, spec_for
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import SIZE, decode_request, frame_size
from spark_mq.storage.file_records import FileRange

if TYPE_CHECKING:
    from spark_mq.broker.server import BrokerServer

logger = logging.getLogger("spark_mq.broker.connection")

#: File ranges smaller than this are copied (one pread) instead of sent with sendfile.
SENDFILE_MIN_BYTES: Final = 64 * 1024
#: The reusable receive buffer of a connection; one ``recv_into`` reads at most this much.
RECEIVE_BUFFER_BYTES: Final = 256 * 1024
#: Frames larger than this are read into a buffer of their own, so the receive buffer always
#: has room for the unparsed part of a frame.
LARGE_FRAME_BYTES: Final = RECEIVE_BUFFER_BYTES // 2
#: Bytes of complete frames waiting to be served before the connection stops reading: room
#: for a producer's five in-flight requests of 1 MB.
READ_AHEAD_BYTES: Final = 8 * 1024 * 1024
#: Buffers of large frames are kept for reuse (allocating and zeroing a fresh 1 MB buffer per
#: request cost as much as reading it) up to this size, and at most this many per broker.
POOLED_FRAME_MAX_BYTES: Final = 2 * 1024 * 1024
POOLED_FRAME_BUFFERS: Final = 8
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


class FrameBufferPool:
    """Buffers for large frames, reused across requests and connections (event loop only).

    A buffer goes back to the pool only when nothing but the pool refers to it: a handler
    that kept a view of its frame (against the contract of
    :data:`~spark_mq.broker.context.Handler`) keeps the buffer, which is then never written
    again.
    """

    def __init__(self) -> None:
        self._free: list[bytearray] = []

    def take(self, size: int) -> memoryview:
        """A buffer of exactly ``size`` bytes (contents undefined)."""
        free = self._free
        for i, buf in enumerate(free):
            if len(buf) >= size:
                del free[i]
                return memoryview(buf)[:size]
        if size > POOLED_FRAME_MAX_BYTES:
            return memoryview(bytearray(size))
        # Whole 256 KiB steps, so that buffers fit the next frames of about the same size.
        step = RECEIVE_BUFFER_BYTES
        return memoryview(bytearray(-(-size // step) * step))[:size]

    def give(self, buf: bytearray) -> None:
        """Return the buffer of a served frame (the caller holds no other reference)."""
        # References: the caller's, and getrefcount's argument; any more means a view of
        # the frame is still alive somewhere.
        if (
            len(buf) <= POOLED_FRAME_MAX_BYTES
            and len(self._free) < POOLED_FRAME_BUFFERS
            and sys.getrefcount(buf) <= 3
        ):
            self._free.append(buf)


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
    """Serves one accepted socket until EOF, garbage, idle timeout or shutdown."""

    def __init__(self, server: BrokerServer, listener: BrokerAddress) -> None:
        self.server = server
        self.core = server.core
        self.listener = listener
        self.peer = str(listener)
        self.busy = False
        # The loop, looked up once: get_running_loop() costs a getpid() per call.
        self._loop = asyncio.get_running_loop()
        self.last_activity = self._loop.time()
        self.task: asyncio.Task[None] | None = None
        self._max_frame_bytes = self.core.config.broker.socket_request_max_bytes
        self._transport: asyncio.Transport | None = None
        self._fd = -1  # the socket's descriptor, for sendfile
        # Receiving: the receive buffer, its unparsed part [start, end), the frames lent out
        # of it, and the large frame being read into a buffer of its own.
        self._buf = bytearray(RECEIVE_BUFFER_BYTES)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._lent = 0
        self._large: memoryview | None = None
        self._large_filled = 0
        self._frames: collections.deque[memoryview] = collections.deque()
        self._frames_bytes = 0
        self._frame_waiter: asyncio.Future[None] | None = None
        self._read_paused = False
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
        sock = transport.get_extra_info("socket")
        tune_socket(sock)
        self._fd = sock.fileno() if sock is not None else -1
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}"
        self.server.connections.add(self)
        self.core.touch()
        self.task = self._loop.create_task(self._run())

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            return self._large[self._large_filled :]
        if self._end == len(self._buf):
            self._make_room()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        large = self._large
        if large is not None:
            self._large_filled += nbytes
            if self._large_filled == len(large):
                self._large = None
                self._push(large)
        else:
            self._end += nbytes
            self._parse()
        if self._frames_bytes >= READ_AHEAD_BYTES and not self._read_paused:
            self._pause_reading()

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

    def _parse(self) -> None:
        """Cut every complete frame out of the receive buffer."""
        view = self._view
        while self._bad_prefix is None:
            start = self._start
            available = self._end - start
            if available < SIZE.size:
                break
            try:
                size = frame_size(view[start : start + SIZE.size], self._max_frame_bytes)
            except CorruptFrameError as exc:
                # Answer the frames that came before, then close (see _next_frame).
                self._bad_prefix = exc
                self._pause_reading()
                self._wake_reader()
                break
            begin = start + SIZE.size
            if size > LARGE_FRAME_BYTES:
                large = self.server.frame_buffers.take(size)
                have = min(available - SIZE.size, size)
                large[:have] = view[begin : begin + have]
                self._start = begin + have
                if have == size:
                    self._push(large)
                    continue
                self._large, self._large_filled = large, have
                break
            if available - SIZE.size < size:
                break
            self._start = begin + size
            self._lent += 1
            self._push(view[begin : begin + size])
        if self._start == self._end and not self._lent:
            self._start = self._end = 0

    def _make_room(self) -> None:
        """The receive buffer is full: move its unparsed tail (part of one frame) to the
        front, or to a new buffer if frames lent out of this one still point into it."""
        start, end = self._start, self._end
        tail = end - start
        if self._lent:
            buf = bytearray(RECEIVE_BUFFER_BYTES)
            buf[:tail] = self._view[start:end]
            self._buf, self._view = buf, memoryview(buf)
            self._lent = 0
        elif start:
            self._view[:tail] = self._view[start:end]
        self._start, self._end = 0, tail
        assert self._end < len(self._buf), "receive buffer full of one unparsed frame"

    def _push(self, frame: memoryview) -> None:
        self._frames.append(frame)
        self._frames_bytes += len(frame)
        self._wake_reader()

    def _wake_reader(self) -> None:
        waiter, self._frame_waiter = self._frame_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause_reading(self) -> None:
        self._read_paused = True
        if self._transport is not None and not self._lost:
            self._transport.pause_reading()

    def _release(self, frame: memoryview) -> None:
        """The frame was served: its part of the receive buffer, or its own buffer, may be
        reused."""
        buf = frame.obj
        if buf is self._buf:
            self._lent -= 1
            if not self._lent and self._start == self._end:
                self._start = self._end = 0
        elif isinstance(buf, bytearray):
            # Drops this view's hold on the buffer even while the caller still names it; a
            # view that something else exported keeps it (BufferError), and then the pool
            # sees the extra reference and lets the buffer go.
            with contextlib.suppress(BufferError):
                frame.release()
            del frame
            self.server.frame_buffers.give(buf)

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
        self._frames_bytes -= len(frame)
        if (
            self._read_paused
            and self._frames_bytes < READ_AHEAD_BYTES
            and self._bad_prefix is None
            and not self._lost
        ):
            self._read_paused = False
            assert self._transport is not None
            self._transport.resume_reading()
        return frame

    # -- serving --------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
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
            self.server.connections.discard(self)
            self.core.touch()

    async def _serve(self, data: memoryview) -> bool:
        """Handle one frame; returns False when the connection must be closed."""
        try:
            frame = decode_request(data)
        except CorruptFrameError as exc:
            logger.warning("closing connection from %s: %s", self.peer, exc)
            return False
        header = frame.header
        cid = header.correlation_id
        try:
            spec = spec_for(header.api_key, header.api_version)
            handler = HANDLERS.get(spec.key)
            if handler is None:
                raise UnsupportedVersionError(f"{spec.key.name} is not served by this broker")
            request = spec.decode_request(frame.body)
        except UnsupportedVersionError as exc:
            return self._frame_error(cid, ErrorCode.UNSUPPORTED_VERSION, str(exc))
        except CorruptFrameError as exc:
            return self._frame_error(cid, ErrorCode.INVALID_REQUEST, str(exc))
        except Exception as exc:  # any decoder failure means the same: a bad body
            return self._frame_error(
                cid, ErrorCode.INVALID_REQUEST, f"undecodable request body: {exc!r}"
            )
        ctx = RequestContext(self.core, header, self.listener, self.peer)
        try:
            response = await handler(ctx, request, frame.records)
        except CorruptFrameError as exc:
            return self._frame_error(cid, ErrorCode.INVALID_REQUEST, str(exc))
        except Exception as exc:
            logger.exception("%s from %s failed", spec.key.name, self.peer)
            return self._frame_error(
                cid,
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"{spec.key.name} failed on the broker ({type(exc).__name__}: {exc}); see the "
                "broker's log",
            )
        if response is None:
            return True
        return await self._send(cid, response)

    def _frame_error(self, correlation_id: int, code: ErrorCode, message: str) -> bool:
        logger.info("frame error %s for %s: %s", code.name, self.peer, message)
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
        if self._fd >= 0 and not transport.get_write_buffer_size():
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
