"""The load states of the __half_messages partitions a cluster broker leads
(spark_mq/broker/half/placement.py)."""

from __future__ import annotations

import pytest

from spark_mq.broker.half.placement import TRANSITIONS, HalfPlacement, LoadState
from spark_mq.errors import CoordinatorLoadInProgressError, NotCoordinatorError


def test_a_partition_is_served_only_once_loaded_and_until_it_resigns() -> None:
    placement = HalfPlacement()
    with pytest.raises(NotCoordinatorError, match="FindCoordinator, key type 2"):
        placement.check(1, "orders")
    assert placement.elect(1, 4)
    with pytest.raises(CoordinatorLoadInProgressError, match="__half_messages-1"):
        placement.check(1, "orders")
    assert placement.install(1, 4)
    placement.check(1, "orders")  # served
    assert placement.resign(1)
    with pytest.raises(NotCoordinatorError):
        placement.check(1, "orders")
    assert not placement.resign(1)  # nothing to unload twice


def test_stale_elections_and_loads_change_nothing() -> None:
    placement = HalfPlacement()
    assert placement.elect(0, 5)
    assert not placement.elect(0, 5)  # announced again: the load under way goes on
    assert not placement.elect(0, 3)  # an older epoch
    assert placement.elect(0, 6)  # re-elected meanwhile: a new load
    assert not placement.install(0, 5)  # the first load's read is stale
    assert placement.state_of(0) is LoadState.LOADING
    assert placement.install(0, 6)
    assert placement.elect(0, 7)  # moved away and back: loaded again
    assert placement.state_of(0) is LoadState.LOADING
    placement.resign(0)
    assert not placement.install(0, 7)  # resigned while loading: nothing installed
    assert placement.state_of(0) is None


def test_the_transition_table_has_no_shortcut_to_serving() -> None:
    assert LoadState.LOADED not in TRANSITIONS[None]
    assert all(None in TRANSITIONS[s] for s in LoadState)
