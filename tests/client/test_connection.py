"""The connection layer against a scripted peer on a Unix socket (bytes, not a broker):
pipelining, big frames, frame errors, corrupt streams, timeouts and connection loss."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.client.connection import (
    RECEIVE_BUFFER_BYTES,
    SHARED_FRAME_BUFFERS,
    BrokerConnection,
    FrameBufferPool,
)
from spark_mq.errors import BrokerNotAvailableError, NetworkError, UnsupportedVersionError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import encode_frame_error, encode_response
from spark_mq.protocol.fetch import (
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
)
from spark_mq.protocol.framing import SIZE, RequestFrame, decode_request
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse
from spark_mq.protocol.produce import (
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
)

Script = Callable[[socket.socket], object]
Peer = Callable[..., BrokerConnection]


def exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        assert chunk, "client closed"
        buf += chunk
    return bytes(buf)


def read_request(sock: socket.socket) -> RequestFrame:
    (size,) = SIZE.unpack(exactly(sock, SIZE.size))
    return decode_request(exactly(sock, size))


def read_request_id(sock: socket.socket) -> int:
    return read_request(sock).header.correlation_id


def fetch_reply(correlation_id: int, records: bytes) -> bytes:
    """A Fetch response of one partition carrying ``records`` raw."""
    part = FetchPartitionResponse(0, 0, 1, 1, 0, len(records))
    body = FetchResponse(0, [FetchTopicResponse("t", [part])])
    head, encoded = encode_response(body, correlation_id=correlation_id, records_len=len(records))
    return head + encoded + records


def metadata_reply(correlation_id: int, cluster_id: str = "c") -> bytes:
    head, body = encode_response(
        MetadataResponse([], cluster_id, 0, []), correlation_id=correlation_id
    )
    return head + body


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Peer]:
    path = str(tmp_path / "peer.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    threads: list[threading.Thread] = []
    conns: list[BrokerConnection] = []

    def start(script: Script, request_timeout_ms: int = 5000) -> BrokerConnection:
        def run() -> None:
            sock, _ = server.accept()
            with sock:
                script(sock)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)
        conn = BrokerConnection(
            BrokerAddress(unix_path=path), request_timeout_ms=request_timeout_ms
        )
        conns.append(conn)
        return conn

    yield start
    for conn in conns:
        conn.close()
    for thread in threads:
        thread.join(10)
    server.close()


def test_pipelined_requests_get_their_responses_in_order(peer: Peer) -> None:
    def script(sock: socket.socket) -> None:
        ids = [read_request_id(sock) for _ in range(3)]
        sock.sendall(b"".join(metadata_reply(i, f"c{n}") for n, i in enumerate(ids)))
        sock.recv(1)  # wait for the client to close

    conn = peer(script)
    for n in range(3):
        conn.send(MetadataRequest([]), context=n)
    responses = [conn.receive(5) for _ in range(3)]
    assert [r.context for r in responses if r is not None] == [0, 1, 2]
    assert [r.body.cluster_id for r in responses if r is not None] == ["c0", "c1", "c2"]


def test_a_frame_larger_than_the_buffer_is_read_into_its_own(peer: Peer) -> None:
    records = bytes(range(256)) * (RECEIVE_BUFFER_BYTES // 256 * 3)

    def script(sock: socket.socket) -> None:
        cid = read_request_id(sock)
        part = FetchPartitionResponse(0, 0, 1, 1, 0, len(records))
        body = FetchResponse(0, [FetchTopicResponse("t", [part])])
        head, encoded = encode_response(body, correlation_id=cid, records_len=len(records))
        data = head + encoded + records
        for i in range(0, len(data), 100_000):  # dribbled out in pieces
            sock.sendall(data[i : i + 100_000])
        cid = read_request_id(sock)
        sock.sendall(metadata_reply(cid))
        sock.recv(1)

    conn = peer(script)
    conn.send(FetchRequest(0, 0, 1, []))
    response = conn.receive(5)
    assert response is not None and bytes(response.records) == records
    # The receive buffer is still usable for the small frames after it.
    assert conn.request(MetadataRequest([])).cluster_id == "c"


def test_large_frames_back_to_back_and_a_small_one_after_them(peer: Peer) -> None:
    # After a large frame the connection reads just the next size prefix, then the frame
    # straight into a buffer of its own.
    first = bytes(range(256)) * (RECEIVE_BUFFER_BYTES // 256)
    second = bytes(reversed(first)) * 2

    def script(sock: socket.socket) -> None:
        ids = [read_request_id(sock) for _ in range(3)]
        sock.sendall(
            fetch_reply(ids[0], first) + fetch_reply(ids[1], second) + metadata_reply(ids[2])
        )
        sock.recv(1)

    conn = peer(script)
    conn.send(FetchRequest(0, 0, 1, []))
    conn.send(FetchRequest(0, 0, 1, []))
    conn.send(MetadataRequest([]))
    responses = [conn.receive(5) for _ in range(3)]
    assert [bytes(r.records) for r in responses[:2] if r is not None] == [first, second]
    assert responses[2] is not None and responses[2].body.cluster_id == "c"


def test_large_frame_buffers_are_reused_only_once_nothing_points_into_them(peer: Peer) -> None:
    # Fetched records are decoded without a copy, so a frame's buffer must not be read into
    # again while anything made from it lives; once released, it is reused.
    size = RECEIVE_BUFFER_BYTES * 2
    payloads = [bytes([n]) * size for n in range(1, 8)]

    def script(sock: socket.socket) -> None:
        for records in payloads:
            sock.sendall(fetch_reply(read_request_id(sock), records))
        sock.recv(1)

    SHARED_FRAME_BUFFERS.clear()  # what earlier tests left there would change the counts
    conn = peer(script)

    def fetch() -> memoryview:
        conn.send(FetchRequest(0, 0, 1, []))
        response = conn.receive(5)
        assert response is not None
        return memoryview(response.records)

    kept = [fetch() for _ in range(5)]  # more than the pool holds, all alive
    assert [bytes(v) for v in kept] == payloads[:5]
    addresses = [pa.py_buffer(v).address for v in kept]
    assert len(set(addresses)) == 5
    arrow_view = pa.py_buffer(kept[0])  # an Arrow buffer keeps the bytes alive too
    del kept
    sixth = fetch()
    assert bytes(sixth) == payloads[5]
    assert bytes(arrow_view) == payloads[0], "a live Arrow buffer's bytes were overwritten"
    # Read into a pooled buffer nothing points into any more (not the first: Arrow holds it).
    assert pa.py_buffer(sixth).address in addresses[1:4]
    del arrow_view
    seventh = fetch()
    assert bytes(seventh) == payloads[6]
    assert bytes(sixth) == payloads[5]
    assert pa.py_buffer(seventh).address in set(addresses[:4]) - {pa.py_buffer(sixth).address}


def test_the_frame_buffer_pool_keeps_no_more_than_its_byte_limit() -> None:
    pool = FrameBufferPool(max_buffers=4, max_bytes=1000)
    first = pool.take(600)
    first_address = pa.py_buffer(first).address
    second = pool.take(700)  # 600 + 700 is over the limit: a buffer of its own, not kept
    assert [b.nbytes for b in pool._buffers] == [600]
    third = pool.take(300)  # 600 + 300 fits
    assert [b.nbytes for b in pool._buffers] == [600, 300]
    del first, second
    again = pool.take(500)  # the free 600-byte buffer is read into again
    assert pa.py_buffer(again).address == first_address
    assert len(third) == 300


def test_a_later_connection_reads_into_the_buffers_an_earlier_one_released(peer: Peer) -> None:
    # A Spark Python worker opens a consumer per task: the pages of one task's fetches are
    # used again by the next task's rather than faulted in anew.
    size = RECEIVE_BUFFER_BYTES * 2
    SHARED_FRAME_BUFFERS.clear()
    addresses = []
    for n in (1, 2):
        records = bytes([n]) * size

        def script(sock: socket.socket, records: bytes = records) -> None:
            sock.sendall(fetch_reply(read_request_id(sock), records))
            sock.recv(1)

        conn = peer(script)
        conn.send(FetchRequest(0, 0, 1, []))
        response = conn.receive(5)
        assert response is not None and bytes(response.records) == records
        addresses.append(pa.py_buffer(response.records).address)
        conn.close()
        del response
    assert addresses[0] == addresses[1]
    assert size <= SHARED_FRAME_BUFFERS.pooled_bytes < 2 * size  # one buffer, kept


def test_threads_taking_buffers_at_once_never_get_the_same_one() -> None:
    pool = FrameBufferPool(max_buffers=4, max_bytes=1 << 20)
    for view in [pool.take(1000) for _ in range(4)]:
        del view  # four free buffers in the pool
    held: list[memoryview] = []
    barrier = threading.Barrier(8)

    def grab() -> None:
        barrier.wait()
        for _ in range(200):
            view = pool.take(1000)
            held.append(view)
            if len(held) > 16:
                with contextlib.suppress(IndexError):
                    held.pop(0)

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    live = [pa.py_buffer(v).address for v in held]
    assert len(live) == len(set(live)), "two live views share a buffer"


def test_a_forked_child_starts_with_an_empty_pool() -> None:
    view = SHARED_FRAME_BUFFERS.take(RECEIVE_BUFFER_BYTES * 2)
    assert SHARED_FRAME_BUFFERS.pooled_bytes > 0
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its pool's size and leave at once
        os.write(write_end, str(SHARED_FRAME_BUFFERS.pooled_bytes).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        assert reader.read() == "0"
    os.waitpid(pid, 0)
    assert SHARED_FRAME_BUFFERS.pooled_bytes > 0
    del view


def produce_request(records: bytes) -> ProduceRequest:
    return ProduceRequest(1, 1000, [ProduceTopic("t", [ProducePartition(0, len(records))])])


def test_a_request_larger_than_the_socket_buffers_is_written_whole(peer: Peer) -> None:
    records = bytes(range(256)) * (16 * 1024 * 1024 // 256)  # many times any socket buffer
    received: list[bytes] = []

    def script(sock: socket.socket) -> None:
        request = read_request(sock)
        received.append(bytes(request.records))
        head, body = encode_response(
            ProduceResponse([]), correlation_id=request.header.correlation_id
        )
        sock.sendall(head + body)
        sock.recv(1)

    conn = peer(script)
    conn.send(produce_request(records), records=[records[:1000], records[1000:]])
    assert conn.receive(5) is not None
    assert received == [records]


def test_a_request_the_broker_never_reads_fails_retriably(peer: Peer) -> None:
    done = threading.Event()
    conn = peer(lambda sock: done.wait(30), request_timeout_ms=100)
    records = bytes(64 * 1024 * 1024)  # more than the kernel buffers
    try:
        with pytest.raises(NetworkError, match="writing a request") as info:
            conn.send(produce_request(records), records=[records], context="lost")
        assert info.value.retriable and not conn.connected
    finally:
        done.set()


def test_a_frame_error_becomes_the_typed_error(peer: Peer) -> None:
    def script(sock: socket.socket) -> None:
        cid = read_request_id(sock)
        sock.sendall(encode_frame_error(cid, 35, "version 9 is not supported"))
        sock.recv(1)

    conn = peer(script)
    conn.send(MetadataRequest([]))
    response = conn.receive(5)
    assert response is not None and isinstance(response.error, UnsupportedVersionError)
    with pytest.raises(UnsupportedVersionError, match="version 9"):
        response.result()


def test_a_wrong_correlation_id_closes_the_connection(peer: Peer) -> None:
    def script(sock: socket.socket) -> None:
        cid = read_request_id(sock)
        read_request_id(sock)
        sock.sendall(metadata_reply(cid + 1000))
        sock.recv(1)

    conn = peer(script)
    conn.send(MetadataRequest([]), context="a")
    conn.send(MetadataRequest([]), context="b")
    with pytest.raises(NetworkError, match="correlation id"):
        conn.receive(5)
    assert not conn.connected
    assert conn.close() == ["a", "b"]  # both are retried by their owner


def test_the_peer_closing_fails_pending_requests_retriably(peer: Peer) -> None:
    conn = peer(read_request_id)
    conn.send(MetadataRequest([]), context="pending")
    with pytest.raises(NetworkError) as info:
        conn.receive(5)
    assert info.value.retriable
    assert conn.close() == ["pending"]


def test_a_frame_size_over_the_limit_is_refused(tmp_path: Path, peer: Peer) -> None:
    def script(sock: socket.socket) -> None:
        read_request_id(sock)
        sock.sendall(SIZE.pack(2_000_000_000))
        sock.recv(1)

    conn = peer(script)
    conn.send(MetadataRequest([]))
    with pytest.raises(NetworkError, match=r"receive\.message\.max\.bytes"):
        conn.receive(5)


def test_receive_times_out_and_keeps_a_partial_frame(peer: Peer) -> None:
    sent_half = threading.Event()
    finish = threading.Event()

    def script(sock: socket.socket) -> None:
        reply = metadata_reply(read_request_id(sock))
        sock.sendall(reply[:7])
        sent_half.set()
        finish.wait(10)
        sock.sendall(reply[7:])
        sock.recv(1)

    conn = peer(script)
    conn.send(MetadataRequest([]))
    assert sent_half.wait(10)
    assert conn.receive(0.05) is None
    finish.set()
    response = conn.receive(5)
    assert response is not None and response.body.cluster_id == "c"


def test_connecting_to_nothing_is_broker_not_available(tmp_path: Path) -> None:
    conn = BrokerConnection(BrokerAddress(unix_path=str(tmp_path / "none.sock")))
    with pytest.raises(BrokerNotAvailableError):
        conn.connect()


def test_a_throttle_time_in_a_response_holds_the_connection_back(tmp_path: Path) -> None:
    """KIP-219 on the client: a response's throttle_time_ms (a client quota) is how long the
    producer's sender and the consumer's fetcher send this broker nothing."""
    now = [100.0]
    path = str(tmp_path / "throttling.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def script() -> None:
        sock, _ = server.accept()
        with sock:
            for throttle_ms in (800, 0):
                cid = read_request_id(sock)
                head, body = encode_response(
                    ProduceResponse([], throttle_time_ms=throttle_ms), correlation_id=cid
                )
                sock.sendall(head + body)
            sock.recv(1)

    thread = threading.Thread(target=script, daemon=True)
    thread.start()
    conn = BrokerConnection(BrokerAddress(unix_path=path), clock=lambda: now[0])
    try:
        assert conn.throttle_delay_s() == 0
        conn.request(ProduceRequest(1, 1000, []))
        assert conn.throttle_delay_s() == pytest.approx(0.8)
        now[0] += 0.5
        assert conn.throttle_delay_s() == pytest.approx(0.3)
        # A later response without a throttle does not cut the wait short.
        conn.request(ProduceRequest(1, 1000, []))
        assert conn.throttle_delay_s() == pytest.approx(0.3)
        now[0] += 0.3
        assert conn.throttle_delay_s() == 0
    finally:
        conn.close()
        thread.join(10)
        server.close()
