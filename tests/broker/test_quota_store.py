"""Where a single node keeps its client quotas (broker/quotas/store.py): the log directory's
``client-quotas.json``, mode 0600, applied to the manager at once, a bad alteration refused
with nothing written, and a corrupt file refused by name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from spark_mq.broker.quotas.entity import DEFAULT, QuotaEntity
from spark_mq.broker.quotas.manager import ClientQuotaManager, QuotaType
from spark_mq.broker.quotas.rate import QuotaWindow
from spark_mq.broker.quotas.store import QUOTAS_FILE, FileQuotaBackend, QuotaStore
from spark_mq.errors import CorruptCheckpointError, InvalidRequestError
from spark_mq.protocol.quotas import QuotaOp


def store(root: Path) -> tuple[QuotaStore, ClientQuotaManager]:
    manager = ClientQuotaManager(QuotaWindow())
    return QuotaStore(FileQuotaBackend(root), manager), manager


def test_alterations_are_kept_and_applied(tmp_path: Path) -> None:
    quotas, manager = store(tmp_path)
    alice = QuotaEntity("a/lice", None)
    quotas.alter(alice, [QuotaOp("producer_byte_rate", 1024.0)], validate_only=False)
    quotas.alter(
        QuotaEntity(None, DEFAULT), [QuotaOp("request_percentage", 12.5)], validate_only=False
    )
    assert manager.enabled
    assert manager.quota(QuotaType.PRODUCE, "User:a/lice", "a/lice", "x") is not None
    path = tmp_path / QUOTAS_FILE
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert json.loads(path.read_text()) == {
        "version": 1,
        "entities": {
            "users/a%2Flice": {"producer_byte_rate": "1024"},
            "clients/<default>": {"request_percentage": "12.5"},
        },
    }
    # A new broker on the directory has them.
    again, _ = store(tmp_path)
    assert again.configs() == quotas.configs()
    quotas.alter(alice, [QuotaOp("producer_byte_rate", remove=True)], validate_only=False)
    assert alice not in quotas.configs()
    assert "users/a%2Flice" not in json.loads(path.read_text())["entities"]


def test_a_bad_alteration_changes_nothing(tmp_path: Path) -> None:
    quotas, _ = store(tmp_path)
    entity = QuotaEntity(None, "c")
    quotas.alter(entity, [QuotaOp("consumer_byte_rate", 10.0)], validate_only=False)
    before = (tmp_path / QUOTAS_FILE).read_bytes()
    bad = [
        [QuotaOp("consumer_byte_rate", 20.0), QuotaOp("bytes", 1.0)],
        [QuotaOp("consumer_byte_rate", float("nan"))],
        [QuotaOp("consumer_byte_rate", -5.0)],
        [QuotaOp("consumer_byte_rate", 1.0), QuotaOp("consumer_byte_rate", 2.0)],
    ]
    for ops in bad:
        with pytest.raises(InvalidRequestError):
            quotas.alter(entity, ops, validate_only=False)
    quotas.alter(entity, [QuotaOp("consumer_byte_rate", 99.0)], validate_only=True)
    assert (tmp_path / QUOTAS_FILE).read_bytes() == before
    assert quotas.configs() == {entity: {"consumer_byte_rate": 10.0}}


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b'{"version": 2, "entities": {}}',
        b'{"version": 1, "entities": {"topics/t": {}}}',
        b'{"version": 1, "entities": {"users/u": {"producer_byte_rate": "fast"}}}',
    ],
)
def test_a_corrupt_file_is_refused_by_name(tmp_path: Path, content: bytes) -> None:
    (tmp_path / QUOTAS_FILE).write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=QUOTAS_FILE):
        store(tmp_path)
