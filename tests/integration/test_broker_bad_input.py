"""Bad frames against a real broker: errors or a closed connection, never a dead broker.

Includes the Hypothesis fuzz test: random and mutated frames, after which a well-behaved
client must still be served.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mq.protocol import api_versions, fetch, metadata, produce
from spark_mq.protocol.api import encode_request
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import RequestHeader, encode_request_head
from spark_mq.storage.record_batch import encode_batch


def raw_request(
    api_key: int, version: int, body: bytes, records: bytes = b"", cid: int = 9
) -> bytes:
    head = encode_request_head(RequestHeader(api_key, version, cid, "t"), len(body), len(records))
    return head + body + records


def test_unknown_api_key_and_version_get_frame_errors(broker):
    with broker.connect() as conn:
        conn.send_raw(raw_request(999, 0, b"\x90"))
        frame = conn.recv_frame()
        assert (frame.correlation_id, frame.frame_error) == (9, ErrorCode.UNSUPPORTED_VERSION)
        conn.send_raw(raw_request(3, 77, b"\x90"))
        assert conn.recv_frame().frame_error == ErrorCode.UNSUPPORTED_VERSION
        # The connection still works.
        assert conn.call(api_versions.ApiVersionsRequest()).body.error_code == 0


def test_undecodable_body_gets_invalid_request(broker):
    with broker.connect() as conn:
        conn.send_raw(raw_request(3, 0, b"\xc1\xff garbage"))
        reply = conn.recv_frame()
        assert reply.frame_error == ErrorCode.INVALID_REQUEST
        # Records sizes that do not add up: the frame is intact, the request is refused.
        request = produce.ProduceRequest(
            1, 1000, [produce.ProduceTopic("t", [produce.ProducePartition(0, 50)])]
        )
        head, body = encode_request(request, correlation_id=3, records_len=10)
        conn.send_raw(head + body + b"\x00" * 10)
        assert conn.recv_frame().frame_error == ErrorCode.INVALID_REQUEST
        assert conn.metadata().topics == []


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">i", 200 * 1024 * 1024) + b"x" * 16,  # over socket.request.max.bytes
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 3) + b"abc",  # shorter than a request header
        struct.pack(">i", 10) + struct.pack(">hhih", 3, 0, 1, 50),  # client_id past the end
    ],
    ids=["too-large", "negative", "short-header", "truncated-client-id"],
)
def test_garbage_closes_only_that_connection(broker, data):
    with broker.connect() as bystander, broker.connect() as conn:
        conn.send_raw(data)
        assert conn.closed_by_peer()
        assert bystander.call(api_versions.ApiVersionsRequest()).body.error_code == 0


def test_a_client_vanishing_mid_frame_is_harmless(broker):
    with broker.connect() as conn:
        conn.send_raw(struct.pack(">i", 1000) + b"partial")
    with broker.connect() as conn:
        assert conn.call(api_versions.ApiVersionsRequest()).body.error_code == 0


def _valid_frames() -> list[bytes]:
    records = encode_batch(pa.array([b"fuzz"]))
    requests = [
        (api_versions.ApiVersionsRequest(), b""),
        (metadata.MetadataRequest(["f"], True), b""),
        (
            produce.ProduceRequest(
                1, 1000, [produce.ProduceTopic("f", [produce.ProducePartition(0, len(records))])]
            ),
            records,
        ),
        (
            fetch.FetchRequest(
                0, 0, 1 << 20, [fetch.FetchTopic("f", [fetch.FetchPartition(0, 0, 1 << 20)])]
            ),
            b"",
        ),
    ]
    out = []
    for request, recs in requests:
        head, body = encode_request(request, correlation_id=1, records_len=len(recs))
        out.append(head + body + recs)
    return out


VALID_FRAMES = _valid_frames()


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    frame = bytearray(draw(st.sampled_from(VALID_FRAMES)))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(frame) - 1))
        frame[pos] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        frame = frame[: draw(st.integers(0, len(frame)))]
    return bytes(frame)


random_frames = st.one_of(
    st.binary(max_size=200),
    # A plausible size prefix followed by random bytes of exactly that size.
    st.binary(min_size=1, max_size=200).map(lambda b: struct.pack(">i", len(b)) + b),
    mutated_frames(),
)


@pytest.mark.slow
def test_fuzzed_frames_never_stop_the_broker(broker):
    @settings(
        max_examples=300,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        derandomize=True,
    )
    @given(frames=st.lists(random_frames, min_size=1, max_size=4))
    def fuzz(frames: list[bytes]) -> None:
        with broker.connect(unix=len(frames) % 2 == 0, timeout_s=5.0) as conn:
            try:
                for frame in frames:
                    conn.send_raw(frame)
                # Shut our side: the broker sees EOF after whatever it could parse.
                conn.sock.shutdown(1)
                while conn.sock.recv(65536):
                    pass
            except OSError:
                pass  # the broker closed the connection on garbage: expected

    fuzz()
    assert broker.alive
    with broker.connect() as conn:
        assert conn.call(api_versions.ApiVersionsRequest()).body.error_code == 0
        part = conn.produce("after-fuzz", 0, encode_batch(pa.array([b"ok"])))
        assert part.error_code == 0
