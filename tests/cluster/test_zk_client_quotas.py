"""Client quotas read from a real ZooKeeper (broker/zk/client_quotas.py) when a znode was
edited by hand: a value no quota can be is left out with one warning naming the znode, the
key and the value, and the entity's other keys and the other entities still apply. The
command line that writes to ZooKeeper directly refuses such a value."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from spark_mq.broker.quotas.entity import QuotaEntity
from spark_mq.broker.quotas.manager import ClientQuotaManager
from spark_mq.broker.quotas.rate import QuotaWindow
from spark_mq.broker.quotas.store import QuotaStore, apply_ops
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.client_quotas import ZkQuotaBackend
from spark_mq.cli import main as cli_main
from spark_mq.protocol.quotas import QuotaOp


def test_a_hand_edited_value_no_quota_can_be_is_left_out_with_one_warning(
    clients: Callable[[], ZkClient], caplog: pytest.LogCaptureFixture
) -> None:
    zk = clients()
    configs = {
        "/config/clients/hand-edited": {"producer_byte_rate": "-1", "consumer_byte_rate": "100"},
        "/config/clients/fine": {"request_percentage": "25"},
    }
    for path, config in configs.items():
        zk.kazoo.create(path, json.dumps({"version": 1, "config": config}).encode(), makepath=True)
    caplog.set_level("WARNING")
    backend = ZkQuotaBackend(zk)
    quotas = QuotaStore(backend, ClientQuotaManager(QuotaWindow()))
    edited, fine = QuotaEntity(None, "hand-edited"), QuotaEntity(None, "fine")
    assert quotas.configs() == {
        edited: {"consumer_byte_rate": 100.0},
        fine: {"request_percentage": 25.0},
    }
    # Another entity altered: the quotas are put in force again, without a second warning.
    other = QuotaEntity(None, "other")
    ops = [QuotaOp("producer_byte_rate", 5.0)]
    quotas.alter(other, ops, validate_only=False)
    # Setting the key through the backend replaces the value, without a warning either.
    backend.alter_entity(edited, lambda now: apply_ops(edited, now, ops))
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "/config/clients/hand-edited" in warning and "producer_byte_rate='-1'" in warning
    assert quotas.configs()[other] == {"producer_byte_rate": 5.0}
    assert backend.load()[edited] == {"producer_byte_rate": 5.0, "consumer_byte_rate": 100.0}


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_the_zookeeper_cli_refuses_a_value_no_quota_can_be(
    zk_connect: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # As kafka-configs --zookeeper: no broker checks the value, so the command must.
    code = cli_main(
        [
            "quotas", "alter", "--zookeeper", zk_connect,
            "--entity-type", "clients", "--entity-name", "c1",
            "--add-config", f"producer_byte_rate={value}",
        ]
    )  # fmt: skip
    assert code != 0
    assert "positive" in capsys.readouterr().err
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        assert zk.exists("/config/clients/c1") is None
    finally:
        zk.stop()
        zk.close()
