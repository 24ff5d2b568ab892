"""A cluster broker's place in its cluster: the ZooKeeper session, the cluster id, the
registration under ``/brokers/ids`` and the broker's part in controller election.

A broker with ``zookeeper.connect`` set builds one :class:`ClusterMembership` once its
listeners are bound (the registration carries their real ports) and starts it before it
announces that it serves. Start-up, in Kafka's order:

1. connect, waiting at most ``zookeeper.connection.timeout.ms`` (an unreachable ZooKeeper
   ends the start with :class:`~spark_mq.errors.ZooKeeperConnectionError` saying so);
2. read ``/cluster/id``, creating it the first time (the first broker of a cluster makes
   the id; every later one adopts it), and check that the log directory has served no other
   cluster and no other ``broker.id`` (``BrokerMeta.join_cluster``);
3. register ``/brokers/ids/<broker.id>`` (ephemeral) with the advertised endpoint and rack;
4. join controller election.

An elected broker starts a :class:`~spark_mq.broker.controller.controller.Controller` for
the epoch it won (its own event thread; starting it never blocks the ZooKeeper event
thread); a resigning one stops it at once. :meth:`ClusterMembership.close` stops the
controller and ends the session, so ZooKeeper deletes the registration (and
``/controller``, if it was ours) at once instead of after the session timeout.

Threads: :meth:`start` and :meth:`close` block and run on a worker thread of the broker's
event loop; the session's events run on the ZooKeeper event thread; the properties may be
read from any thread.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence

from kazoo.exceptions import NodeExistsError

from spark_mq.broker.config import BrokerConfig
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.inter_broker import PLAINTEXT_TRANSPORT, InterBrokerTransport
from spark_mq.broker.leadership_config import LeadershipConfig
from spark_mq.errors import CorruptZnodeError
from spark_mq.protocol.address import BrokerAddress

from ..controller.controller import Controller, ControllerConfig
from . import znodes
from .broker_registration import BrokerRegistrar
from .client import ZkClient, ZkClientConfig, translate_errors
from .controller_election import ControllerElector, ControllerEpoch

log = logging.getLogger(__name__)


def zk_client_config(broker: BrokerConfig) -> ZkClientConfig:
    """The ZooKeeper settings of a cluster broker."""
    timeout_ms = broker.zookeeper_connection_timeout_ms
    return ZkClientConfig(
        broker.zookeeper_connect,
        session_timeout_ms=broker.zookeeper_session_timeout_ms,
        connection_timeout_ms=None if timeout_ms == -1 else timeout_ms,
    )


def advertised_endpoints(
    broker: BrokerConfig, bound: Sequence[BrokerAddress]
) -> tuple[znodes.EndPoint, ...]:
    """What the broker registers, one endpoint per TCP listener name: ``advertised.listeners``
    if set, else its bound TCP listeners (``bound`` holds their addresses in the order of
    ``listeners``, with the real port of a port-0 listener). The inter-broker listener comes
    first, so that a reader that takes a registration's first endpoint reaches the broker as
    brokers do."""
    if broker.advertised_listeners:
        endpoints = [
            znodes.EndPoint(item.scheme, item.host, item.port, item.security_protocol)
            for item in broker.parsed_advertised()
        ]
    else:
        # The TCP addresses are bound in the order of the TCP listeners.
        tcp = [listener for listener in broker.parsed_listeners() if listener.scheme != "UNIX"]
        addresses = [address for address in bound if address.unix_path is None]
        endpoints = [
            znodes.EndPoint(listener.scheme, address.host, address.port, listener.security_protocol)
            for listener, address in zip(tcp, addresses, strict=False)
        ]
    # BrokerConfig refuses zookeeper.connect without the inter-broker listener.
    assert endpoints, "a cluster broker has a bound TCP listener"
    first = broker.inter_broker_listener
    return tuple(sorted(endpoints, key=lambda e: e.listener_name != first))


def advertised_endpoint(broker: BrokerConfig, bound: Sequence[BrokerAddress]) -> znodes.EndPoint:
    """The endpoint other brokers reach this one at (of inter.broker.listener.name)."""
    return advertised_endpoints(broker, bound)[0]


def _get_or_create(zk: ZkClient, path: str, new_value: bytes) -> bytes:
    """The data of persistent ``path``, creating it with ``new_value`` if no broker has yet
    (the first broker's value is the cluster's: a broker that loses the race adopts it)."""
    found = zk.get(path)
    if found is not None:
        return found[0]
    with translate_errors(f"creating {path}"):
        try:
            zk.kazoo.create(path, new_value, makepath=True)
            return new_value
        except NodeExistsError:
            pass
    found = zk.get(path)
    assert found is not None, f"{path} is persistent and never deleted"
    return found[0]


def get_or_create_cluster_id(zk: ZkClient) -> str:
    """``/cluster/id``'s id, creating the znode with a new id if no broker has yet."""
    new_id = BrokerMeta.new_cluster_id()
    return znodes.decode_cluster_id(
        _get_or_create(zk, znodes.CLUSTER_ID, znodes.encode_cluster_id(new_id))
    )


def get_or_create_inter_broker_secret(zk: ZkClient) -> str:
    """The secret brokers authenticate to each other with (AuthenticateBroker), made with
    the cluster (256 random bits)."""
    data = _get_or_create(zk, znodes.INTER_BROKER_SECRET, secrets.token_hex(32).encode())
    secret = data.decode("ascii", errors="replace")
    if len(secret) < 32:
        raise CorruptZnodeError(
            f"{znodes.INTER_BROKER_SECRET} holds {len(secret)} characters, not a secret of "
            "at least 32: delete the znode (every broker of the cluster must then restart "
            "to adopt the new one)",
            path=znodes.INTER_BROKER_SECRET,
        )
    return secret


