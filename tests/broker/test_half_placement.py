"""The load states of the __half_messages partitions a cluster broker leads
(spark_mq/broker/half/placement.py)."""

from __future__ import annotations

import pytest

from spark_mq.broker.half.placement import HalfPlacement
from spark_mq.broker.partition_loads import TRANSITIONS, LoadState
from spark_mq.errors import CoordinatorLoadInProgressError, NotCoordinatorError


def test_a_partition_is_served_only_once_loaded_and_until_it_resigns() -> None:
    placement = HalfPlacement()
    with pytest.raises(NotCoordinatorError, match="FindCoordinator, key type 2"):
        placement.check(1, "orders")
    assert placement.begin(1, 4)
    with pytest.raises(CoordinatorLoadInProgressError, match="__half_messages-1"):
        placement.check(1, "orders")
    assert placement.finish(1, 4)
    placement.check(1, "orders")  # served
    assert placement.end(1)
    with pytest.raises(NotCoordinatorError):
        placement.check(1, "orders")
    assert not placement.end(1)  # nothing to unload twice


def test_stale_elections_and_loads_change_nothing() -> None:
    placement = HalfPlacement()
    assert placement.begin(0, 5)
    assert not placement.begin(0, 5)  # announced again: the load under way goes on
    assert not placement.begin(0, 3)  # an older epoch
    assert placement.begin(0, 6)  # re-elected meanwhile: a new load
    assert not placement.finish(0, 5)  # the first load's read is stale
    assert placement.state_of(0) is LoadState.LOADING
    assert placement.finish(0, 6)
    assert placement.begin(0, 7)  # moved away and back: loaded again
    assert placement.state_of(0) is LoadState.LOADING
    placement.end(0)
    assert not placement.finish(0, 7)  # resigned while loading: nothing installed
    assert placement.state_of(0) is None


def test_the_transition_table_has_no_shortcut_to_serving() -> None:
    assert LoadState.LOADED not in TRANSITIONS[None]
    assert all(None in TRANSITIONS[s] for s in LoadState)
