"""The test as the cluster's controller: real cluster broker processes (real ZooKeeper), to
which the test sends what a controller sends (UpdateMetadata, LeaderAndIsr) over connections
authenticated with the cluster's inter-broker secret. The test wins the controller election
before the brokers start (it holds ``/controller`` for broker id 99), so no broker is
controller and clients see exactly the leaders the test chose: leader moves are made at will.

Also usable as a function (:func:`publish_from_directory`) by tests of a cluster broker that
need its directory's topics in its metadata before a controller sends them."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kazoo.client import KazooClient
from waiting import wait_for

from spark_mq.broker.dir_files import Endpoint
from spark_mq.broker.zk import znodes
from spark_mq.client.broker_auth import authenticate_as_broker
from spark_mq.client.connection import BrokerConnection
from spark_mq.errors import UnsupportedVersionError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api_versions import ApiVersionsRequest
from spark_mq.protocol.controller import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LiveLeader,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse

#: The broker id the acting controller claims.
CONTROLLER_ID = 99


class ClusterBroker:
    """One cluster broker process and what a controller knows of it."""

    def __init__(self, broker_id: int, address: BrokerAddress, broker_epoch: int) -> None:
        self.broker_id = broker_id
        self.address = address
        self.broker_epoch = broker_epoch

    def call(self, request: object, *, secret: str | None = None) -> object:
        """Send ``request`` (as a broker when ``secret`` is given) and return the answer."""
        conn = BrokerConnection(self.address)
        try:
            if secret is not None:
                authenticate_as_broker(
                    conn, broker_id=CONTROLLER_ID, broker_epoch=-1, secret=secret, timeout_s=10
                )
            else:
                conn.connect()
            return conn.request(request, timeout_s=10)  # type: ignore[arg-type]
        finally:
            conn.close()

    def metadata(self, topics: list[str] | None = None, **kw: bool) -> MetadataResponse:
        response = self.call(MetadataRequest(topics, **kw))
        assert isinstance(response, MetadataResponse)
        return response

    def local_epoch(self) -> int:
        """The epoch of this broker's log directory (ApiVersions' ``broker_epoch``)."""
        return int(self.call(ApiVersionsRequest()).broker_epoch)  # type: ignore[attr-defined]


def claim_controller(zk: KazooClient) -> int:
    """Win the controller election for :data:`CONTROLLER_ID` before any broker starts, as a
    broker wins it (one transaction: create the ephemeral ``/controller``, bump
    ``/controller_epoch``), so that no broker becomes controller while the test acts as
    one; returns the epoch. The claim lasts as long as ``zk``'s session."""
    zk.ensure_path(znodes.BROKERS)
    if zk.exists(znodes.CONTROLLER_EPOCH) is None:
        zk.create(
            znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(znodes.INITIAL_CONTROLLER_EPOCH)
        )
    data, stat = zk.get(znodes.CONTROLLER_EPOCH)
    epoch = znodes.decode_controller_epoch(data) + 1
    registration = znodes.ControllerRegistration(CONTROLLER_ID, int(time.time() * 1000))
    transaction = zk.transaction()
    transaction.create(znodes.CONTROLLER, registration.encode(), ephemeral=True)
    transaction.set_data(
        znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(epoch), version=stat.version
    )
    results = transaction.commit()
    assert not any(isinstance(r, Exception) for r in results), results
    return epoch