class ClusterMembership:
    """One broker's session with the cluster (see the module docstring)."""

    def __init__(
        self,
        broker: BrokerConfig,
        bound: Sequence[BrokerAddress],
        *,
        unclean_leader_election_enable: bool = False,
        leadership: LeadershipConfig | None = None,
        wall_clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        on_leader_elected: Callable[[bool], None] = lambda _unclean: None,
        inter_broker: InterBrokerTransport = PLAINTEXT_TRANSPORT,
    ) -> None:
        self.broker_id = broker.node_id
        #: How this broker (and its controller) connects to the other brokers.
        self.inter_broker = inter_broker
        self._unclean_leader_election_enable = unclean_leader_election_enable
        # Told of every partition leader this broker elects as controller (whether the
        # election was unclean): the broker's election metrics, across controller epochs.
        self._on_leader_elected = on_leader_elected
        self._leadership = leadership or LeadershipConfig()
        #: The running controller while this broker is controller, else None.
        self.controller: Controller | None = None
        self._controller_lock = threading.Lock()
        self.endpoints = advertised_endpoints(broker, bound)
        #: The endpoint of the inter-broker listener (the first registered).
        self.endpoint = self.endpoints[0]
        self._rack = broker.broker_rack or None
        self._wall_clock_ms = wall_clock_ms
        self.zk = ZkClient(zk_client_config(broker))
        self.cluster_id: str | None = None
        #: The cluster's inter-broker secret (read at :meth:`start`).
        self.inter_broker_secret: str | None = None
        self.registrar = BrokerRegistrar(self.zk, self._registration)
        self.elector = ControllerElector(
            self.zk,
            self.broker_id,
            on_elected=self._on_elected,
            on_resigned=self._on_resigned,
            wall_clock_ms=wall_clock_ms,
        )
        #: The epochs this broker was elected controller with, in order (a log for tests
        #: and the controller's later work; the current one is ``elector.active_epoch``).
        self.elections: list[ControllerEpoch] = []
        self._closed = False

    def _registration(self) -> znodes.BrokerRegistration:
        return znodes.BrokerRegistration(
            broker_id=self.broker_id,
            endpoints=self.endpoints,
            rack=self._rack,
            timestamp_ms=self._wall_clock_ms(),
        )

    def start(self, check_cluster_id: Callable[[str], object] = lambda _cluster_id: None) -> None:
        """Connect, adopt the cluster id, register, join the election (blocking).

        ``check_cluster_id(cluster_id)`` runs before the broker registers: it raises if this
        broker's log directory may not serve that cluster (then nothing is registered)."""
        self.zk.start()
        try:
            self.cluster_id = get_or_create_cluster_id(self.zk)
            check_cluster_id(self.cluster_id)
            self.inter_broker_secret = get_or_create_inter_broker_secret(self.zk)
            self.registrar.register()
            self.elector.start()
        except BaseException:
            self.close()
            raise
        log.info(
            "broker %d joined cluster %s through ZooKeeper %s as %s (broker epoch %s)",
            self.broker_id,
            self.cluster_id,
            self.zk.config.connect,
            ",".join(e.connection_string for e in self.endpoints),
            self.registrar.broker_epoch,
        )

    def _on_elected(self, epoch: ControllerEpoch) -> None:
        # On the ZooKeeper event thread: the controller does its work on its own thread.
        self.elections.append(epoch)
        assert self.inter_broker_secret is not None, "read at start(), before the election"
        controller = Controller(
            self.zk,
            epoch,
            ControllerConfig(
                broker_id=self.broker_id,
                inter_broker_secret=self.inter_broker_secret,
                inter_broker=self.inter_broker,
                unclean_leader_election_enable=self._unclean_leader_election_enable,
                own_broker_epoch=lambda: self.registrar.broker_epoch,
                on_leader_elected=self._on_leader_elected,
                auto_leader_rebalance_enable=self._leadership.auto_leader_rebalance_enable,
                leader_imbalance_per_broker_percentage=(
                    self._leadership.leader_imbalance_per_broker_percentage
                ),
                leader_imbalance_check_interval_seconds=(
                    self._leadership.leader_imbalance_check_interval_seconds
                ),
            ),
            on_controller_moved=self.elector.controller_moved,
        )
        with self._controller_lock:
            previous, self.controller = self.controller, controller
        if previous is not None:
            previous.shutdown()
        controller.start()

    def _on_resigned(self) -> None:
        # The elector has logged why. Stop at once; never block the ZooKeeper event thread.
        with self._controller_lock:
            controller, self.controller = self.controller, None
        if controller is not None:
            controller.shutdown()

    @property
    def controller_id(self) -> int | None:
        """The elected controller's broker id as this broker last saw it; None if unknown."""
        return self.elector.controller_id

    @property
    def is_controller(self) -> bool:
        return self.elector.is_active

    @property
    def broker_epoch(self) -> int | None:
        """The czxid of this broker's registration; None while unregistered."""
        return self.registrar.broker_epoch

    def close(self) -> None:
        """End the session: ZooKeeper deletes the registration (and ``/controller`` if ours)
        now. Idempotent."""
        if self._closed:
            return
        self._closed = True
        controller = self.controller
        self._on_resigned()
        self.zk.close()
        if controller is not None:
            controller.join(timeout_s=5.0)
        log.info("broker %d left the cluster (ZooKeeper session closed)", self.broker_id)
