"""Controller election through ``/controller`` and ``/controller_epoch``, and the epoch-checked
writes that keep a deposed controller from changing cluster state (Kafka's ZooKeeper-mode
KafkaController and KafkaZkClient).

Election. A broker reads ``/controller_epoch`` (creating it with epoch 0 the first time) and
commits one multi-op: create the ephemeral ``/controller`` naming itself, and set
``/controller_epoch`` to epoch + 1 at the version it read. Either both happen or neither:
of brokers racing, exactly one wins; a loser sees NodeExists or BadVersion. A loser whose
first attempt's answer was lost checks whether ``/controller`` and the epoch are its own
before it gives up, so a lost reply does not make it forget that it won.

Fencing. The winner keeps the epoch's znode version (``zk_version``). Every later controller
write is a multi-op whose first operation checks ``/controller_epoch`` at that version: once
another broker has won (its election bumped the version), the deposed controller's writes
fail as a whole with :class:`ControllerMovedError`, whether it was paused, partitioned or
expired, and whatever it believes. A controller also stops acting on its own as soon as it
learns it lost: its session expired (kazoo's LOST), or ``/controller`` names another broker.

Re-election. Every broker watches ``/controller``; when it disappears (the controller's
session ended), each live broker tries to win.

Threads: election and resignation run on the ZooKeeper event thread (see
:mod:`.client`); :meth:`ControllerElector.checked_commit` may be called from any thread.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from spark_mq.errors import ControllerMovedError, CorruptZnodeError, ZooKeeperConnectionError

from . import znodes
from .client import SessionEvent, ZkClient, translate_errors

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """An elected controller's epoch and ``/controller_epoch``'s znode version after its
    election: the version every later write of this controller checks."""

    epoch: int
    zk_version: int


def read_controller_id(zk: ZkClient) -> int | None:
    """The current controller's broker id, or None when there is none."""
    found = zk.get(znodes.CONTROLLER)
    return None if found is None else znodes.ControllerRegistration.decode(found[0]).broker_id


def read_controller_epoch(zk: ZkClient) -> znodes.Versioned[int] | None:
    found = zk.get(znodes.CONTROLLER_EPOCH)
    if found is None:
        return None
    return znodes.Versioned(znodes.decode_controller_epoch(found[0]), found[1].version)


def _read_or_create_controller_epoch(zk: ZkClient) -> znodes.Versioned[int]:
    current = read_controller_epoch(zk)
    if current is not None:
        return current
    with translate_errors("creating /controller_epoch"):
        try:
            zk.kazoo.create(
                znodes.CONTROLLER_EPOCH,
                znodes.encode_controller_epoch(znodes.INITIAL_CONTROLLER_EPOCH),
            )
            return znodes.Versioned(znodes.INITIAL_CONTROLLER_EPOCH, 0)
        except NodeExistsError:
            pass
    current = read_controller_epoch(zk)
    assert current is not None, "/controller_epoch is persistent and never deleted"
    return current


def register_controller_and_increment_epoch(
    zk: ZkClient, broker_id: int, timestamp_ms: int
) -> ControllerEpoch:
    """Try to become controller; raises :class:`ControllerMovedError` if another broker is
    (or became) controller first."""
    zk.require_connected("controller election")
    current = _read_or_create_controller_epoch(zk)
    new_epoch = current.value + 1
    txn = zk.kazoo.transaction()
    txn.create(
        znodes.CONTROLLER,
        znodes.ControllerRegistration(broker_id, timestamp_ms).encode(),
        ephemeral=True,
    )
    txn.set_data(
        znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(new_epoch), current.version
    )
    with translate_errors("controller election"):
        results = txn.commit()
    if not any(isinstance(r, Exception) for r in results):
        return ControllerEpoch(new_epoch, results[1].version)
    # NodeExists (someone is controller) or BadVersion (someone won since we read the epoch).
    # Our own earlier attempt may be the one that won, if its reply was lost: then both
    # znodes are ours.
    owner = read_controller_id(zk)
    now = read_controller_epoch(zk)
    if owner == broker_id and now is not None and now.value == new_epoch:
        return ControllerEpoch(new_epoch, now.version)
    raise ControllerMovedError(
        f"broker {broker_id} lost the controller election: /controller names broker {owner} "
        f"and /controller_epoch is {None if now is None else now.value}"
    )


def checked_commit(
    zk: ZkClient,
    epoch: ControllerEpoch,
    add_ops: Callable[[TransactionRequest], None],
    what: str,
) -> list[Any]:
    """Commit ``add_ops``' operations in one multi-op behind a check of ``/controller_epoch``
    at ``epoch.zk_version``; return their results (kazoo's: a path, a stat, True, or the
    exception of a failed operation, e.g. BadVersionError for a lost compare-and-set).

    Raises :class:`ControllerMovedError` if the epoch moved: nothing was written.
    """
    zk.require_connected(what)
    txn = zk.kazoo.transaction()
    txn.check(znodes.CONTROLLER_EPOCH, epoch.zk_version)
    add_ops(txn)
    with translate_errors(what):
        results = txn.commit()
    return _checked_results(epoch, results, what)


