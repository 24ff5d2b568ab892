"""A scripted broker for unit tests of the group client: a Unix-socket peer that decodes
each request and answers with what the test's handler returns (bytes, not a broker).

Each connection is served by its own thread, so a handler that blocks (a JoinGroup held
until the test releases it) delays only its own connection, as a real coordinator does.
Metadata and FindCoordinator have built-in answers (one broker, node 0, this socket); the
test handles everything else. Every request is recorded in ``requests``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from spark_mq.protocol.api import decode_request_body, encode_response
from spark_mq.protocol.framing import SIZE, decode_request
from spark_mq.protocol.groups import FindCoordinatorRequest, FindCoordinatorResponse
from spark_mq.protocol.metadata import (
    BrokerMetadata,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
)

Handler = Callable[[Any], Any]


class ScriptedBroker:
    """Answers requests on ``unix:<path>`` with ``handler(request)``."""

    def __init__(self, path: str, topics: dict[str, int]) -> None:
        self.path = path
        self.topics = dict(topics)
        self.handler: Handler = lambda request: None
        self.requests: list[Any] = []
        self._cond = threading.Condition()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(path)
        self._server.listen(16)
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    @property
    def address(self) -> str:
        return f"unix:{self.path}"

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            self._socks.append(sock)
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, sock: socket.socket) -> None:
        def exactly(n: int) -> bytes | None:
            buf = b""
            while len(buf) < n:
                try:
                    chunk = sock.recv(n - len(buf))
                except OSError:
                    return None
                if not chunk:
                    return None
                buf += chunk
            return buf

        while True:
            prefix = exactly(SIZE.size)
            if prefix is None:
                return
            data = exactly(SIZE.unpack(prefix)[0])
            if data is None:
                return
            frame = decode_request(data)
            request, _ = decode_request_body(frame)
            with self._cond:
                self.requests.append(request)
                self._cond.notify_all()
            response = self._answer(request)
            if response is None:
                continue
            head, body = encode_response(response, correlation_id=frame.header.correlation_id)
            try:
                sock.sendall(head + body)
            except OSError:
                return

    def _answer(self, request: Any) -> Any:
        if isinstance(request, MetadataRequest):
            names = list(self.topics) if request.topics is None else request.topics
            topics = [
                TopicMetadata(
                    0 if name in self.topics else 3,
                    name,
                    [
                        PartitionMetadata(0, p, 0, 0, [0], [0])
                        for p in range(self.topics.get(name, 0))
                    ],
                )
                for name in names
            ]
            return MetadataResponse([BrokerMetadata(0, self.address, 0)], "c", 0, topics)
        if isinstance(request, FindCoordinatorRequest):
            return FindCoordinatorResponse(0, 0, self.address, 0)
        return self.handler(request)

    def wait_for(self, kind: type, count: int = 1, timeout_s: float = 10.0) -> list[Any]:
        """Wait until ``count`` requests of ``kind`` arrived; returns all of that kind."""
        with self._cond:
            self._cond.wait_for(lambda: len(self.of(kind)) >= count, timeout=timeout_s)
            found = self.of(kind)
        assert len(found) >= count, f"only {len(found)} {kind.__name__} requests arrived"
        return found

    def of(self, kind: type) -> list[Any]:
        return [r for r in self.requests if isinstance(r, kind)]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept() thread
        self._server.close()
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(5)
        if os.path.exists(self.path):
            os.unlink(self.path)


def scripted_broker(tmp_path: Any, topics: dict[str, int]) -> Iterator[ScriptedBroker]:
    broker = ScriptedBroker(str(tmp_path / "peer.sock"), topics)
    try:
        yield broker
    finally:
        broker.close()
