"""Writes of the half-message service on a cluster, each acknowledged by every in-sync replica.

On a cluster the service of a producer group runs on the leader of the group's
``__half_messages`` partition (:mod:`~spark_mq.broker.half.placement`), but a COMMIT's real
record goes to its own topic's partition, and a discarded record to ``__half_discarded``,
which other brokers may lead. :class:`ReplicatedWriter` writes one record batch with
acks=all wherever its partition's leader is:

- **here** (this broker leads it): appended to the local partition, then awaited until the
  high watermark passes it and the ISR still has ``min.insync.replicas`` members, as a
  Produce with acks=all is answered;
- **elsewhere**: a Produce (acks=-1) to the leader named by the metadata cache (the
  controller's UpdateMetadata), on a connection authenticated as this broker
  (AuthenticateBroker with the cluster's secret), as the transaction coordinator's markers
  and the replica fetchers reach other brokers. The leader is looked up for every write, so
  a write follows a partition that moved. Connections are kept per destination and used by
  one thread at a time.

The batch is the message's own idempotent batch (its producer id, epoch 0, sequence 0;
``service.py``), so a write repeated after a failure, by this broker or by the next leader of
the ``__half_messages`` partition, is recognised by the destination as a duplicate and
answered with the first write's offset: the destination's producer state is replicated with
its log and survives a change of its leader.

Failures raise typed, retriable errors (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS,
REQUEST_TIMED_OUT, a NetworkError, LEADER_NOT_AVAILABLE while no live broker leads the
partition): the request that caused the write fails with them, and the producer (or the next
check-back) ends the message again.

Threads: :meth:`ReplicatedWriter.write` runs on the event loop; the remote request runs on
the writer's own small thread pool, so a dead broker's timeouts never hold the broker's I/O
threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from collections.abc import Callable
from typing import Final

from spark_mq.broker.metadata_cache import NO_LEADER, MetadataSnapshot
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.txn.broker_links import BrokerCredentials, BrokerLinks
from spark_mq.errors import (
    LeaderNotAvailableError,
    NetworkError,
    UnknownTopicOrPartitionError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.produce import (
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
    answers_by_entry,
)

#: Destinations written to at once (each holds one connection, used by one thread at a time).
MAX_DESTINATIONS: Final = 4


@dataclasses.dataclass(frozen=True)
class WriteConfig:
    """How long one write may take: the acks=all wait here, or the Produce elsewhere
    (Kafka's ``request.timeout.ms`` default)."""

    request_timeout_ms: int = 30_000


class ReplicatedWriter:
    """Record batches written with acks=all to whichever broker leads their partition."""

    def __init__(
        self,
        replicas: ReplicaManager,
        *,
        node_id: int,
        metadata: Callable[[], MetadataSnapshot],
        credentials: BrokerCredentials,
        config: WriteConfig = WriteConfig(),
    ) -> None:
        self._replicas = replicas
        self._node_id = node_id
        self._metadata = metadata
        self._credentials = credentials
        self.config = config
        self._executor = concurrent.futures.ThreadPoolExecutor(
            MAX_DESTINATIONS, thread_name_prefix="half-writes"
        )
        # One authenticated connection per destination (one request at a time on each).
        self._links = BrokerLinks(credentials, client_id=f"half-messages-{node_id}")

    async def write(self, topic: str, partition: int, batch: bytes) -> int:
        """Write ``batch`` to ``topic``-``partition`` with acks=all; its first offset (the
        first write's, when this one is a duplicate)."""
        cached = self._metadata().partitions(topic).get(partition)
        if cached is None:
            raise UnknownTopicOrPartitionError(
                f"{topic}-{partition} is not in this broker's metadata (the topic was deleted, "
                "or the controller has not told this broker about it yet)",
                topic=topic,
            )
        leader = cached.leader
        if leader == self._node_id:
            return await self._write_here(topic, partition, batch)
        broker = self._metadata().brokers.get(leader) if leader != NO_LEADER else None
        if broker is None or not broker.endpoints:
            raise LeaderNotAvailableError(
                f"{topic}-{partition} has no live leader now (it is being elected); retry"
            )
        ep = broker.endpoints[0]
        address = BrokerAddress(ep.host, ep.port)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._write_there, leader, address, topic, partition, batch
        )

    async def _write_here(self, topic: str, partition: int, batch: bytes) -> int:
        part = self._replicas.partition(topic, partition)
        info = part.append(batch, required_acks=-1)
        self._replicas.notify([part])
        end = int(info.last_offset) + 1
        if part.high_watermark < end:
            await self._replicas.purgatory.wait(
                (topic, partition), end, self.config.request_timeout_ms / 1000
            )
        part.check_enough_replicas(after_append=True)
        return int(info.first_offset)

    def _write_there(
        self, leader: int, address: BrokerAddress, topic: str, partition: int, batch: bytes
    ) -> int:
        timeout_ms = self.config.request_timeout_ms
        request = ProduceRequest(
            acks=-1,
            timeout_ms=timeout_ms,
            topics=[ProduceTopic(topic, [ProducePartition(partition, len(batch))])],
        )
        body: ProduceResponse = self._links.request(
            leader, address, request, timeout_ms + 5000, records=[batch]
        )
        (answer,) = answers_by_entry(request.topics, body)
        if answer is None:
            raise NetworkError(f"broker {leader} answered a Produce to {topic}-{partition} amiss")
        if answer.error_code != ErrorCode.NONE:
            raise error_from_code(answer.error_code, answer.error_message, topic=topic)
        return int(answer.base_offset)

    def close(self) -> None:
        """Close the connections and stop the threads (blocking: waits for writes)."""
        self._executor.shutdown(wait=True)
        self._links.close()
