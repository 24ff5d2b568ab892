"""A broker's fence against stale controllers (Kafka's controller-epoch and broker-epoch
checks in ``KafkaApis`` and ``ReplicaManager``).

Every request from a controller (LeaderAndIsr, StopReplica, UpdateMetadata) carries the
sender's controller epoch and the receiving broker's epoch as the sender knows it. The broker
keeps the newest controller epoch it has accepted a request from:

- an older controller epoch is an ex-controller that has not noticed yet (paused,
  partitioned, or its ZooKeeper session expired): :class:`StaleControllerEpochError`;
- a broker epoch older than this broker's registration (the czxid of ``/brokers/ids/<id>``)
  was meant for an earlier life of this broker: :class:`StaleBrokerEpochError`. -1 skips the
  check (Kafka's: a request built before the controller saw the registration).

Both refuse the request whole, before anything is changed. A newer controller epoch is
recorded, so from then on the old controller's requests are refused.

Threads: the handlers call :meth:`ControllerFence.check` on the event loop; the lock makes it
safe from any thread.
"""

from __future__ import annotations

import threading

from spark_mq.errors import StaleBrokerEpochError, StaleControllerEpochError

#: The broker epoch a request carries when the controller does not know it.
UNKNOWN_BROKER_EPOCH = -1


class ControllerFence:
    """The newest controller epoch this broker has accepted, and the checks against it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoch = -1
        self._controller_id = -1

    @property
    def controller_epoch(self) -> int:
        """The newest controller epoch accepted (-1: none yet)."""
        return self._epoch

    @property
    def controller_id(self) -> int:
        """The controller that sent the newest accepted request (-1: none yet)."""
        return self._controller_id

    def check(
        self,
        controller_id: int,
        controller_epoch: int,
        broker_epoch: int,
        own_broker_epoch: int | None,
    ) -> None:
        """Accept a request from ``controller_id`` at ``controller_epoch`` meant for broker
        epoch ``broker_epoch``, or raise (nothing recorded then)."""
        with self._lock:
            if controller_epoch < self._epoch:
                raise StaleControllerEpochError(
                    f"request from controller {controller_id} with controller epoch "
                    f"{controller_epoch} refused: this broker has seen controller epoch "
                    f"{self._epoch} (from broker {self._controller_id}), so the sender is no "
                    "longer controller; nothing was changed"
                )
            if (
                broker_epoch != UNKNOWN_BROKER_EPOCH
                and own_broker_epoch is not None
                and broker_epoch < own_broker_epoch
            ):
                raise StaleBrokerEpochError(
                    f"request from controller {controller_id} for broker epoch {broker_epoch} "
                    f"refused: this broker registered again since, with broker epoch "
                    f"{own_broker_epoch}; nothing was changed"
                )
            self._epoch = controller_epoch
            self._controller_id = controller_id
