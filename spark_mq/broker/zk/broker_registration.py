"""A broker's registration: the ephemeral ``/brokers/ids/<id>`` znode and the broker epoch.

The broker epoch is the registration znode's czxid (the ZooKeeper transaction that created
it), so it grows with every registration and a controller can tell a restarted broker from
its previous life (Kafka's KIP-380). When the session expires ZooKeeper deletes the znode;
the broker registers again as soon as it has a new session, with a new, larger epoch.

Registering is Kafka's checked ephemeral create: if the znode exists and belongs to our own
session (a create whose answer was lost with the connection) it is ours; if it belongs to
another live session, two brokers share a ``broker.id`` and we refuse to start.

Threads: :meth:`BrokerRegistration.register` runs on the caller's thread at start-up and on
the ZooKeeper event thread after a session expiry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.exceptions import NodeExistsError, NoNodeError

from spark_mq.errors import BrokerIdInUseError, ZooKeeperConnectionError

from . import znodes
from .client import SessionEvent, ZkClient, translate_errors

log = logging.getLogger(__name__)


def create_ephemeral_checked(zk: ZkClient, path: str, data: bytes) -> int:
    """Create ephemeral ``path`` for this session and return its czxid; an existing znode is
    accepted only if this session owns it."""
    with translate_errors(f"creating {path}"):
        try:
            return int(zk.kazoo.create(path, data, ephemeral=True, include_data=True)[1].czxid)
        except NodeExistsError:
            try:
                _data, stat = zk.kazoo.get(path)
            except NoNodeError:
                # Deleted between our create and our read (its session just ended): try again
                # once; a second race is a real conflict worth reporting.
                return int(zk.kazoo.create(path, data, ephemeral=True, include_data=True)[1].czxid)
    if stat.ephemeralOwner != zk.session_id:
        raise BrokerIdInUseError(
            f"{path} is held by another live ZooKeeper session ({stat.ephemeralOwner:#x}): "
            "another broker runs with the same broker.id; give each broker its own broker.id",
            broker_id=path.rsplit("/", 1)[-1],
        )
    return int(stat.czxid)


class BrokerRegistrar:
    """Keeps ``/brokers/ids/<id>`` registered across session expiries.

    ``make_registration`` is called for each registration so the timestamp is fresh.
    """

    def __init__(self, zk: ZkClient, make_registration: Callable[[], znodes.BrokerRegistration]):
        self._zk = zk
        self._make_registration = make_registration
        self._lock = threading.Lock()
        self._broker_epoch: int | None = None
        # Set by the first register(): from then on a new session re-registers.
        self._wanted = False
        #: Called with the new broker epoch after each registration (on the event thread
        #: after an expiry), e.g. to re-run controller election as Kafka does.
        self.on_registered: list[Callable[[int], None]] = []
        zk.add_handler(self)

    @property
    def broker_epoch(self) -> int | None:
        """The current registration's epoch; None while unregistered (session expired)."""
        with self._lock:
            return self._broker_epoch

    def register(self) -> int:
        self._wanted = True
        registration = self._make_registration()
        epoch = create_ephemeral_checked(
            self._zk, znodes.broker_path(registration.broker_id), registration.encode()
        )
        with self._lock:
            self._broker_epoch = epoch
        log.info("registered broker %d with broker epoch %d", registration.broker_id, epoch)
        for callback in list(self.on_registered):
            callback(epoch)
        return epoch

    def on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            with self._lock:
                self._broker_epoch = None
        elif (
            event in (SessionEvent.NEW_SESSION, SessionEvent.RECONNECTED)
            and self._wanted
            and self.broker_epoch is None
        ):
            self._try_register()

    def _try_register(self) -> None:
        # The new session may drop before the create lands. kazoo then reports the drop and
        # the reconnect as events of their own, and the reconnect calls us again while we are
        # still unregistered, so one failure here is logged, not retried in a loop.
        try:
            self.register()
        except ZooKeeperConnectionError as exc:
            log.warning("re-registration after session expiry failed, will retry: %s", exc)


def read_live_brokers(zk: ZkClient) -> dict[int, tuple[znodes.BrokerRegistration, int]]:
    """Every registered broker: id -> (registration, broker epoch). A registration that
    vanishes between the listing and its read is left out (its session just ended)."""
    out = {}
    for child in zk.children(znodes.BROKER_IDS):
        if not child.isdigit():
            continue
        found = zk.get(znodes.broker_path(int(child)))
        if found is not None:
            data, stat = found
            out[int(child)] = (znodes.BrokerRegistration.decode(int(child), data), int(stat.czxid))
    return out
