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


def _write_entities(root: Path, entities: dict[str, dict[str, str]]) -> None:
    (root / QUOTAS_FILE).write_text(json.dumps({"version": 1, "entities": entities}))


def _stored(root: Path) -> dict[str, dict[str, str]]:
    return json.loads((root / QUOTAS_FILE).read_text())["entities"]  # type: ignore[no-any-return]


def test_a_value_no_quota_can_be_is_left_out_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A file edited by hand: each such value is named once at load, the entity's other keys
    # and the other entities apply, and the file keeps what the operator wrote.
    bad = {
        ("users/u", "user=u", "producer_byte_rate", "-5"),
        ("clients/zero", "client-id=zero", "producer_byte_rate", "0"),
        ("clients/nan", "client-id=nan", "request_percentage", "NaN"),
        ("clients/inf", "client-id=inf", "consumer_byte_rate", "Infinity"),
    }
    entities = {path: {key: value} for path, _, key, value in bad}
    entities["users/u"]["consumer_byte_rate"] = "1000"
    entities["clients/ok"] = {"producer_byte_rate": "2048"}
    _write_entities(tmp_path, entities)
    caplog.set_level("WARNING")
    quotas, manager = store(tmp_path)
    user, ok = QuotaEntity("u", None), QuotaEntity(None, "ok")
    assert quotas.configs() == {
        user: {"consumer_byte_rate": 1000.0},
        ok: {"producer_byte_rate": 2048.0},
    }
    assert manager.quota(QuotaType.PRODUCE, "User:v", "v", "zero") is None
    # Altering another entity puts the quotas in force again: no warning repeats, and the
    # values stay in the file.
    quotas.alter(
        QuotaEntity(None, "new"), [QuotaOp("producer_byte_rate", 1.0)], validate_only=False
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == len(bad), warnings
    for _, entity, key, value in bad:
        (named,) = [w for w in warnings if entity in w and f"{key}={value!r}" in w]
        assert "ignored" in named and "positive" in named and QUOTAS_FILE in named
    assert {path: _stored(tmp_path)[path] for path in entities} == entities
    # Setting the key again replaces the value.
    quotas.alter(user, [QuotaOp("producer_byte_rate", 10.0)], validate_only=False)
    assert _stored(tmp_path)["users/u"] == {
        "producer_byte_rate": "10",
        "consumer_byte_rate": "1000",
    }


def test_keys_written_before_names_were_sanitized_are_migrated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Before '.' and '..' were sanitized, the client id '..' was kept as clients/..; a later
    # alteration added clients/%2E%2E beside it. The file is sorted, the old key last.
    _write_entities(
        tmp_path,
        {
            "clients/%2E%2E": {"producer_byte_rate": "2048"},
            "clients/..": {"producer_byte_rate": "1024", "consumer_byte_rate": "500"},
            "users/.": {"request_percentage": "10"},
            "users/alice": {"producer_byte_rate": "7"},
        },
    )
    caplog.set_level("INFO")
    quotas, _ = store(tmp_path)
    dots, dot, alice = QuotaEntity(None, ".."), QuotaEntity(".", None), QuotaEntity("alice")
    assert quotas.configs() == {
        dots: {"producer_byte_rate": 2048.0, "consumer_byte_rate": 500.0},
        dot: {"request_percentage": 10.0},
        alice: {"producer_byte_rate": 7.0},
    }
    assert _stored(tmp_path) == {
        "clients/%2E%2E": {"producer_byte_rate": "2048", "consumer_byte_rate": "500"},
        "users/%2E": {"request_percentage": "10"},
        "users/alice": {"producer_byte_rate": "7"},
    }
    assert os.stat(tmp_path / QUOTAS_FILE).st_mode & 0o777 == 0o600
    (line,) = [r.getMessage() for r in caplog.records if "migrated" in r.getMessage()]
    assert "clients/.. -> clients/%2E%2E (producer_byte_rate=2048 kept over the old 1024)" in line
    assert "users/. -> users/%2E" in line
    # Once migrated, the file loads as it is; removing the quotas leaves no old key behind.
    caplog.clear()
    store(tmp_path)
    assert not [r for r in caplog.records if "migrated" in r.getMessage()]
    ops = [QuotaOp("producer_byte_rate", remove=True), QuotaOp("consumer_byte_rate", remove=True)]
    quotas.alter(dots, ops, validate_only=False)
    assert set(_stored(tmp_path)) == {"users/%2E", "users/alice"}
