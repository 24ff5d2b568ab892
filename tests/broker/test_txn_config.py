"""The transaction coordinator's settings: parsing through the broker's config, the example
properties file, and docs/broker.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.properties_file import read_properties_file
from spark_mq.broker.txn.config import TxnConfig
from spark_mq.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_keys_go_to_the_transaction_config() -> None:
    cfg = ServerConfig.from_properties(
        {"transaction.max.timeout.ms": "1000", "transactional.id.expiration.ms": "5"}
    )
    assert cfg.transactions.transaction_max_timeout_ms == 1000
    assert cfg.transactions.transactional_id_expiration_ms == 5
    assert cfg.to_properties()["transaction.max.timeout.ms"] == "1000"
    assert cfg.with_overrides({}).transactions == cfg.transactions
    assert ServerConfig.documentation("transaction.prepared.max.timeout.ms")


def test_bad_values_name_the_key() -> None:
    with pytest.raises(ConfigError, match=re.escape("transaction.state.log.num.partitions")):
        ServerConfig.from_properties({"transaction.state.log.num.partitions": "0"})
    with pytest.raises(ConfigError, match=re.escape("did you mean 'transaction.max.timeout.ms'")):
        ServerConfig.from_properties({"transaction.max.timeout.mss": "1"})


def test_example_file_and_docs_carry_every_default() -> None:
    props = read_properties_file(REPO / "conf" / "broker.properties")
    assert ServerConfig.from_properties(props).transactions == TxnConfig()
    defaults = TxnConfig().to_properties()
    assert {k: props[k] for k in defaults} == defaults
    broker_doc = (REPO / "docs" / "broker.md").read_text(encoding="utf-8")
    txn_doc = (REPO / "docs" / "transactions.md").read_text(encoding="utf-8")
    for key, value in defaults.items():
        assert f"| `{key}` | `{value}` |" in broker_doc, key
        assert f"`{key}`" in txn_doc, key
