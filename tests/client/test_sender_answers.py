"""Property: whatever the shape of the Produce requests the sender builds (several batches of a
partition in one request, several topics, retries mixed in) and whatever each batch's answer
(written, refused for good, refused for now), every batch's future reports its own batch's
answer: a batch reported written is in the log at the reported offset, a batch reported
failed carries the error its own entry got and is not in the log.

The peer is a scripted broker on a Unix socket that speaks the wire protocol and mirrors each
request entry for entry, as the real broker does (``tests/integration/test_produce_answers.py``
checks the real broker's side); it answers each request entry with the next outcome of a
drawn list, so the test controls every answer without controlling how the sender groups the
batches."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mq.client.accumulator import RecordAccumulator
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ProducerConfig
from spark_mq.client.interceptors import ProducerInterceptors
from spark_mq.client.sender import Sender
from spark_mq.errors import SparkMQError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import decode_request_body, encode_response
from spark_mq.protocol.framing import SIZE, decode_request, split_records
from spark_mq.protocol.metadata import (
    BrokerMetadata,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
)
from spark_mq.protocol.produce import (
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
)
from spark_mq.storage.batch_decoder import decode_records
from spark_mq.storage.record_batch import encode_batch_parts

TOPICS = ("t0", "t1")
PARTITIONS = 2
WRITTEN = 0
#: Refused for good: CORRUPT_MESSAGE, INVALID_RECORD. For now (retried): REQUEST_TIMED_OUT.
REFUSED = (2, 87)
RETRIABLE = 7
OUTCOMES = st.sampled_from([WRITTEN, WRITTEN, *REFUSED, RETRIABLE])


class MirroringPeer:
    """Answers Metadata for :data:`TOPICS` and each Produce entry with the next scripted
    outcome (written once the script runs out), keeping a log per partition."""

    def __init__(self, path: str) -> None:
        self.outcomes: list[int] = []
        self.logs: dict[tuple[str, int], list[bytes]] = {}
        self.lock = threading.Lock()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(8)
        self.path = path
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self, outcomes: list[int]) -> None:
        with self.lock:
            self.outcomes = list(outcomes)
            self.logs = {(t, p): [] for t in TOPICS for p in range(PARTITIONS)}

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            while True:
                prefix = _exactly(sock, SIZE.size)
                if prefix is None:
                    return
                frame = decode_request(_exactly(sock, SIZE.unpack(prefix)[0]) or b"")
                request, records = decode_request_body(frame)
                head, body = encode_response(
                    self._answer(request, bytes(records)),
                    correlation_id=frame.header.correlation_id,
                )
                sock.sendall(head + body)

    def _answer(self, request: Any, records: bytes) -> Any:
        if isinstance(request, MetadataRequest):
            me = BrokerMetadata(0, f"unix:{self.path}", 0)
            parts = [PartitionMetadata(0, p, 0, 0, [0], [0]) for p in range(PARTITIONS)]
            return MetadataResponse([me], "c", 0, [TopicMetadata(0, t, parts) for t in TOPICS])
        assert isinstance(request, ProduceRequest)
        sizes = [p.records_size for t in request.topics for p in t.partitions]
        chunks = iter(split_records(memoryview(records), sizes))
        topics = []
        with self.lock:
            for topic in request.topics:
                answers = []
                for entry in topic.partitions:
                    chunk = next(chunks)
                    code = self.outcomes.pop(0) if self.outcomes else WRITTEN
                    offset = -1
                    if code == WRITTEN:
                        log = self.logs[(topic.name, entry.partition)]
                        offset = len(log)
                        log.extend(decode_records(chunk).column("value").to_pylist())
                    answers.append(ProducePartitionResponse(entry.partition, code, offset))
                topics.append(ProduceTopicResponse(topic.name, answers))
        return ProduceResponse(topics)

    def close(self) -> None:
        self.server.close()


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MirroringPeer]:
    path = tmp_path_factory.mktemp("peer") / "peer.sock"
    server = MirroringPeer(str(path))
    yield server
    server.close()


BATCHES = st.lists(
    st.tuples(st.sampled_from(TOPICS), st.integers(0, PARTITIONS - 1), st.integers(1, 5)),
    min_size=1,
    max_size=24,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    batches=BATCHES,
    outcomes=st.lists(OUTCOMES, max_size=40),
    max_request_size=st.sampled_from([200, 1_000, 1 << 20]),
    max_in_flight=st.integers(1, 5),
)
def test_every_batch_gets_its_own_answer(  # noqa: PLR0917 (hypothesis passes them so)
    peer: MirroringPeer,
    tmp_path: Path,
    batches: list[tuple[str, int, int]],
    outcomes: list[int],
    max_request_size: int,
    max_in_flight: int,
) -> None:
    peer.reset(outcomes)
    config = ProducerConfig.from_properties(
        path=str(tmp_path),
        enable_idempotence=False,
        acks=1,
        retry_backoff_ms=1,
        retry_backoff_max_ms=1,
        linger_ms=0,
        max_request_size=max_request_size,
        max_in_flight_requests_per_connection=max_in_flight,
    )
    cluster = Cluster(config, ensure_broker=lambda *a, **k: BrokerAddress(unix_path=peer.path))
    cluster.refresh(list(TOPICS))
    acc = RecordAccumulator(batch_size=1, linger_ms=0, buffer_memory=1 << 24, max_block_ms=0)
    sent = []
    # Queued before the sender starts, so that the first requests carry many batches, several
    # of a partition among them; retries then go out in other shapes.
    for n, (topic, partition, count) in enumerate(batches):
        values = [f"{n}-{i}".encode() for i in range(count)]
        header, body = encode_batch_parts(values)
        result = acc.append_encoded(topic, partition, bytes(header), [body], count)
        sent.append((topic, partition, values, result))
    sender = Sender(config, acc, cluster, ProducerInterceptors([]))
    sender.start()
    try:
        for *_, result in sent:
            result.wait(30)
    finally:
        sender.force_close()
        sender.join(10)
    for topic, partition, values, result in sent:
        log = peer.logs[(topic, partition)]
        if result.error is None:
            at = result.base_offset
            assert log[at : at + len(values)] == values, f"{values[0]!r} not at {at}"
        else:
            assert isinstance(result.error, SparkMQError)
            assert result.error.error_code in REFUSED
            assert values[0] not in log
