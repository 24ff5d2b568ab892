"""AuthenticateBroker against a real cluster broker: a connection that shows the cluster's
inter-broker secret (from ZooKeeper) may use the inter-broker APIs; a client's may not, a
wrong secret is refused and its connection closed, and a single-node broker authenticates
nobody."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_fixtures import BrokerProcesses, listening_port
from kazoo.client import KazooClient

from spark_mq.broker.local import ensure_broker, stop_broker
from spark_mq.client.broker_auth import authenticate_as_broker
from spark_mq.client.connection import BrokerConnection
from spark_mq.errors import BrokerAuthenticationError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.metadata import MetadataRequest
from spark_mq.protocol.transactions import (
    TxnTopic,
    WritableTxnMarker,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)


@pytest.fixture
def cluster_broker(spawn_broker: BrokerProcesses, zk_connect: str) -> tuple[BrokerAddress, str]:
    """One cluster broker: its address and the secret read from its ZooKeeper."""
    _process, log_dir = spawn_broker(1)
    port = listening_port(log_dir)
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        secret = zk.get("/spark_mq/inter_broker_secret")[0].decode()
    finally:
        zk.stop()
        zk.close()
    return BrokerAddress(host="127.0.0.1", port=port), secret


def _markers(conn: BrokerConnection) -> WriteTxnMarkersResponse:
    marker = WritableTxnMarker(1, 0, True, [TxnTopic("t", [0])], 0)
    response: WriteTxnMarkersResponse = conn.request(WriteTxnMarkersRequest([marker]), timeout_s=10)
    return response


def test_only_a_connection_with_the_secret_may_use_the_inter_broker_apis(
    cluster_broker: tuple[BrokerAddress, str],
) -> None:
    address, secret = cluster_broker
    assert len(secret) >= 32
    client = BrokerConnection(address)
    client.connect()
    try:
        refused = _markers(client)
        codes = {p.error_code for m in refused.markers for t in m.topics for p in t.partitions}
        assert codes == {int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)}
    finally:
        client.close()

    broker = BrokerConnection(address)
    try:
        authenticate_as_broker(broker, broker_id=2, broker_epoch=-1, secret=secret, timeout_s=10)
        # The same connection now reaches the inter-broker handler itself: the marker for a
        # topic the broker does not have is answered as such, not refused.
        codes = {
            p.error_code for m in _markers(broker).markers for t in m.topics for p in t.partitions
        }
        assert codes and int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED) not in codes
    finally:
        broker.close()


def test_a_wrong_secret_is_refused_and_its_connection_closed(
    cluster_broker: tuple[BrokerAddress, str],
) -> None:
    address, secret = cluster_broker
    conn = BrokerConnection(address)
    with pytest.raises(BrokerAuthenticationError, match="wrong inter-broker secret"):
        authenticate_as_broker(
            conn, broker_id=2, broker_epoch=-1, secret=secret[::-1], timeout_s=10
        )
    assert not conn.connected
    # The broker closed its side too: a new request on a fresh socket still works, and
    # that one is a client's.
    conn.connect()
    try:
        answer = conn.request(MetadataRequest(topics=[]), timeout_s=10)
        # (The broker's own controller election may not have finished yet: any answer will do.)
        assert [b.node_id for b in answer.brokers] == [1]
    finally:
        conn.close()


def test_a_single_node_broker_authenticates_nobody(tmp_path: Path) -> None:
    address = ensure_broker(tmp_path / "single", create=True)
    conn = BrokerConnection(address)
    try:
        with pytest.raises(BrokerAuthenticationError, match="not in a cluster"):
            authenticate_as_broker(
                conn, broker_id=2, broker_epoch=-1, secret="x" * 64, timeout_s=10
            )
    finally:
        conn.close()
        stop_broker(tmp_path / "single")
