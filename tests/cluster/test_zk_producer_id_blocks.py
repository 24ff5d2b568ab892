"""Producer id blocks in a real ZooKeeper: Kafka's /latest_producer_id_block JSON, blocks
that never overlap between brokers (also when they claim at once), and a
ProducerIdManager of each broker handing out ids no other broker hands out."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_mq.broker.producer_ids import ProducerIdManager
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.producer_id_blocks import PATH, ProducerIdBlock, ZkProducerIdBlocks
from spark_mq.errors import CoordinatorLoadInProgressError, CorruptCheckpointError


def test_the_first_block_is_created_and_later_ones_follow_it(
    clients: Callable[[], ZkClient],
) -> None:
    zk = clients()
    blocks = ZkProducerIdBlocks(zk, 3)
    assert blocks.latest() is None
    assert blocks.claim() == ProducerIdBlock(3, 0, 999)
    data, _ = zk.kazoo.get(PATH)
    assert json.loads(data) == {
        "version": 1,
        "broker": 3,
        "block_start": "0",
        "block_end": "999",
    }
    assert ZkProducerIdBlocks(clients(), 5).claim() == ProducerIdBlock(5, 1000, 1999)
    assert blocks.latest() == ProducerIdBlock(5, 1000, 1999)


def test_brokers_claiming_at_once_never_get_the_same_block(
    clients: Callable[[], ZkClient],
) -> None:
    sources = [ZkProducerIdBlocks(clients(), broker, block_size=10) for broker in range(4)]
    claimed: list[ProducerIdBlock] = []
    lock = threading.Lock()
    start = threading.Barrier(len(sources))

    def claim_many(source: ZkProducerIdBlocks) -> None:
        start.wait()
        for _ in range(15):
            block = source.claim()
            with lock:
                claimed.append(block)

    threads = [threading.Thread(target=claim_many, args=(s,)) for s in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(claimed) == 60
    # Every block is distinct, and together they tile 0..599 with no gap or overlap: the
    # compare-and-set on the znode's version made each loser take the next block.
    assert sorted(b.first for b in claimed) == list(range(0, 600, 10))
    assert all(b.last == b.first + 9 for b in claimed)


def test_managers_of_two_brokers_hand_out_distinct_ids(
    clients: Callable[[], ZkClient], tmp_path: Path
) -> None:
    managers = []
    for broker in (1, 2):
        manager = ProducerIdManager(tmp_path / str(broker), block_size=5, cluster=True)
        # Each broker's local file would start both at 0: the cluster never uses it.
        managers.append(manager)
    with pytest.raises(CoordinatorLoadInProgressError, match="no producer id block yet"):
        managers[0].next_id()
    for broker, manager in zip((1, 2), managers, strict=True):
        manager.use_blocks(ZkProducerIdBlocks(clients(), broker, block_size=5))
    ids = [m.next_id() for _ in range(12) for m in managers]
    assert len(set(ids)) == len(ids) == 24
    # An id another broker handed out counts as issued (an idempotent producer may bump its
    # epoch at any broker); one past every claimed block does not.
    latest = ZkProducerIdBlocks(clients(), 9).latest()
    assert latest is not None
    assert managers[0].issued(max(ids)) and managers[1].issued(min(ids))
    assert not managers[0].issued(latest.end)


def test_a_damaged_block_znode_is_refused_with_a_fix(clients: Callable[[], ZkClient]) -> None:
    zk = clients()
    zk.kazoo.create(PATH, b'{"version": 1, "broker": 1}', makepath=True)
    with pytest.raises(CorruptCheckpointError, match="block_start"):
        ZkProducerIdBlocks(zk, 1).claim()
