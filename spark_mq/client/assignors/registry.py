"""Assignors by name, and the parser of ``partition.assignment.strategy``.

``partition.assignment.strategy`` is the consumer's ordered list of assignors, most preferred
first. A member offers all of them in JoinGroup and the coordinator picks the first one that
every member offers, so a group can switch assignors with a rolling restart that lists both.
Each entry is one of:

* a protocol name: ``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``;
* the Java class name Kafka users write, such as
  ``org.apache.kafka.clients.consumer.CooperativeStickyAssignor``;
* ``package.module:ClassName``, naming an :class:`~spark_mq.client.assignors.Assignor`
  subclass to import (a custom assignor);
* an ``Assignor`` subclass or instance, when configuring from Python.

A string value is split on commas, as Kafka's list-typed settings are. Kafka 4's default,
used when the setting is absent, is ``range, cooperative-sticky``: range is used until every
member of the group offers cooperative-sticky, after which a second rolling restart that drops
range switches the group to it.

The rebalance protocol a consumer runs is the lowest one that all of its assignors support
(:func:`common_rebalance_protocol`): a consumer that lists ``range`` revokes everything at each
rebalance even while the group uses ``cooperative-sticky``.

>>> value = "roundrobin, org.apache.kafka.clients.consumer.StickyAssignor"
>>> [a.name for a in parse_assignment_strategy(value)]
['roundrobin', 'sticky']
>>> common_rebalance_protocol(parse_assignment_strategy(None)).name
'EAGER'
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from spark_mq.client.assignors.assignor import Assignor, RebalanceProtocol
from spark_mq.client.assignors.cooperative_sticky import CooperativeStickyAssignor
from spark_mq.client.assignors.range_assignor import RangeAssignor
from spark_mq.client.assignors.round_robin_assignor import RoundRobinAssignor
from spark_mq.client.assignors.sticky import StickyAssignor
from spark_mq.errors import ConfigError

#: The configuration key this module parses.
STRATEGY_KEY: Final = "partition.assignment.strategy"

#: The built-in assignors by protocol name.
ASSIGNORS: Final[Mapping[str, type[Assignor]]] = MappingProxyType(
    {
        cls.name: cls
        for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
    }
)

#: Kafka 4's default ``partition.assignment.strategy``.
DEFAULT_ASSIGNMENT_STRATEGY: Final = ("range", "cooperative-sticky")

_KAFKA_CLASSES: Final = MappingProxyType(
    {
        "org.apache.kafka.clients.consumer.RangeAssignor": "range",
        "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
        "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    }
)

StrategyEntry = str | type[Assignor] | Assignor


def assignor_for(name: str) -> Assignor:
    """A new instance of the built-in assignor with protocol (or Kafka class) ``name``."""
    cls = ASSIGNORS.get(_KAFKA_CLASSES.get(name, name))
    if cls is None:
        raise ConfigError(
            f"{STRATEGY_KEY}: unknown assignor {name!r}; use one of {', '.join(ASSIGNORS)}, "
            "a Kafka class name, or package.module:ClassName",
            key=STRATEGY_KEY,
            value=name,
        )
    return cls()


def _import_assignor(path: str) -> Assignor:
    module_name, _, attribute = path.partition(":")
    try:
        found: object = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"{STRATEGY_KEY}: cannot import {path!r} ({exc})", key=STRATEGY_KEY, value=path
        ) from exc
    return _instance(found, path)


def _instance(entry: object, shown: object) -> Assignor:
    if isinstance(entry, Assignor):
        return entry
    if isinstance(entry, type) and issubclass(entry, Assignor):
        return entry()
    raise ConfigError(
        f"{STRATEGY_KEY}: {shown!r} is not an Assignor subclass or instance",
        key=STRATEGY_KEY,
        value=shown,
    )


def parse_assignment_strategy(
    value: str | Iterable[StrategyEntry] | None,
) -> tuple[Assignor, ...]:
    """The assignors of a ``partition.assignment.strategy`` value, in preference order.

    ``None`` gives :data:`DEFAULT_ASSIGNMENT_STRATEGY`. Raises
    :class:`~spark_mq.errors.ConfigError` naming the key for an unknown name, an empty list,
    or two assignors with the same protocol name (members could not tell them apart).
    """
    if value is None:
        value = DEFAULT_ASSIGNMENT_STRATEGY
    entries: list[StrategyEntry] = (
        [part.strip() for part in value.split(",")] if isinstance(value, str) else list(value)
    )
    assignors: list[Assignor] = []
    for entry in entries:
        if isinstance(entry, str):
            if not entry:
                raise ConfigError(
                    f"{STRATEGY_KEY}: empty assignor name in {value!r}",
                    key=STRATEGY_KEY,
                    value=value,
                )
            assignors.append(_import_assignor(entry) if ":" in entry else assignor_for(entry))
        else:
            assignors.append(_instance(entry, entry))
    if not assignors:
        raise ConfigError(
            f"{STRATEGY_KEY} lists no assignor; the default is "
            f"{', '.join(DEFAULT_ASSIGNMENT_STRATEGY)}",
            key=STRATEGY_KEY,
            value=value,
        )
    names = [a.name for a in assignors]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(
            f"{STRATEGY_KEY} lists the protocol name {duplicates[0]!r} more than once",
            key=STRATEGY_KEY,
            value=value,
        )
    return tuple(assignors)


def common_rebalance_protocol(assignors: Iterable[Assignor]) -> RebalanceProtocol:
    """The protocol a consumer with these assignors runs: the lowest any of them supports.

    Every assignor supports ``EAGER``, and a cooperative one supports both, so the answer is
    ``COOPERATIVE`` only when all of them are cooperative.
    """
    protocols = [a.rebalance_protocol for a in assignors]
    if not protocols:
        raise ConfigError(f"{STRATEGY_KEY} lists no assignor", key=STRATEGY_KEY, value=[])
    return min(protocols)
