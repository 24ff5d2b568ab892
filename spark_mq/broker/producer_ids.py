"""Producer ids for idempotent producers, unique across restarts of the broker.

Ids are handed out from blocks, as Kafka's ProducerIdManager does: the broker reserves a
block of :data:`BLOCK_SIZE` ids by durably writing the start of the *next* block to
``producer-id-block.json`` in the log directory, then hands out ids from the reserved block
in memory. A crash loses the unused rest of a block, never reuses an id: a restarted broker
starts at the recorded next block. File (replaced atomically)::

    {"version": 0, "next_block_start": 2000}

In a cluster the blocks come from ZooKeeper instead (:meth:`ProducerIdManager.use_blocks`
with :class:`~spark_mq.broker.zk.producer_id_blocks.ZkProducerIdBlocks`), so that no two
brokers hand out the same id; until the broker's session attaches that source, a cluster
broker hands out no id (COORDINATOR_LOAD_IN_PROGRESS, retriable, as Kafka's manager without a
block).

Threads: :meth:`ProducerIdManager.next_id` takes a lock, and may write the file (an fsync)
or claim a block in ZooKeeper when a block runs out; the broker calls it from its executor.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Final, Protocol

from spark_mq.errors import CoordinatorLoadInProgressError, CorruptCheckpointError
from spark_mq.storage.checkpoint_file import atomic_write_bytes

BLOCK_FILE: Final = "producer-id-block.json"
BLOCK_SIZE: Final = 1000
#: Kafka's producer epochs are int16; an epoch at this value cannot be bumped, so the
#: producer gets a new id instead (Kafka does the same on epoch exhaustion).
MAX_PRODUCER_EPOCH: Final = 32766
_VERSION: Final = 0


class ClaimedBlock(Protocol):
    """A block of ids claimed for this broker: ``first`` up to (not including) ``end``."""

    @property
    def first(self) -> int: ...

    @property
    def end(self) -> int: ...


class BlockSource(Protocol):
    """Where a cluster's blocks are claimed (ZooKeeper's ``/latest_producer_id_block``)."""

    def claim(self) -> ClaimedBlock: ...

    def latest(self) -> ClaimedBlock | None: ...


class ProducerIdManager:
    """Allocates producer ids from durably reserved blocks in ``root`` (one node) or from
    the cluster's blocks (:meth:`use_blocks`)."""

    def __init__(
        self, root: str | os.PathLike[str], *, block_size: int = BLOCK_SIZE, cluster: bool = False
    ) -> None:
        self._path = Path(root) / BLOCK_FILE
        self._block_size = block_size
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0  # first id past the reserved block
        self._reserved_end = self._read()
        #: A cluster broker waits for its block source; it never uses the local file.
        self._cluster = cluster
        self._source: BlockSource | None = None

    def use_blocks(self, source: BlockSource) -> None:
        """Claim every later block from ``source`` (a cluster broker, once its ZooKeeper
        session is up); what is left of a block from the local file is dropped."""
        with self._lock:
            self._source = source
            self._next = self._end = 0

    def _read(self) -> int:
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return 0
        try:
            obj = json.loads(data)
            start = obj["next_block_start"]
            if obj.get("version") != _VERSION or type(start) is not int or start < 0:
                raise ValueError(f"bad content {obj!r}")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise CorruptCheckpointError(
                f"{self._path} is not a valid producer id block file ({exc}); producer ids "
                "must never be reused, so fix it by hand: write "
                '{"version": 0, "next_block_start": N} with N above every id handed out',
                path=str(self._path),
            ) from exc
        return int(start)

    def _reserve_block(self) -> None:
        start = self._reserved_end
        end = start + self._block_size
        payload = json.dumps({"version": _VERSION, "next_block_start": end}).encode()
        atomic_write_bytes(self._path, payload)
        self._next, self._end, self._reserved_end = start, end, end

    def next_id(self) -> int:
        """A producer id never handed out before by a broker of this directory (in a
        cluster: by any broker of the cluster)."""
        with self._lock:
            if self._next >= self._end:
                if self._source is not None:
                    block = self._source.claim()
                    self._next, self._end = block.first, block.end
                elif self._cluster:
                    raise CoordinatorLoadInProgressError(
                        "this cluster broker has no producer id block yet (its ZooKeeper "
                        "session is starting); retry shortly"
                    )
                else:
                    self._reserve_block()
            pid = self._next
            self._next += 1
            return pid

    def issued(self, producer_id: int) -> bool:
        """Whether ``producer_id`` may have been handed out by a broker of this directory
        (in a cluster: by any broker, which may read ZooKeeper)."""
        if producer_id < 0:
            return False
        if self._source is None:
            return producer_id < self._reserved_end
        if producer_id < self._end:
            return True
        latest = self._source.latest()
        return latest is not None and producer_id < latest.end
