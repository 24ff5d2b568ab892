"""The sender's idempotence bookkeeping against a scripted peer (bytes on a Unix socket that
answers like a broker would, with injected errors): retries keep sequence order, refusals
caused by an earlier failed batch are retried, duplicates are not written twice."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_mq.client.accumulator import RecordAccumulator
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ProducerConfig
from spark_mq.client.interceptors import ProducerInterceptors
from spark_mq.client.sender import Sender
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import decode_request_body, encode_response
from spark_mq.protocol.framing import SIZE, decode_request
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
from spark_mq.protocol.producer_id import InitProducerIdRequest, InitProducerIdResponse
from spark_mq.storage.batch_decoder import decode_records, validate_batch

NOT_LEADER = 6
OUT_OF_ORDER = 45


class ScriptedBroker:
    """Answers Metadata, InitProducerId and Produce for one partition, keeping Kafka's
    sequence rules; ``inject(base_sequence, attempt)`` may return an error code instead, or
    a negative number to append the batch and answer NOT_LEADER_OR_FOLLOWER anyway (a lost
    acknowledgement)."""

    def __init__(self, path: str, inject: Callable[[int, int], int]) -> None:
        self.path = path
        self.inject = inject
        self.values: list[bytes] = []
        self.next_sequence = 0
        self.offsets: dict[int, int] = {}
        self.attempts: dict[int, int] = {}
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(8)
        self.lock = threading.Lock()
        #: throttle_time_ms of the first Produce response (a client quota; this peer does
        #: not mute the connection, so only the client's own wait holds it back).
        self.throttle_first_ms = 0
        #: When each Produce request came (monotonic) and the first response was sent.
        self.produce_times: list[float] = []
        self.first_answered = 0.0
        threading.Thread(target=self._accept, daemon=True).start()

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
                prefix = self._exactly(sock, SIZE.size)
                if prefix is None:
                    return
                frame = decode_request(self._exactly(sock, SIZE.unpack(prefix)[0]) or b"")
                request, records = decode_request_body(frame)
                head, body = encode_response(
                    self._answer(request, bytes(records)),
                    correlation_id=frame.header.correlation_id,
                )
                sock.sendall(head + body)

    @staticmethod
    def _exactly(sock: socket.socket, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def _answer(self, request: Any, records: bytes) -> Any:
        if isinstance(request, MetadataRequest):
            part = PartitionMetadata(0, 0, 0, 0, [0], [0])
            return MetadataResponse(
                [BrokerMetadata(0, f"unix:{self.path}", 0)], "c", 0, [TopicMetadata(0, "t", [part])]
            )
        if isinstance(request, InitProducerIdRequest):
            return InitProducerIdResponse(0, 7, request.producer_epoch + 1)
        assert isinstance(request, ProduceRequest)
        self.produce_times.append(time.monotonic())
        header = validate_batch(records)
        seq = header.base_sequence
        with self.lock:
            attempt = self.attempts[seq] = self.attempts.get(seq, 0) + 1
            code = self.inject(seq, attempt)
            lose_ack = code < 0  # append, then answer with the error anyway
            if lose_ack:
                code = 0
            offset = -1
            if not code:
                if seq in self.offsets:
                    offset = self.offsets[seq]  # a duplicate: answered, not written
                elif seq != self.next_sequence:
                    code = OUT_OF_ORDER
                else:
                    offset = self.offsets[seq] = len(self.values)
                    self.values.extend(decode_records(records).column("value").to_pylist())
                    self.next_sequence = seq + header.record_count
            if lose_ack:
                code, offset = NOT_LEADER, -1
        throttle_ms = self.throttle_first_ms if len(self.produce_times) == 1 else 0
        if throttle_ms:
            self.first_answered = time.monotonic()
        return ProduceResponse(
            [ProduceTopicResponse("t", [ProducePartitionResponse(0, code, offset)])],
            throttle_time_ms=throttle_ms,
        )

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Callable[[Callable[[int, int], int]], tuple[Any, list[Any]]]]:
    brokers: list[ScriptedBroker] = []
    senders: list[Sender] = []

    def _run(
        inject: Callable[[int, int], int], throttle_first_ms: int = 0
    ) -> tuple[ScriptedBroker, list[Any]]:
        path = str(tmp_path / f"b{len(brokers)}.sock")
        broker = ScriptedBroker(path, inject)
        broker.throttle_first_ms = throttle_first_ms
        brokers.append(broker)
        config = ProducerConfig.from_properties(
            path=str(tmp_path), retry_backoff_ms=1, linger_ms=0, batch_size=1
        )
        cluster = Cluster(config, ensure_broker=lambda *a, **k: BrokerAddress(unix_path=path))
        cluster.refresh(["t"])
        acc = RecordAccumulator(batch_size=1, linger_ms=0, buffer_memory=1 << 20, max_block_ms=0)
        sender = Sender(config, acc, cluster, ProducerInterceptors([]))
        senders.append(sender)
        sender.start()
        futures = [
            acc.append("t", 0, 1.0, None, f"{i}".encode(), None, 30, None) for i in range(40)
        ]
        acc.begin_flush()
        return broker, [f.get(30) for f in futures]

    yield _run
    for sender in senders:
        sender.force_close()
        sender.join(10)
    for broker in brokers:
        broker.close()


def test_everything_written_once_in_order_without_faults(run: Any) -> None:
    broker, metadata = run(lambda seq, attempt: 0)
    assert broker.values == [f"{i}".encode() for i in range(40)]
    assert [m.offset for m in metadata] == list(range(40))


def test_a_retriable_error_keeps_order_and_later_refusals_are_retried(run: Any) -> None:
    # Sequence 10 fails once with NOT_LEADER_OR_FOLLOWER while later batches are in flight:
    # they are refused as out of order and must be retried after it, not failed.
    broker, metadata = run(lambda seq, attempt: NOT_LEADER if seq == 10 and attempt == 1 else 0)
    assert broker.values == [f"{i}".encode() for i in range(40)]
    assert [m.offset for m in metadata] == list(range(40))
    assert broker.attempts[10] == 2


def test_a_lost_acknowledgement_is_answered_as_a_duplicate(run: Any) -> None:
    # Sequence 5 is appended but its answer is an error: the retry is a duplicate, answered
    # with the original offset and not written again.
    broker, metadata = run(lambda seq, attempt: -1 if seq == 5 and attempt == 1 else 0)
    assert broker.values == [f"{i}".encode() for i in range(40)]
    assert metadata[5].offset == 5 and broker.attempts[5] == 2


def test_a_throttled_producer_sends_nothing_until_the_throttle_time_passed(run: Any) -> None:
    """KIP-219: the first answer says 600 ms; this peer does not mute, so a request before
    then would show that the sender ignored it."""
    broker, metadata = run(lambda seq, attempt: 0, throttle_first_ms=600)
    assert [m.offset for m in metadata] == list(range(40))
    later = [t for t in broker.produce_times if t > broker.first_answered]
    assert later and min(later) - broker.first_answered >= 0.55
