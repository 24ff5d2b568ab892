"""Assignors by name and the partition.assignment.strategy parser."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from collections.abc import Mapping

import pytest

import spark_mq.client.assignors as package
from spark_mq.client.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNMENT_STRATEGY,
    Assignment,
    Assignor,
    CooperativeStickyAssignor,
    RangeAssignor,
    RebalanceProtocol,
    Subscription,
    assignor_for,
    common_rebalance_protocol,
    parse_assignment_strategy,
)
from spark_mq.errors import ConfigError, UsageError


class EverythingToFirst(Assignor):
    """A custom assignor, importable as ``test_assignor_registry:EverythingToFirst``."""

    name = "everything-to-first"

    def assign(
        self, cluster_partitions: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        return {m: Assignment(()) for m in subscriptions}


def names(value: object) -> list[str]:
    return [a.name for a in parse_assignment_strategy(value)]  # type: ignore[arg-type]


def test_builtin_names_are_kafkas() -> None:
    assert list(ASSIGNORS) == ["range", "roundrobin", "sticky", "cooperative-sticky"]
    for name, cls in ASSIGNORS.items():
        assert cls.name == name
        assert isinstance(assignor_for(name), cls)


def test_default_is_kafka_4s() -> None:
    assert DEFAULT_ASSIGNMENT_STRATEGY == ("range", "cooperative-sticky")
    assert names(None) == ["range", "cooperative-sticky"]


def test_strings_lists_classes_instances_and_imports() -> None:
    assert names(" roundrobin ,sticky") == ["roundrobin", "sticky"]
    assert names(["org.apache.kafka.clients.consumer.CooperativeStickyAssignor"]) == [
        "cooperative-sticky"
    ]
    instance = RangeAssignor()
    parsed = parse_assignment_strategy([instance, CooperativeStickyAssignor])
    assert parsed[0] is instance
    assert isinstance(parsed[1], CooperativeStickyAssignor)
    assert names("test_assignor_registry:EverythingToFirst,range") == [
        "everything-to-first",
        "range",
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("fair", "unknown assignor 'fair'"),
        ("range,,sticky", "empty assignor name"),
        ([], "lists no assignor"),
        ("range, range", "more than once"),
        ([RangeAssignor, "range"], "more than once"),
        ("no_such_module_xyz:Thing", "cannot import"),
        ("test_assignor_registry:names", "not an Assignor"),
        ([dict], "not an Assignor"),
    ],
)
def test_bad_values_name_the_key(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_assignment_strategy(value)  # type: ignore[arg-type]
    assert info.value.key == "partition.assignment.strategy"


def test_common_rebalance_protocol_is_the_lowest() -> None:
    assert common_rebalance_protocol(parse_assignment_strategy("cooperative-sticky")) is (
        RebalanceProtocol.COOPERATIVE
    )
    assert common_rebalance_protocol(parse_assignment_strategy(None)) is RebalanceProtocol.EAGER
    with pytest.raises(ConfigError):
        common_rebalance_protocol([])


def test_bad_partition_counts_are_refused() -> None:
    subs = {"a": Subscription(["t"])}
    for assignor in (cls() for cls in ASSIGNORS.values()):
        with pytest.raises(UsageError, match="'t'"):
            assignor.assign({"t": -1}, subs)


def test_a_bare_string_is_not_a_topic_list() -> None:
    with pytest.raises(UsageError):
        Subscription("events")


def test_module_docstring_examples_run() -> None:
    modules = [package] + [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(package.__path__)
    ]
    for module in modules:
        failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert failures == 0, module.__name__


def test_an_empty_group_gets_an_empty_answer() -> None:
    for assignor in (cls() for cls in ASSIGNORS.values()):
        assert assignor.assign({"t": 3}, {}) == {}
        assert assignor.assign({}, {"a": Subscription(["t"])}) == {"a": Assignment(())}