class ActingController:
    """Sends a cluster's brokers the controller's requests at ``controller_epoch``: the
    epoch it won the election with (:func:`claim_controller`), or that of the elected
    controller, which the brokers' fences accept as well (an equal epoch passes)."""

    def __init__(
        self, zk: KazooClient, brokers: dict[int, ClusterBroker], controller_epoch: int
    ) -> None:
        self.zk = zk
        self.brokers = brokers
        self.secret = zk.get("/spark_mq/inter_broker_secret")[0].decode()
        self.controller_epoch = controller_epoch

    def publish(
        self,
        states: list[UpdateMetadataPartitionState],
        live: dict[int, BrokerAddress],
        *,
        leaders: bool = True,
    ) -> None:
        """Give the partitions' replicas their roles (LeaderAndIsr to each replica that is one
        of ``brokers``, when ``leaders``: the leader leads, the others follow) and tell every
        broker of ``brokers`` the new metadata."""
        epoch = self.controller_epoch
        live_brokers = [
            UpdateMetadataBroker(
                broker_id, [UpdateMetadataEndpoint(a.host, a.port, "PLAINTEXT")], None
            )
            for broker_id, a in sorted(live.items())
        ]
        for state in states:
            state.controller_epoch = epoch
            leader = self.brokers.get(state.leader)
            if not leaders or leader is None:
                continue
            for replica in state.replicas:
                if replica in self.brokers:
                    self._leader_and_isr(self.brokers[replica], leader, state)
        for broker in self.brokers.values():
            answer = broker.call(
                UpdateMetadataRequest(CONTROLLER_ID, epoch, -1, states, live_brokers),
                secret=self.secret,
            )
            assert answer.error_code == 0, answer  # type: ignore[attr-defined]

    def _leader_and_isr(
        self, target: ClusterBroker, leader: ClusterBroker, state: UpdateMetadataPartitionState
    ) -> None:
        epoch = self.controller_epoch
        lead = LeaderAndIsrPartitionState(
            state.topic,
            state.partition,
            epoch,
            state.leader,
            state.leader_epoch,
            state.isr,
            state.partition_epoch,
            state.replicas,
            is_new=True,
        )
        live_leader = LiveLeader(leader.broker_id, leader.address.host, leader.address.port)
        # A broker that does not serve LeaderAndIsr yet (before the replica manager of
        # the cluster issue) leads every partition of its own directory anyway.
        with contextlib.suppress(UnsupportedVersionError):
            answer = target.call(
                LeaderAndIsrRequest(CONTROLLER_ID, epoch, -1, [lead], [live_leader]),
                secret=self.secret,
            )
            assert answer.error_code == 0, answer  # type: ignore[attr-defined]


def partition_state(
    topic: str, partition: int, leader: int, leader_epoch: int, replicas: list[int]
) -> UpdateMetadataPartitionState:
    return UpdateMetadataPartitionState(
        topic, partition, 0, leader, leader_epoch, list(replicas), 0, list(replicas), []
    )


@contextmanager
def cluster_brokers(
    root: Path, zk_connect: str, ids: tuple[int, ...], *overrides: str
) -> Iterator[tuple[ActingController, dict[int, ClusterBroker]]]:
    """Start one cluster broker process per id under ``root`` (``overrides``: more
    ``key=value`` settings for each), with the test as their controller; stop them all
    after."""
    processes = []
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        epoch = claim_controller(zk)
        for broker_id in ids:
            processes.append(
                subprocess.Popen(
                    [
                        *(sys.executable, "-m", "spark_mq.broker"),
                        *("--log-dir", str(root / f"b{broker_id}")),
                        *("--override", f"zookeeper.connect={zk_connect}"),
                        *("--override", "listeners=PLAINTEXT://127.0.0.1:0"),
                        *("--override", f"broker.id={broker_id}"),
                        *(arg for item in overrides for arg in ("--override", item)),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        brokers: dict[int, ClusterBroker] = {}
        for broker_id in ids:
            log_dir = root / f"b{broker_id}"
            wait_for(lambda d=log_dir: Endpoint.read(d) is not None)  # type: ignore[misc]
            endpoint = Endpoint.read(log_dir)
            assert endpoint is not None and endpoint.port
            path = f"/brokers/ids/{broker_id}"
            wait_for(lambda p=path: zk.exists(p) is not None)  # type: ignore[misc]
            stat = zk.exists(path)
            brokers[broker_id] = ClusterBroker(
                broker_id, BrokerAddress("127.0.0.1", endpoint.port), stat.czxid
            )
        wait_for(lambda: zk.exists(znodes.INTER_BROKER_SECRET) is not None)
        yield ActingController(zk, brokers, epoch), brokers
    finally:
        zk.stop()
        zk.close()
        for process in processes:
            process.kill()
            process.wait()


def publish_from_directory(
    zk_connect: str, broker_id: int, address: BrokerAddress, topic: str, partitions: int
) -> None:
    """Tell broker ``broker_id`` (alone in its cluster) that it leads every partition of
    ``topic``, at its directory's epoch (the leader epoch its partitions have when no
    controller made it leader)."""
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        stat = zk.exists(f"/brokers/ids/{broker_id}")
        assert stat is not None
        broker = ClusterBroker(broker_id, address, stat.czxid)
        epoch = broker.local_epoch()
        states = [
            partition_state(topic, p, broker_id, epoch, [broker_id]) for p in range(partitions)
        ]
        wait_for(lambda: zk.exists(znodes.CONTROLLER) is not None)
        controller_epoch = znodes.decode_controller_epoch(zk.get(znodes.CONTROLLER_EPOCH)[0])
        acting = ActingController(zk, {broker_id: broker}, controller_epoch)
        acting.publish(states, {broker_id: address})
    finally:
        zk.stop()
        zk.close()
