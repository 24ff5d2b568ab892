"""The controller's election choices for controlled shutdown and preferred leaders (pure
functions of the assignment, the ISR and the live brokers), the auto rebalance's choice of
partitions, and the partitions a controlled shutdown reports as still to move; each checked
against Kafka's rules (PartitionLeaderElectionAlgorithms, checkAndTriggerAutoLeaderRebalance,
doControlledShutdown)."""

from __future__ import annotations

import itertools
import re

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.controller.context import ControllerContext
from spark_mq.broker.controller.controlled_shutdown import remaining_leaderships
from spark_mq.broker.controller.leader_election import (
    controlled_shutdown_leader,
    preferred_replica_leader,
)
from spark_mq.broker.controller.preferred_election import imbalanced_partitions
from spark_mq.broker.leadership_config import LeadershipConfig
from spark_mq.broker.zk.controller_election import ControllerEpoch
from spark_mq.broker.zk.znodes import BrokerRegistration, EndPoint, PartitionState, Versioned
from spark_mq.errors import ConfigError


def test_controlled_shutdown_takes_the_first_live_isr_replica_not_shutting_down() -> None:
    # Assignment order decides, not ISR order.
    assert controlled_shutdown_leader([1, 2, 3], [3, 2, 1], {1, 2, 3}, {1}) == 2
    # Shutting down, dead or out of the ISR: skipped.
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}) == 3
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 3}, {1}) == 3
    assert controlled_shutdown_leader([1, 2, 3], [1, 3], {1, 2, 3}, {1}) == 3
    # Nobody else can lead: the partition stays with its leader.
    assert controlled_shutdown_leader([1, 2, 3], [1], {1, 2, 3}, {1}) is None
    assert controlled_shutdown_leader([1], [1], {1}, {1}) is None


def test_controlled_shutdown_choice_matches_a_reference_over_every_small_case() -> None:
    brokers = [1, 2, 3]
    subsets = [set(c) for n in range(len(brokers) + 1) for c in itertools.combinations(brokers, n)]
    for assignment in itertools.permutations(brokers):
        for isr, live, down in itertools.product(subsets, subsets, subsets):
            eligible = [b for b in assignment if b in isr and b in live and b not in down]
            expected = eligible[0] if eligible else None
            assert controlled_shutdown_leader(assignment, isr, live, down) == expected


def test_the_preferred_replica_leads_only_if_alive_and_in_sync() -> None:
    assert preferred_replica_leader([2, 1, 3], [1, 2, 3], {1, 2, 3}) == 2
    # Never another replica, even one that could lead.
    assert preferred_replica_leader([2, 1, 3], [1, 3], {1, 2, 3}) is None
    assert preferred_replica_leader([2, 1, 3], [1, 2, 3], {1, 3}) is None
    assert preferred_replica_leader([], [1], {1}) is None


def _context(
    assignments: dict[int, tuple[int, ...]],
    leaders: dict[int, tuple[int, tuple[int, ...]]],
    live: set[int],
) -> ControllerContext:
    ctx = ControllerContext(ControllerEpoch(epoch=1, zk_version=1))
    for broker in live:
        ctx.live_brokers[broker] = BrokerRegistration(
            broker, (EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker),), None, 0
        )
        ctx.broker_epochs[broker] = 100 + broker
    ctx.assignments["t"] = dict(assignments)
    for partition, (leader, isr) in leaders.items():
        ctx.leadership[("t", partition)] = Versioned(PartitionState(leader, 3, isr, 1), 5)
    return ctx


def test_auto_rebalance_moves_only_past_the_imbalance_percentage() -> None:
    # Broker 1 is preferred for 0-3 and leads 0-2: 25 % of its partitions are elsewhere.
    assignments = {p: (1, 2, 3) for p in range(4)}
    leaders = {p: (1, (1, 2, 3)) for p in range(3)} | {3: (2, (1, 2, 3))}
    ctx = _context(assignments, leaders, {1, 2, 3})
    assert imbalanced_partitions(ctx, 25) == []  # not above 25 %
    assert imbalanced_partitions(ctx, 24) == [("t", 3)]
    assert imbalanced_partitions(ctx, 10) == [("t", 3)]


