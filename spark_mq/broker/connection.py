"""One client connection: read frames, dispatch them in order, write the responses.

Requests on a connection are handled one at a time and answered in the order they came, as
Kafka guarantees; a long-polling fetch therefore delays later responses on its connection
only. The reader reads the 4-byte size, refuses sizes over ``socket.request.max.bytes``,
reads the frame and dispatches by API key. What the broker does with bad input:

- bytes that are not a frame (a size out of range, a header cut short): log, close this
  connection, keep serving the others;
- an unknown API key or version: a response with ``frame_error`` UNSUPPORTED_VERSION;
- a body that does not decode, or records sections whose sizes do not add up: a response
  with ``frame_error`` INVALID_REQUEST (the frame boundary is intact, so the connection
  stays usable);
- an exception escaping a handler (a bug): logged, ``frame_error`` UNKNOWN_SERVER_ERROR.

Responses are written as head and body, then each partition's records: a file range of at
least :data:`SENDFILE_MIN_BYTES` goes out with ``loop.sendfile`` (``sendfile(2)`` straight
from the segment file to the socket, TCP or Unix; partial sends and EAGAIN are handled by the
loop), a smaller one is read with one ``pread`` and written, which is cheaper than pausing the
transport for a sendfile. A range that comes up short (the file was truncated under the
reader) would leave the client with a frame shorter than announced, so the connection is
closed. File ranges are closed on every path.
"""

from __future__ import annotations

import asyncio
import logging
import os
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
#: StreamReader buffer limit: frames are read with readexactly, so this only bounds how far
#: the reader reads ahead of the request being handled.
READ_AHEAD_BYTES: Final = 1024 * 1024


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


class Connection:
    """Serves one accepted socket until EOF, garbage, idle timeout or shutdown."""

    def __init__(
        self,
        server: BrokerServer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: BrokerAddress,
    ) -> None:
        self.server = server
        self.core = server.core
        self.reader = reader
        self.writer = writer
        self.listener = listener
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(listener)
        self.busy = False
        self.last_activity = asyncio.get_running_loop().time()
        self.task: asyncio.Task[None] | None = None
        self._max_frame_bytes = self.core.config.broker.socket_request_max_bytes

    async def run(self) -> None:
        try:
            while not self.server.stopping:
                prefix = await self.reader.readexactly(SIZE.size)
                try:
                    size = frame_size(prefix, self._max_frame_bytes)
                except CorruptFrameError as exc:
                    logger.warning("closing connection from %s: %s", self.peer, exc)
                    return
                frame = await self.reader.readexactly(size)
                self.busy = True
                self.last_activity = asyncio.get_running_loop().time()
                self.core.touch()
                try:
                    keep_open = await self._serve(frame)
                finally:
                    self.busy = False
                    self.core.touch()
                if not keep_open:
                    return
        except asyncio.IncompleteReadError:
            pass  # the client closed the connection between or inside frames
        except (ConnectionError, OSError) as exc:
            logger.debug("connection from %s failed: %s", self.peer, exc)
        except StorageError as exc:
            # A response's records could not be read after its head went out.
            logger.error("closing connection from %s: %s", self.peer, exc)
        except Exception:
            logger.exception("connection from %s failed unexpectedly; closing it", self.peer)
        finally:
            self.writer.close()

    async def _serve(self, data: bytes) -> bool:
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
            return await self._frame_error(cid, ErrorCode.UNSUPPORTED_VERSION, str(exc))
        except CorruptFrameError as exc:
            return await self._frame_error(cid, ErrorCode.INVALID_REQUEST, str(exc))
        except Exception as exc:  # any decoder failure means the same: a bad body
            return await self._frame_error(
                cid, ErrorCode.INVALID_REQUEST, f"undecodable request body: {exc!r}"
            )
        ctx = RequestContext(self.core, header, self.listener, self.peer)
        try:
            response = await handler(ctx, request, frame.records)
        except CorruptFrameError as exc:
            return await self._frame_error(cid, ErrorCode.INVALID_REQUEST, str(exc))
        except Exception as exc:
            logger.exception("%s from %s failed", spec.key.name, self.peer)
            return await self._frame_error(
                cid,
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"{spec.key.name} failed on the broker ({type(exc).__name__}: {exc}); see the "
                "broker's log",
            )
        if response is None:
            return True
        return await self._send(cid, response)

    async def _frame_error(self, correlation_id: int, code: ErrorCode, message: str) -> bool:
        logger.info("frame error %s for %s: %s", code.name, self.peer, message)
        self.writer.write(encode_frame_error(correlation_id, int(code), message))
        await self.writer.drain()
        return True

    async def _send(self, correlation_id: int, response: Response) -> bool:
        try:
            if response.silent:
                return not response.close_connection
            head, body = encode_response(
                response.body, correlation_id=correlation_id, records_len=response.records_size
            )
            writer = self.writer
            writer.write(head + body)
            loop = asyncio.get_running_loop()
            for item in response.records:
                if isinstance(item, bytes):
                    writer.write(item)
                elif item.size < SENDFILE_MIN_BYTES:
                    writer.write(item.read())
                else:
                    file = cast(IO[bytes], _RangeFile(item))
                    sent = await loop.sendfile(writer.transport, file, item.position, item.size)
                    if sent != item.size:
                        logger.error(
                            "sent %d of %d bytes of %s to %s: the segment was truncated under "
                            "the read; closing the connection (the client retries the fetch)",
                            sent,
                            item.size,
                            item.path,
                            self.peer,
                        )
                        return False
            await writer.drain()
            return not response.close_connection
        finally:
            response.close()
