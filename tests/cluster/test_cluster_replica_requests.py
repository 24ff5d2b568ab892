"""LeaderAndIsr and StopReplica on a broker registered in a real ZooKeeper: the broker-epoch
fence (a request meant for an earlier registration of this broker is refused whole) and the
config of a topic new to the broker, read from ``/config/topics/<t>``.

The rest of the two requests' behaviour is in tests/broker/test_controller_requests.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.handlers.errors import answer
from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.membership import ClusterMembership
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import spec_for_request
from spark_mq.protocol.controller import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaPartitionState,
    StopReplicaRequest,
)
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import RequestHeader
from spark_mq.storage.log_manager import LogManager

NODE = 1


@pytest.fixture
def core(tmp_path: Path, zk_connect: str) -> Iterator[BrokerCore]:
    root = tmp_path / "mq"
    config = ServerConfig.from_properties(
        {
            "log.dirs": str(root),
            "broker.id": str(NODE),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": "6000",
        }
    )
    logs = LogManager(root, high_watermark_follows_log_end=False)
    core = BrokerCore(config, logs, BrokerMeta.take_over(root))
    membership = ClusterMembership(config.broker, [BrokerAddress("127.0.0.1", 9092)])
    membership.start()
    core.membership = membership
    yield core
    membership.close()
    core.close()
    logs.close()


def run(core: BrokerCore, request: Any) -> Any:
    spec = spec_for_request(request)
    ctx = RequestContext(
        core,
        RequestHeader(spec.key, 0, 1, "controller"),
        BrokerAddress("127.0.0.1", 9092),
        "peer",
        inter_broker=True,
    )
    response = asyncio.run(answer(spec, HANDLERS[spec.key], ctx, request, memoryview(b"")))
    assert isinstance(response, Response)
    return response.body


def leader_and_isr(broker_epoch: int) -> LeaderAndIsrRequest:
    state = LeaderAndIsrPartitionState("t", 0, 1, NODE, 1, [NODE], 0, [NODE], is_new=True)
    return LeaderAndIsrRequest(2, 1, broker_epoch, [state], [])


def test_broker_epoch_fence_and_topic_config_from_zookeeper(core: BrokerCore) -> None:
    assert core.membership is not None
    epoch = core.broker_epoch
    assert epoch is not None and epoch > 0
    core.membership.zk.kazoo.create(
        znodes.topic_config_path("t"),
        znodes.TopicConfigOverrides({"retention.ms": "5000"}).encode(),
        makepath=True,
    )

    stale = run(core, leader_and_isr(epoch - 1))
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert [e.error_code for e in stale.partition_errors] == [ErrorCode.STALE_BROKER_EPOCH]
    assert f"broker epoch {epoch - 1}" in stale.error_message
    assert not core.logs.topic_exists("t")

    body = run(core, leader_and_isr(epoch))
    assert (body.error_code, [e.error_code for e in body.partition_errors]) == (0, [0])
    assert core.logs.get_log("t", 0).config.retention_ms == 5000

    stop = StopReplicaRequest(2, 1, epoch - 1, [StopReplicaPartitionState("t", 0, -2, True)])
    assert run(core, stop).error_code == ErrorCode.STALE_BROKER_EPOCH
    assert core.logs.hosted_partitions("t") == [0]
    # -1: the controller did not know the broker's epoch; not checked.
    stop = StopReplicaRequest(2, 1, -1, [StopReplicaPartitionState("t", 0, -2, True)])
    assert run(core, stop).error_code == 0
    assert not core.logs.topic_exists("t")
