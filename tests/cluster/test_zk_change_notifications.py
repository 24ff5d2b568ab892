"""ChangeNotificationFollower (broker/zk/change_notifications.py) against a real ZooKeeper:
a full pass at start, then each new notification of every followed path once, in order, with
its data; children that are not notifications ignored; a pass that fails is run again with
the notifications it missed, on whichever path the next change comes; a full pass again at
once after the session expires; applied notifications purged once older than the
expiration."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from waiting import wait_for

from spark_mq.broker.zk.change_notifications import (
    ChangeNotificationFollower,
    ChangeSequence,
    Notification,
)
from spark_mq.broker.zk.client import SessionEvent, ZkClient

FIRST = ChangeSequence("/test-changes/first", "change_")
SECOND = ChangeSequence("/test-changes/second", "change_")
EXPIRATION_MS = 60_000


class Applied:
    """The handler of these tests: what each pass was given, optionally failing once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.full_passes = 0
        self.passes: list[list[tuple[str, bytes]]] = []
        self.fail_next = False

    def process_all(self) -> None:
        with self.lock:
            self.full_passes += 1

    def process(self, notifications: Sequence[Notification]) -> None:
        with self.lock:
            if self.fail_next:
                self.fail_next = False
                raise OSError("the entity's store is unreachable")
            self.passes.append([(n.sequence.path, n.data) for n in notifications])

    def seen(self) -> list[tuple[str, bytes]]:
        with self.lock:
            return [item for one_pass in self.passes for item in one_pass]


def _notify(zk: ZkClient, sequence: ChangeSequence, data: bytes) -> str:
    path: str = zk.kazoo.create(f"{sequence.path}/{sequence.prefix}", data, sequence=True)
    return path.rsplit("/", 1)[1]


def _follower(zk: ZkClient, applied: Applied, now: list[int]) -> ChangeNotificationFollower:
    return ChangeNotificationFollower(
        zk,
        [FIRST, SECOND],
        applied,
        name="test-changes",
        wall_clock_ms=lambda: now[0],
        expiration_ms=EXPIRATION_MS,
    )


def test_each_notification_once_in_order_then_purged(clients: Callable[[], ZkClient]) -> None:
    zk, writer = clients(), clients()
    writer.kazoo.ensure_path(FIRST.path)
    before = _notify(writer, FIRST, b"before start")
    applied = Applied()
    now = [0]
    follower = _follower(zk, applied, now)
    follower.start()
    try:
        # At start: one full pass, and the notification made before it is not read.
        wait_for(lambda: follower.last_applied(FIRST) == FIRST.number(before), timeout_s=10)
        assert applied.full_passes == 1 and applied.passes == []
        assert writer.kazoo.exists(SECOND.path) is not None  # created by start()

        writer.kazoo.create(f"{FIRST.path}/not-a-notification", b"x")
        _notify(writer, FIRST, b"f1")
        _notify(writer, SECOND, b"s1")
        last = _notify(writer, FIRST, b"f2")
        wait_for(lambda: follower.last_applied(FIRST) == FIRST.number(last))
        wait_for(lambda: len(applied.seen()) == 3)
        seen = applied.seen()
        assert [d for p, d in seen if p == FIRST.path] == [b"f1", b"f2"]
        assert [d for p, d in seen if p == SECOND.path] == [b"s1"]
        assert applied.full_passes == 1

        # Younger than the expiration: kept. Older: purged after the next pass.
        assert len(writer.children(FIRST.path)) == 4
        now[0] = 2**62
        _notify(writer, FIRST, b"f3")
        wait_for(lambda: writer.children(FIRST.path) == ["not-a-notification"])
        assert applied.seen()[-1] == (FIRST.path, b"f3")
    finally:
        follower.close()


def test_a_failed_pass_is_run_again_with_the_next_change_on_any_path(
    clients: Callable[[], ZkClient],
) -> None:
    zk, writer = clients(), clients()
    applied = Applied()
    follower = _follower(zk, applied, [0])
    follower.start()
    try:
        wait_for(lambda: applied.full_passes == 1, timeout_s=10)
        applied.fail_next = True
        missed = _notify(writer, FIRST, b"missed")
        wait_for(lambda: not applied.fail_next)
        # Nothing was marked applied; the next change, on the other path, brings it back.
        assert follower.last_applied(FIRST) == -1 and applied.seen() == []
        _notify(writer, SECOND, b"next")
        wait_for(lambda: len(applied.seen()) == 2)
        assert sorted(applied.seen()) == [(FIRST.path, b"missed"), (SECOND.path, b"next")]
        assert follower.last_applied(FIRST) == FIRST.number(missed)
        assert applied.full_passes == 1
    finally:
        follower.close()


def test_a_new_session_brings_a_full_pass(
    clients: Callable[[], ZkClient],
    zk_connect: str,
    expire_session: Callable[[str, tuple[int, bytes]], None],
) -> None:
    zk, writer = clients(), clients()
    applied = Applied()
    follower = _follower(zk, applied, [0])
    follower.start()
    new_session = threading.Event()

    class AfterTheFollower:
        def on_session_event(self, event: SessionEvent) -> None:
            if event is SessionEvent.NEW_SESSION:
                new_session.set()

    zk.add_handler(AfterTheFollower())
    try:
        wait_for(lambda: applied.full_passes == 1, timeout_s=10)
        session = zk.kazoo.client_id
        assert session is not None
        expire_session(zk_connect, session)
        assert new_session.wait(20)
        # At once, with no change to wake the watches: what came while the session was
        # lost is caught up now, not at the next change.
        wait_for(lambda: applied.full_passes == 2, timeout_s=10)
        _notify(writer, FIRST, b"after")
        wait_for(lambda: applied.seen() == [(FIRST.path, b"after")], timeout_s=10)
        assert applied.full_passes == 2
    finally:
        follower.close()
