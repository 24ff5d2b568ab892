"""spark_mq.broker.txn.owners: the owner state machine against its table, the registry's
closed prefixes, expiry and activity, and owner records in every layout the coordinator has
written loading into the right state."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from spark_mq.broker.txn.owners import (
    OWNER_TRANSITIONS,
    IllegalOwnerTransitionError,
    OwnerRegistry,
    OwnerState,
    first,
    state_of,
)
from spark_mq.broker.txn.records import Decision, DecisionEntry, owner_key
from spark_mq.broker.txn.state_topic import LoadedTransactions

S = OwnerState
#: A record for each state a record can put an owner in (New and Dead have none).
RECORDS = {
    S.ACTIVE: Decision(3, 10, ()),
    S.BOUND: Decision(3, 10, (), instance="q1"),
    S.CLOSED: Decision(3, 10, (), closed_prefix="job/"),
}


def test_the_table_is_the_documented_one() -> None:
    assert {
        S.NEW: {S.ACTIVE, S.BOUND, S.CLOSED},
        S.ACTIVE: {S.ACTIVE, S.BOUND, S.CLOSED},
        S.BOUND: {S.BOUND, S.CLOSED},
        S.CLOSED: {S.CLOSED, S.DEAD},
        S.DEAD: set(),
    } == OWNER_TRANSITIONS
    for state, record in RECORDS.items():
        assert state_of(record) is state


@pytest.mark.parametrize(("old", "new"), list(itertools.product(RECORDS, RECORDS)))
def test_a_record_follows_another_exactly_when_the_table_allows(
    old: OwnerState, new: OwnerState
) -> None:
    owner = first("o", RECORDS[old])
    # The same binding and prefix, so that only the table decides.
    record = Decision(
        4,
        11,
        (),
        closed_prefix=RECORDS[new].closed_prefix or owner.closed_prefix,
        instance=RECORDS[new].instance or owner.instance,
    )
    if state_of(record) in OWNER_TRANSITIONS[old]:
        assert owner.follow(record).last_sequence == 4
    else:
        with pytest.raises(IllegalOwnerTransitionError):
            owner.follow(record)


def test_an_owner_is_never_rebound_unbound_reopened_or_moved() -> None:
    bound = first("o", RECORDS[S.BOUND])
    for record in (Decision(4, 11, (), instance="q2"), Decision(4, 11, ())):
        with pytest.raises(IllegalOwnerTransitionError, match=r"Bound|bound to 'q1'"):
            bound.follow(record)
    closed = first("o", RECORDS[S.CLOSED])
    for record in (Decision(4, 11, ()), Decision(4, 11, (), closed_prefix="other/")):
        with pytest.raises(IllegalOwnerTransitionError):
            closed.follow(record)
    # A bound owner that closes stays bound.
    both = bound.follow(Decision(4, 11, (), closed_prefix="o/", instance="q1"))
    assert both.state is S.CLOSED and both.instance == "q1"


def test_closed_prefixes_refuse_ids_under_them_until_forgotten() -> None:
    owners = OwnerRegistry()
    owners.install(first("job", Decision(0, 10, (), closed_prefix="job/")))
    owners.install(first("j", Decision(0, 10, (), closed_prefix="j-")))
    owners.install(first("stream", Decision(7, 10, ())))
    assert owners.closer_of("job/3") == "job" and owners.closer_of("j-1") == "j"
    assert owners.closer_of("jobs/3") is None and owners.closer_of("stream/0") is None
    assert owners.expirable(1009, 1000, []) == []
    assert owners.expirable(1010, 1000, ["job/2"]) == ["j"]  # job/2 still completing
    assert sorted(owners.expirable(1010, 1000, [])) == ["j", "job"]  # never the stream
    owners.forget("job")
    assert owners.closer_of("job/3") is None and "job" not in owners
    with pytest.raises(IllegalOwnerTransitionError):
        owners.forget("stream")  # an open owner's sequence guards replays: never forgotten
    assert owners.last_sequence("stream") == 7 and owners.last_sequence("nobody") == -1


def test_activity_counts_requests_under_a_prefix_heartbeats_and_the_load() -> None:
    owners = OwnerRegistry()
    owners.load({}, now_ms=100)
    owners.client_seen("job/0", 150)
    owners.client_seen("jobs/0", 400)  # another prefix
    owners.heartbeat("other/", 120)
    assert owners.last_active(["job/", "other/", "quiet/"]) == {
        "job/": 150,
        "other/": 120,
        "quiet/": 100,
    }
    owners.forget_id("job/0")
    owners.expire_heartbeats(1120, 1000)
    assert owners.last_active(["job/", "other/"]) == {"job/": 100, "other/": 100}


def _raw_decision(*elements: object) -> bytes:
    """A decision value as MessagePack, element by element, without this code's encoder."""
    return msgspec.msgpack.encode(list(elements))


@pytest.mark.parametrize(
    ("value", "state", "instance", "closed"),
    [
        # Before owners could be closed: [version, sequence, timestamp, entries].
        (_raw_decision(0, 5, 10, [["s/0", 1000, 0, 1, True]]), S.ACTIVE, None, None),
        # Before owners had instances: closed_prefix, nil or set.
        (_raw_decision(0, 5, 10, [], None), S.ACTIVE, None, None),
        (_raw_decision(0, 0, 10, [], "job/"), S.CLOSED, None, "job/"),
        # Today's layout.
        (_raw_decision(0, 5, 10, [], None, "q1"), S.BOUND, "q1", None),
        (_raw_decision(0, 5, 10, [], "s/", "q1"), S.CLOSED, "q1", "s/"),
    ],
    ids=["v0-4", "v0-5-open", "v0-5-closed", "v0-6-bound", "v0-6-bound-closed"],
)
def test_owner_records_of_every_layout_load_into_their_state(
    value: bytes, state: OwnerState, instance: str | None, closed: str | None
) -> None:
    loaded = LoadedTransactions()
    loaded.apply(owner_key("o"), value)
    assert loaded.skipped == 0
    owners = OwnerRegistry()
    owners.load(loaded.owners, now_ms=50)
    owner = owners["o"]
    assert (owner.state, owner.instance, owner.closed_prefix) == (state, instance, closed)
    assert owner.last_sequence == loaded.owners["o"].sequence
    assert owners.closer_of("job/1") == ("o" if closed == "job/" else None)
    if value == RAW_WITH_ENTRY:
        assert owner.record.entries == (DecisionEntry("s/0", 1000, 0, 1, True),)


RAW_WITH_ENTRY = _raw_decision(0, 5, 10, [["s/0", 1000, 0, 1, True]])