def test_auto_rebalance_skips_preferred_replicas_that_cannot_lead() -> None:
    assignments = {0: (1, 2, 3), 1: (1, 2, 3), 2: (2, 3, 1)}
    # 0: broker 1 out of the ISR; 1: broker 1 in it; 2: led by its preferred replica.
    leaders = {0: (2, (2, 3)), 1: (3, (1, 2, 3)), 2: (2, (1, 2, 3))}
    ctx = _context(assignments, leaders, {1, 2, 3})
    assert imbalanced_partitions(ctx, 10) == [("t", 1)]
    # A preferred replica shutting down is not elected.
    ctx.shutting_down_brokers.add(1)
    assert imbalanced_partitions(ctx, 10) == []
    # Nor a dead one.
    ctx.shutting_down_brokers.clear()
    del ctx.live_brokers[1]
    assert imbalanced_partitions(ctx, 10) == []


def test_a_controlled_shutdown_waits_only_for_partitions_another_replica_could_take() -> None:
    assignments = {0: (1, 2), 1: (1,), 2: (2, 1), 3: (1, 3), 4: (1, 4)}
    leaders = {0: (1, (1,)), 1: (1, (1,)), 2: (2, (1, 2)), 3: (1, (1, 3)), 4: (1, (1,))}
    ctx = _context(assignments, leaders, {1, 2, 3})
    # 1 has one replica (cannot move), 2 is led by broker 2, 4's other replica is dead.
    assert remaining_leaderships(ctx, 1) == [("t", 0), ("t", 3)]
    # Other replicas shutting down too cannot take it either.
    ctx.shutting_down_brokers.update({1, 3})
    assert remaining_leaderships(ctx, 1) == [("t", 0)]
    ctx.topics_to_delete.add("t")
    assert remaining_leaderships(ctx, 1) == []


def test_shutting_down_brokers_are_live_but_not_eligible() -> None:
    ctx = _context({0: (1, 2)}, {0: (1, (1, 2))}, {1, 2})
    ctx.shutting_down_brokers.add(1)
    assert ctx.live_ids == {1, 2}
    assert ctx.eligible_ids == {2}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("leader.imbalance.per.broker.percentage", "101", "leader.imbalance.per.broker.percentage"),
        ("leader.imbalance.check.interval.seconds", "0", "leader.imbalance.check.interval.seconds"),
        ("controlled.shutdown.max.retries", "0", "controlled.shutdown.max.retries"),
        ("controlled.shutdown.retry.backoff.ms", "-1", "controlled.shutdown.retry.backoff.ms"),
        ("controlled.shutdown.enable", "maybe", "controlled.shutdown.enable"),
    ],
)
def test_leadership_settings_refuse_bad_values_naming_the_key(
    key: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        LeadershipConfig.from_properties({key: value})


def test_leadership_settings_have_kafkas_defaults() -> None:
    cfg = LeadershipConfig()
    assert (
        cfg.controlled_shutdown_enable,
        cfg.controlled_shutdown_max_retries,
        cfg.controlled_shutdown_retry_backoff_ms,
        cfg.auto_leader_rebalance_enable,
        cfg.leader_imbalance_per_broker_percentage,
        cfg.leader_imbalance_check_interval_seconds,
    ) == (True, 3, 5000, True, 10, 300)


def test_a_brokers_properties_reach_the_leadership_settings() -> None:
    cfg = ServerConfig.from_properties(
        {"auto.leader.rebalance.enable": "false", "controlled.shutdown.retry.backoff.ms": "250"}
    )
    assert not cfg.leadership.auto_leader_rebalance_enable
    assert cfg.leadership.controlled_shutdown_retry_backoff_ms == 250
    assert cfg.to_properties(only_set=True)["controlled.shutdown.retry.backoff.ms"] == "250"
    wanted = re.escape("did you mean 'leader.imbalance.check.interval.seconds'")
    with pytest.raises(ConfigError, match=wanted):
        ServerConfig.from_properties({"leader.imbalance.check.interval.second": "5"})


def test_docstring_examples_of_the_election_modules_run() -> None:
    import doctest

    import spark_mq.broker.leadership_config
    import spark_mq.client.leader_election

    for module in (spark_mq.broker.leadership_config, spark_mq.client.leader_election):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
