"""The broker's connections (spark_mq/broker/connection.py; named apart from the client's
test_connection.py, which shares a module name) in-process: a BrokerServer on an event loop
thread over a LogManager in tmp_path, spoken to with raw frames from blocking sockets.

Covered here rather than through a broker process: what the accepted sockets are set to
(TCP_NODELAY), frames cut at arbitrary points and pipelined (small, large and over the
receive buffer), answers in order around sendfile, and a bad size prefix after good frames.
The buffers and the request memory pool are in test_request_memory.py, the limits on a real
broker in tests/integration/test_broker_limits.py.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.broker.config import Listener, ServerConfig
from spark_mq.broker.connection import (
    LARGE_FRAME_BYTES,
    RECEIVE_BUFFER_BYTES,
    SENDFILE_MIN_BYTES,
)
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.server import BrokerServer
from spark_mq.protocol import api_versions, fetch, produce
from spark_mq.protocol.api import encode_request, spec_for_request
from spark_mq.protocol.framing import SIZE, decode_response
from spark_mq.storage.batch_decoder import decode_records
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import encode_batch


class LoopThread:
    """A BrokerServer served by an event loop on a thread of its own."""

    def __init__(self, root: Path) -> None:
        self.logs = LogManager(root)
        config = ServerConfig.from_properties({"log.dirs": str(root)})
        self.core = BrokerCore(config, self.logs, BrokerMeta.take_over(root))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        listeners = [Listener("PLAINTEXT", "127.0.0.1", 0), Listener("UNIX")]
        self.server = self.call(self._start(listeners, str(root / "broker.sock")), timeout_s=30)

    async def _start(self, listeners: list[Listener], unix_path: str) -> BrokerServer:
        server = BrokerServer(self.core, listeners, default_unix_path=unix_path)
        await server.start()
        return server

    def call(self, coro: Any, timeout_s: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def connect(self, *, unix: bool = False) -> socket.socket:
        address = next(a for a in self.server.addresses if (a.unix_path is not None) == unix)
        sock = address.connect(10)
        sock.settimeout(30)
        return sock

    def close(self) -> None:
        self.call(self.server.close(5.0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        self.core.close()
        self.logs.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LoopThread]:
    served = LoopThread(tmp_path / "mq")
    yield served
    served.close()


def frame(request: Any, records: bytes = b"", correlation_id: int = 1) -> bytes:
    head, body = encode_request(request, correlation_id=correlation_id, records_len=len(records))
    return head + body + records


def produce_frame(topic: str, records: bytes, correlation_id: int) -> bytes:
    request = produce.ProduceRequest(
        1, 30_000, [produce.ProduceTopic(topic, [produce.ProducePartition(0, len(records))])]
    )
    return frame(request, records, correlation_id)


def fetch_frame(topic: str, offset: int, correlation_id: int) -> bytes:
    request = fetch.FetchRequest(
        0,
        0,
        1 << 26,
        [fetch.FetchTopic(topic, [fetch.FetchPartition(0, offset, 1 << 26)])],
        fetch.READ_UNCOMMITTED,
    )
    return frame(request, b"", correlation_id)


def read_frame(sock: socket.socket) -> Any:
    """The next response frame, or None at EOF."""

    def exactly(n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    prefix = exactly(SIZE.size)
    if prefix is None:
        return None
    data = exactly(SIZE.unpack(prefix)[0])
    assert data is not None, "the broker closed the connection inside a frame"
    return decode_response(data)


def body_of(response: Any, request: Any) -> Any:
    assert response.frame_error == 0
    return spec_for_request(request).decode_response(response.body)


def batch_of(count: int, value_bytes: int, seed: int) -> bytes:
    rng = random.Random(seed)
    return encode_batch(pa.array([rng.randbytes(value_bytes) for _ in range(count)]))


def test_accepted_tcp_sockets_have_nodelay(broker: LoopThread) -> None:
    # Without TCP_NODELAY a response written in two parts (head, then records) waits for
    # the client's delayed ACK of the first part: 40 ms per fetch on Linux.
    with broker.connect() as sock:
        sock.sendall(frame(api_versions.ApiVersionsRequest()))
        assert read_frame(sock) is not None

        async def nodelay() -> list[int]:
            return [
                conn._transport.get_extra_info("socket").getsockopt(
                    socket.IPPROTO_TCP, socket.TCP_NODELAY
                )
                for conn in broker.server.connections
                if conn._transport is not None
            ]

        flags = broker.call(nodelay())
    assert flags and all(flags)


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_pipelined_frames_cut_anywhere_are_answered_in_order(
    broker: LoopThread, unix: bool
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    batches = [
        batch_of(1, 10, 1),  # small
        batch_of(40, 4_000, 2),  # over LARGE_FRAME_BYTES: a buffer of its own
        batch_of(5, 100, 3),
        batch_of(80, 4_000, 4),  # over the whole receive buffer
        batch_of(3, 100, 5),
    ]
    assert len(batches[1]) > LARGE_FRAME_BYTES and len(batches[3]) > RECEIVE_BUFFER_BYTES
    requests = [produce_frame("p", b, cid) for cid, b in enumerate(batches, start=1)]
    requests.append(frame(api_versions.ApiVersionsRequest(), correlation_id=len(batches) + 1))
    data = b"".join(requests)
    with broker.connect(unix=unix) as sock:
        pos = 0
        while pos < len(data):  # pieces of 1 byte to 200 KB, cutting frames anywhere
            step = rng.choice([1, 3, 4, 5, 61, 1000, 70_000, 200_000])
            sock.sendall(data[pos : pos + step])
            pos += step
        responses = [read_frame(sock) for _ in requests]
    assert [r.correlation_id for r in responses] == list(range(1, len(requests) + 1)), seed
    offsets = [
        body_of(r, produce.ProduceRequest(1, 0, [])).topics[0].partitions[0].base_offset
        for r in responses[:-1]
    ]
    counts = [1, 40, 5, 80, 3]
    assert offsets == [sum(counts[:i]) for i in range(len(counts))], seed
    # What was appended is what was sent.
    with broker.connect(unix=unix) as sock:
        sock.sendall(fetch_frame("p", 0, 99))
        response = read_frame(sock)
    assert bytes(decode_records(response.records).column("value").to_pylist()[-1]) == bytes(
        decode_records(batches[-1]).column("value").to_pylist()[-1]
    )


def test_responses_around_sendfile_keep_their_order(broker: LoopThread) -> None:
    big = batch_of(100, 1_000, 7)
    assert len(big) >= SENDFILE_MIN_BYTES
    with broker.connect() as sock:
        sock.sendall(produce_frame("s", big, 1))
        read_frame(sock)
        # A fetch whose records go out with sendfile between two small answers, pipelined.
        sock.sendall(
            frame(api_versions.ApiVersionsRequest(), correlation_id=2)
            + fetch_frame("s", 0, 3)
            + frame(api_versions.ApiVersionsRequest(), correlation_id=4)
        )
        responses = [read_frame(sock) for _ in range(3)]
    assert [r.correlation_id for r in responses] == [2, 3, 4]
    # All but the 16 bytes outside the CRC, where the log set the offset and leader epoch.
    records = bytes(responses[1].records)
    assert len(records) == len(big) and records[16:] == big[16:]


def test_a_bad_size_prefix_after_good_frames_answers_them_then_closes(
    broker: LoopThread,
) -> None:
    with broker.connect() as sock:
        sock.sendall(
            frame(api_versions.ApiVersionsRequest(), correlation_id=1)
            + frame(api_versions.ApiVersionsRequest(), correlation_id=2)
            + SIZE.pack(-7)
            + b"garbage"
        )
        assert [read_frame(sock).correlation_id for _ in range(2)] == [1, 2]
        assert read_frame(sock) is None  # closed
    with broker.connect() as sock:  # the broker still serves others
        sock.sendall(frame(api_versions.ApiVersionsRequest(), correlation_id=5))
        assert read_frame(sock).correlation_id == 5


def test_a_client_closing_its_side_still_gets_the_answers(broker: LoopThread) -> None:
    with broker.connect(unix=True) as sock:
        sock.sendall(produce_frame("h", batch_of(2, 10, 8), 1) + fetch_frame("h", 0, 2))
        sock.shutdown(socket.SHUT_WR)
        responses = [read_frame(sock), read_frame(sock)]
        assert read_frame(sock) is None
    assert [r.correlation_id for r in responses] == [1, 2]
    assert decode_records(responses[1].records).num_rows == 2


def test_every_byte_of_request_memory_and_every_connection_slot_is_given_back(
    broker: LoopThread,
) -> None:
    big = batch_of(80, 4_000, 9)  # over the scratch buffer
    with broker.connect() as sock:  # served frames
        sock.sendall(b"".join(produce_frame("m", big, cid) for cid in range(1, 4)))
        assert [read_frame(sock).correlation_id for _ in range(3)] == [1, 2, 3]
    with broker.connect() as sock:  # a large frame cut off by the client
        sock.sendall(produce_frame("m", big, 9)[:100_000])
    with broker.connect(unix=True) as sock:  # a size prefix alone
        sock.sendall(SIZE.pack(50_000_000))
    with broker.connect(unix=True) as sock:  # a size prefix cut short
        sock.sendall(SIZE.pack(50_000_000)[:3])

    async def settled() -> tuple[int, int, dict[str, int]]:
        server = broker.server
        for _ in range(500):
            if not server.connections:
                break
            await asyncio.sleep(0.01)
        return server.memory.used_bytes, server.quotas.count, dict(server.quotas.per_ip)

    assert broker.call(settled()) == (0, 0, {})
