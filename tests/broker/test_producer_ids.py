"""ProducerIdManager: ids unique across restarts, blocks reserved durably."""

from __future__ import annotations

import json

import pytest

from spark_mq.broker.producer_ids import BLOCK_FILE, ProducerIdManager
from spark_mq.errors import CorruptCheckpointError


def test_ids_are_sequential_within_a_block_and_never_reused_after_restart(tmp_path):
    first = ProducerIdManager(tmp_path, block_size=10)
    ids = [first.next_id() for _ in range(12)]
    assert ids == list(range(12))
    assert json.loads((tmp_path / BLOCK_FILE).read_text())["next_block_start"] == 20
    # A restart (or a crash) loses the rest of the reserved block, never reuses an id.
    second = ProducerIdManager(tmp_path, block_size=10)
    assert second.next_id() == 20
    assert second.issued(5) and second.issued(20) and not second.issued(30)


def test_nothing_is_issued_before_the_first_id(tmp_path):
    manager = ProducerIdManager(tmp_path)
    assert not manager.issued(0)
    assert not (tmp_path / BLOCK_FILE).exists()


@pytest.mark.parametrize(
    "content", ["not json", '{"version": 0}', '{"version": 0, "next_block_start": -1}']
)
def test_a_damaged_block_file_is_refused_with_a_fix(tmp_path, content):
    (tmp_path / BLOCK_FILE).write_text(content)
    with pytest.raises(CorruptCheckpointError, match="next_block_start"):
        ProducerIdManager(tmp_path)