def _checked_results(epoch: ControllerEpoch, results: Sequence[Any], what: str) -> list[Any]:
    if isinstance(results[0], (BadVersionError, NoNodeError)):
        raise ControllerMovedError(
            f"{what} refused: /controller_epoch is no longer at version {epoch.zk_version} "
            f"(controller epoch {epoch.epoch}), so another broker is controller now"
        )
    return list(results[1:])


def checked_commit_many(
    zk: ZkClient,
    epoch: ControllerEpoch,
    batches: Sequence[Callable[[TransactionRequest], None]],
    what: str,
) -> list[list[Any]]:
    """Like :func:`checked_commit` for many independent multi-ops (one per partition, as
    Kafka sends them), pipelined: all are sent before the first answer is awaited. Raises
    :class:`ControllerMovedError` if any epoch check failed."""
    zk.require_connected(what)
    pending = []
    for add_ops in batches:
        txn = zk.kazoo.transaction()
        txn.check(znodes.CONTROLLER_EPOCH, epoch.zk_version)
        add_ops(txn)
        pending.append(txn.commit_async())
    with translate_errors(what):
        answers = [p.get() for p in pending]
    return [_checked_results(epoch, results, what) for results in answers]


class ControllerElector:
    """One broker's part in controller election.

    ``on_elected(epoch)`` runs on the event thread when this broker becomes controller,
    ``on_resigned()`` when it stops being controller (another broker won, its session
    expired, or a write was refused by the epoch check).
    """

    def __init__(
        self,
        zk: ZkClient,
        broker_id: int,
        *,
        on_elected: Callable[[ControllerEpoch], None] = lambda _epoch: None,
        on_resigned: Callable[[], None] = lambda: None,
        wall_clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._zk = zk
        self.broker_id = broker_id
        self._on_elected = on_elected
        self._on_resigned = on_resigned
        self._wall_clock_ms = wall_clock_ms
        self._lock = threading.Lock()
        self._active: ControllerEpoch | None = None
        self.controller_id: int | None = None

    @property
    def active_epoch(self) -> ControllerEpoch | None:
        """This broker's controller epoch while it is controller, else None."""
        with self._lock:
            return self._active

    @property
    def is_active(self) -> bool:
        return self.active_epoch is not None

    def start(self) -> None:
        """Watch ``/controller`` and run an election now (on the event thread)."""
        self._zk.add_handler(self)
        self._zk.watch_data(znodes.CONTROLLER, self._on_controller_change)

    def _on_controller_change(self, _data: bytes | None, _stat: object) -> None:
        # A notification may be stale: the deletion of our old /controller can arrive after
        # our new session already won again. So, as Kafka's controller does, act on what
        # ZooKeeper says now, not on what the notification carried.
        self.elect()

    def elect(self) -> None:
        """Kafka's maybeResign() then elect(): read who is controller now; resign if that is
        no longer us; if nobody is, try to become controller."""
        try:
            current = read_controller_id(self._zk)
            self.controller_id = current
            if current == self.broker_id and self.is_active:
                return
            if current is not None:
                self._resign_if_active(f"/controller names broker {current}")
                if current == self.broker_id:
                    # /controller is ours but this broker no longer acts on it (a write of
                    # its epoch was refused): free it for a clean election, as Kafka's
                    # triggerControllerMove does.
                    with translate_errors("freeing /controller"):
                        self._zk.kazoo.delete(znodes.CONTROLLER)
                return
            self._resign_if_active("/controller was deleted")
            epoch = register_controller_and_increment_epoch(
                self._zk, self.broker_id, self._wall_clock_ms()
            )
        except ControllerMovedError as exc:
            log.info("%s", exc)
            return
        except NoNodeError:
            return  # /controller went away meanwhile: its deletion watch elects again.
        except (ZooKeeperConnectionError, CorruptZnodeError) as exc:
            # The next session event or /controller change runs the election again.
            log.warning("controller election on broker %d failed: %s", self.broker_id, exc)
            return
        with self._lock:
            self._active = epoch
        self.controller_id = self.broker_id
        log.info("broker %d is controller with epoch %d", self.broker_id, epoch.epoch)
        self._on_elected(epoch)

    def on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            # Our /controller is gone with the session: stop at once, before anything else.
            self._resign_if_active("the ZooKeeper session expired")
        elif event in (SessionEvent.NEW_SESSION, SessionEvent.RECONNECTED):
            self.elect()

    def _resign_if_active(self, reason: str) -> None:
        with self._lock:
            was_active, self._active = self._active is not None, None
        if was_active:
            log.warning("broker %d resigns as controller: %s", self.broker_id, reason)
            self._on_resigned()

    def checked_commit(self, add_ops: Callable[[TransactionRequest], None], what: str) -> list[Any]:
        """:func:`checked_commit` with this controller's epoch; resigns when it is refused."""
        epoch = self.active_epoch
        if epoch is None:
            raise ControllerMovedError(f"{what} refused: broker {self.broker_id} is not controller")
        try:
            return checked_commit(self._zk, epoch, add_ops, what)
        except ControllerMovedError as exc:
            self.controller_moved(epoch, str(exc))
            raise

    def controller_moved(self, epoch: ControllerEpoch, reason: str) -> None:
        """A write or request of ``epoch`` was refused because another broker is controller:
        resign (on the event thread, never blocking the caller), but only that epoch, not a
        newer one won in the meantime."""
        self._zk.submit(
            lambda: self._resign_if_active(reason) if self.active_epoch == epoch else None
        )
