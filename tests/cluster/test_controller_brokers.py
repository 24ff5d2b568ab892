"""The controller with real broker processes against a real ZooKeeper.

- An in-process controller (elected before the brokers start, so none of them wins) reaches
  each broker process over an authenticated connection and gets an answer to every kind of
  request it sends (before the brokers serve LeaderAndIsr and UpdateMetadata, the answer is
  UNSUPPORTED_VERSION: an answer all the same, which a connection without the secret never
  gets).
- A one-broker cluster runs its own controller: CreateTopics over the wire is written to
  ZooKeeper and answered once the controller elected the leaders; a replication factor above
  the live brokers is refused naming both counts; FindCoordinator's internal topic with
  ``offsets.topic.replication.factor`` 3 is COORDINATOR_NOT_AVAILABLE naming the setting and
  how many brokers are missing, in the client's error and the broker's log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from cluster_fixtures import BrokerProcesses, listening_port
from waiting import wait_for

from spark_mq.broker.controller.controller import Controller, ControllerConfig
from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.controller_election import register_controller_and_increment_epoch
from spark_mq.broker.zk.membership import get_or_create_inter_broker_secret
from spark_mq.broker.zk.partition_states import create_topic, read_partition_state
from spark_mq.client.connection import BrokerConnection
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.admin import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.groups import (
    COORDINATOR_TRANSACTION,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)


def test_the_controller_reaches_every_broker_process_authenticated(
    clients: Callable[[], ZkClient], spawn_broker: BrokerProcesses
) -> None:
    zk = clients()
    secret = get_or_create_inter_broker_secret(zk)
    epoch = register_controller_and_increment_epoch(zk, 100, 0)
    create_topic(zk, "t", znodes.TopicAssignment({0: (1, 2), 1: (2, 1)}))
    controller = Controller(zk, epoch, ControllerConfig(100, secret, reconnect_backoff_ms=50))
    controller.start()
    try:
        for broker_id in (1, 2):
            spawn_broker(broker_id)

        def answered(broker_id: int) -> set[str]:
            return {a.api for a in list(controller.responses) if a.broker_id == broker_id}

        for broker_id in (1, 2):
            wait_for(lambda b=broker_id: {"UpdateMetadata", "LeaderAndIsr"} <= answered(b), 60)
        # The brokers' arrival brought the topic online: broker 1 leads partition 0.
        state = read_partition_state(zk, "t", 0)
        assert state is not None and state.value.leader in (1, 2)
        assert state.value.controller_epoch == epoch.epoch
        # Every request was answered by the broker itself, never lost to a refused login.
        for answer in controller.responses:
            assert answer.response is not None or answer.error is not None
        assert controller.active and json.loads(zk.get(znodes.CONTROLLER)[0])["brokerid"] == 100
    finally:
        controller.shutdown()
        controller.join()


def test_a_one_broker_cluster_creates_topics_through_its_controller(
    clients: Callable[[], ZkClient], spawn_broker: BrokerProcesses
) -> None:
    zk = clients()
    _process, log_dir = spawn_broker(1)
    conn = BrokerConnection(BrokerAddress(host="127.0.0.1", port=listening_port(log_dir)))
    conn.connect()
    try:
        created: CreateTopicsResponse = conn.request(
            CreateTopicsRequest(
                [CreatableTopic("events", 3, 1), CreatableTopic("wide", 1, 3)], 30_000
            ),
            timeout_s=40,
        )
        ok, refused = created.topics
        assert (ok.error_code, ok.num_partitions, ok.replication_factor) == (0, 3, 1)
        for p in range(3):
            state = read_partition_state(zk, "events", p)
            assert state is not None and state.value.leader == 1 and state.value.isr == (1,)
        assert refused.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
        assert "only 1 broker is live ([1]): 2 more brokers must be running" in (
            refused.error_message or ""
        )
        assert zk.get(znodes.topic_path("wide")) is None

        grown: CreatePartitionsResponse = conn.request(
            CreatePartitionsRequest([CreatePartitionsTopic("events", 5)], 30_000), timeout_s=40
        )
        assert grown.results[0].error_code == 0, grown.results[0].error_message
        state = read_partition_state(zk, "events", 4)
        assert state is not None and state.value.leader == 1

        deleted: DeleteTopicsResponse = conn.request(
            DeleteTopicsRequest(["events"], 30_000), timeout_s=40
        )
        assert deleted.responses[0].error_code == 0, deleted.responses[0].error_message
        assert zk.get(znodes.topic_path("events")) is None
        assert zk.get(znodes.topic_config_path("events")) is None
    finally:
        conn.close()


def test_find_coordinator_with_too_few_brokers_for_the_offsets_topic_names_the_setting(
    clients: Callable[[], ZkClient], spawn_broker: BrokerProcesses, tmp_path: Path
) -> None:
    zk = clients()
    _process, log_dir = spawn_broker(1)  # offsets.topic.replication.factor: Kafka's default, 3
    conn = BrokerConnection(BrokerAddress(host="127.0.0.1", port=listening_port(log_dir)))
    conn.connect()
    try:
        answer: FindCoordinatorResponse = conn.request(FindCoordinatorRequest("g"), timeout_s=30)
        txn: FindCoordinatorResponse = conn.request(
            FindCoordinatorRequest("tx", COORDINATOR_TRANSACTION), timeout_s=30
        )
    finally:
        conn.close()
    assert txn.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "(transaction.state.log.replication.factor) but only 1 broker is live" in (
        txn.error_message or ""
    )
    assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    message = answer.error_message or ""
    assert "__consumer_offsets" in message
    assert "offsets.topic.replication.factor" in message
    assert "only 1 broker is live ([1]): 2 more brokers must be running" in message
    assert zk.get(znodes.topic_path("__consumer_offsets")) is None
    logged = (tmp_path / "b1.out").read_text(encoding="utf-8", errors="replace")
    warnings = [
        json.loads(line)
        for line in logged.splitlines()
        if line.startswith("{") and "offsets.topic.replication.factor" in line
    ]
    assert warnings and warnings[0]["level"] == "WARNING", logged[-2000:]


def test_find_coordinator_creates_the_offsets_topic_in_the_cluster(
    clients: Callable[[], ZkClient], spawn_broker: BrokerProcesses
) -> None:
    zk = clients()
    _process, log_dir = spawn_broker(
        1, "offsets.topic.replication.factor=1", "offsets.topic.num.partitions=4"
    )
    conn = BrokerConnection(BrokerAddress(host="127.0.0.1", port=listening_port(log_dir)))
    conn.connect()
    answers: list[FindCoordinatorResponse] = []
    try:
        # COORDINATOR_NOT_AVAILABLE until the controller elected the new partition's leader.
        wait_for(
            lambda: (
                answers.append(conn.request(FindCoordinatorRequest("g"), timeout_s=30))
                or answers[-1].error_code == 0
            ),
            timeout_s=60,
        )
    finally:
        conn.close()
    assert answers[-1].node_id == 1
    assert {a.error_code for a in answers} <= {0, ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assignment = znodes.TopicAssignment.decode(
        "__consumer_offsets", zk.get(znodes.topic_path("__consumer_offsets"))[0]
    )
    assert dict(assignment.partitions) == {p: (1,) for p in range(4)}
    config = json.loads(zk.get(znodes.topic_config_path("__consumer_offsets"))[0])["config"]
    assert config["cleanup.policy"] == "compact"


def test_create_topics_times_out_while_no_controller_acts_and_completes_later(
    clients: Callable[[], ZkClient], spawn_broker: BrokerProcesses
) -> None:
    zk = clients()
    secret = get_or_create_inter_broker_secret(zk)
    # Broker 100 holds /controller but does nothing yet: the broker process cannot win.
    epoch = register_controller_and_increment_epoch(zk, 100, 0)
    _process, log_dir = spawn_broker(1)
    conn = BrokerConnection(BrokerAddress(host="127.0.0.1", port=listening_port(log_dir)))
    conn.connect()
    try:
        created: CreateTopicsResponse = conn.request(
            CreateTopicsRequest([CreatableTopic("late", 2, 1)], 1_000), timeout_s=30
        )
        (result,) = created.topics
        assert result.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert "timeout_ms=1000" in (result.error_message or "")
        # Written all the same: the controller carries it out once it acts.
        assert zk.get(znodes.topic_path("late")) is not None
        assert read_partition_state(zk, "late", 0) is None
        controller = Controller(zk, epoch, ControllerConfig(100, secret, reconnect_backoff_ms=50))
        controller.start()
        try:
            wait_for(lambda: read_partition_state(zk, "late", 1) is not None, timeout_s=30)
        finally:
            controller.shutdown()
            controller.join()
    finally:
        conn.close()
