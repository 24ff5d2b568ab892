"""Producer id blocks shared by a cluster's brokers through ZooKeeper.

Every broker hands out producer ids (InitProducerId, the transaction coordinator), so in a
cluster two brokers must never hand out the same one. As Kafka's ZooKeeper-mode
``ZkProducerIdManager`` does, a broker claims a block of
:data:`~spark_mq.broker.producer_ids.BLOCK_SIZE` ids by rewriting
``/latest_producer_id_block`` from the block after the one it holds, with a compare-and-set
on the znode's version: of two brokers claiming at once one wins and the other reads the
new block and claims the next. The znode is Kafka's JSON (both ends inclusive, as strings)::

    {"version": 1, "broker": 2, "block_start": "1000", "block_end": "1999"}

A broker that dies loses the rest of its block, never reuses an id.

Threads: blocking ZooKeeper calls; the caller's thread (ProducerIdManager holds its lock).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Final

from kazoo.exceptions import BadVersionError, NodeExistsError

from spark_mq.broker.producer_ids import BLOCK_SIZE
from spark_mq.errors import CorruptCheckpointError

from .client import ZkClient, translate_errors

logger = logging.getLogger(__name__)

PATH: Final = "/latest_producer_id_block"
VERSION: Final = 1


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Ids ``first`` to ``last`` (both inclusive), claimed by broker ``broker``."""

    broker: int
    first: int
    last: int

    @property
    def end(self) -> int:
        """The first id past the block."""
        return self.last + 1

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": VERSION,
                "broker": self.broker,
                "block_start": str(self.first),
                "block_end": str(self.last),
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        try:
            obj = json.loads(data)
            block = cls(int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"]))
            if obj.get("version") != VERSION or not 0 <= block.first <= block.last:
                raise ValueError(f"bad content {obj!r}")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise CorruptCheckpointError(
                f"ZooKeeper's {PATH} is not a producer id block ({exc}); producer ids must "
                'never be reused, so fix it by hand: {"version": 1, "broker": 0, '
                '"block_start": "N", "block_end": "N"} with N above every id handed out',
                path=PATH,
            ) from exc
        return block


class ZkProducerIdBlocks:
    """Claims producer id blocks for broker ``broker_id`` in ZooKeeper."""

    def __init__(self, zk: ZkClient, broker_id: int, *, block_size: int = BLOCK_SIZE) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.block_size = block_size

    def latest(self) -> ProducerIdBlock | None:
        """The newest block any broker claimed (None: none yet)."""
        got = self.zk.get(PATH)
        return None if got is None else ProducerIdBlock.decode(got[0])

    def claim(self) -> ProducerIdBlock:
        """Claim the block after the newest one (retrying while other brokers win)."""
        with translate_errors(f"claiming a producer id block at {PATH}"):
            while True:
                got = self.zk.get(PATH)
                if got is None:
                    block = ProducerIdBlock(self.broker_id, 0, self.block_size - 1)
                    try:
                        self.zk.kazoo.create(PATH, block.encode(), makepath=True)
                    except NodeExistsError:
                        continue  # another broker claimed the first block: take the next
                    return self._claimed(block)
                data, stat = got
                current = ProducerIdBlock.decode(data)
                block = ProducerIdBlock(
                    self.broker_id, current.end, current.end + self.block_size - 1
                )
                try:
                    self.zk.kazoo.set(PATH, block.encode(), version=stat.version)
                except BadVersionError:
                    continue  # another broker claimed that block first
                return self._claimed(block)

    def _claimed(self, block: ProducerIdBlock) -> ProducerIdBlock:
        logger.info(
            "broker %d claimed producer ids %d..%d", self.broker_id, block.first, block.last
        )
        return block
