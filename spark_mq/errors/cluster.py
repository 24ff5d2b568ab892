"""Errors of the cluster layer (:class:`ClusterError`): ZooKeeper, its client and the
controller. The tree: :mod:`spark_mq.errors`.
"""

from __future__ import annotations

from spark_mq.errors.base import RetriableError, SparkMQError


class ClusterError(SparkMQError):
    """Base of every error from the cluster layer (ZooKeeper, its client, the controller)."""


class ZooKeeperNotInstalledError(ClusterError):
    """Java or Debian's ``zookeeper`` package is missing; ``missing`` names which one and the
    message says how to install it."""

    def __init__(self, message: str, *, missing: str) -> None:
        super().__init__(message)
        self.missing = missing


class ZooKeeperStartError(ClusterError):
    """A ZooKeeper server that exited or did not answer ``ruok`` in time; ``log_path`` holds
    its output."""

    def __init__(self, message: str, *, log_path: str) -> None:
        super().__init__(message)
        self.log_path = log_path


class ZooKeeperConnectionError(RetriableError, ClusterError):
    """No usable ZooKeeper session: not connected, connection suspended, or session expired.

    Retriable: the client reconnects by itself, and a broker re-registers on a new session.
    """


class CorruptZnodeError(ClusterError):
    """A znode whose data is not the JSON Kafka writes there; ``path`` names the znode."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class BrokerIdInUseError(ClusterError):
    """``/brokers/ids/<id>`` is held by another live session: two brokers share a
    ``broker.id``."""

    def __init__(self, message: str, *, broker_id: str) -> None:
        super().__init__(message)
        self.broker_id = broker_id


class ControllerMovedError(ClusterError):
    """A controller write refused because ``/controller_epoch`` moved on: another broker is
    controller now, so this one must stop acting as controller (Kafka's
    ControllerMovedException, NOT_CONTROLLER)."""

    error_code = 41


class StaleControllerEpochError(ClusterError):
    """A request from a controller whose epoch is older than one this broker has already
    seen: it comes from an ex-controller that has not noticed yet (paused, partitioned, or
    its ZooKeeper session expired). Refused whole; nothing was changed."""

    error_code = 11


class StaleBrokerEpochError(ClusterError):
    """A controller request meant for an earlier life of this broker (its broker epoch, the
    czxid of ``/brokers/ids/<id>``, is older than this broker's registration). Refused whole;
    the controller sends again once it sees the new registration."""

    error_code = 77


class InvalidUpdateVersionError(ClusterError):
    """A partition change proposed at a partition epoch that is no longer current: the
    partition's state changed since the proposer read it. Read the new state and decide
    again."""

    error_code = 95


class BrokerAuthenticationError(ClusterError):
    """A connection claimed to be a broker of the cluster without the cluster's inter-broker
    secret (AuthenticateBroker). The connection stays a client's; inter-broker APIs on it are
    refused. Its code is SASL authentication's, which a client raises as
    :class:`AuthenticationError`."""

    error_code = 58
    shares_code = True


class StateChangeFailedError(ClusterError):
    """A partition or replica state change that the controller's transition table refuses."""


class PreferredLeaderNotAvailableError(RetriableError, ClusterError):
    """A preferred leader election (ElectLeaders, PREFERRED) found the partition's preferred
    replica (the first of its assignment) dead or out of the ISR: leadership stays where it
    is. Retriable: once that replica is back in the ISR, elect again."""

    error_code = 80


class EligibleLeadersNotAvailableError(RetriableError, ClusterError):
    """An unclean leader election (ElectLeaders, UNCLEAN) found no live replica to lead the
    partition. Retriable: start a broker that holds a replica, then elect again."""

    error_code = 83


class ElectionNotNeededError(ClusterError):
    """ElectLeaders found the partition already led by the replica it would elect (its
    preferred replica, or for UNCLEAN a live leader): nothing was changed. Not a failure of
    the election; nothing to retry."""

    error_code = 84


class InconsistentClusterIdError(ClusterError):
    """A broker whose log directory served a cluster with another ``/cluster/id`` (Kafka's
    InconsistentClusterIdException); ``directory`` names it."""

    def __init__(self, message: str, *, directory: str) -> None:
        super().__init__(message)
        self.directory = directory


class InconsistentBrokerIdError(ClusterError):
    """A broker whose log directory served another ``broker.id`` of its cluster (Kafka's
    InconsistentBrokerIdException); ``directory`` names it."""

    def __init__(self, message: str, *, directory: str) -> None:
        super().__init__(message)
        self.directory = directory


class LocalClusterError(ClusterError):
    """A local cluster (``spark-mq cluster``, ``LocalCluster``) whose broker or ZooKeeper did
    not start, register or stop in time, or a cluster directory in the wrong state;
    ``log_path`` names the output that says why, when there is one."""

    def __init__(self, message: str, *, log_path: str | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path
