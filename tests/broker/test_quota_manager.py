"""Which quota applies (Kafka's KIP-55 precedence), who shares it, and the throttles the
ClientQuotaManager gives (broker/quotas/entity.py, manager.py), with an injected clock."""

from __future__ import annotations

import math

import pytest

from spark_mq.broker.quotas.entity import DEFAULT, MetricKey, QuotaEntity, filter_matcher
from spark_mq.broker.quotas.manager import SENSOR_EXPIRY_MS, ClientQuotaManager, QuotaType
from spark_mq.broker.quotas.rate import QuotaWindow
from spark_mq.errors import InvalidRequestError
from spark_mq.protocol.quotas import EntityComponent, FilterComponent

P = "producer_byte_rate"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def manager(configs: dict[QuotaEntity, dict[str, float]], **kw: object) -> ClientQuotaManager:
    m = ClientQuotaManager(QuotaWindow(11, 1000), **kw)  # type: ignore[arg-type]
    m.update_configs(configs)
    return m


# Kafka's eight levels, highest first; each test removes the levels above one and checks
# that it is the one chosen.
LEVELS = [
    QuotaEntity("alice", "etl"),
    QuotaEntity("alice", DEFAULT),
    QuotaEntity("alice", None),
    QuotaEntity(DEFAULT, "etl"),
    QuotaEntity(DEFAULT, DEFAULT),
    QuotaEntity(DEFAULT, None),
    QuotaEntity(None, "etl"),
    QuotaEntity(None, DEFAULT),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_precedence_is_kafkas(level: int) -> None:
    configs = {e: {P: 100.0 + i} for i, e in enumerate(LEVELS) if i >= level}
    found = manager(configs).quota(QuotaType.PRODUCE, "User:alice", "alice", "etl")
    assert found is not None
    assert found[0] == 100.0 + level


def test_each_key_is_looked_up_on_its_own() -> None:
    m = manager(
        {
            QuotaEntity("alice", None): {P: 1.0},
            QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 2.0},
        }
    )
    assert m.quota(QuotaType.PRODUCE, "User:alice", "alice", "x") == (1.0, MetricKey("alice", ""))
    assert m.quota(QuotaType.FETCH, "User:alice", "alice", "x") == (2.0, MetricKey("", "x"))
    assert m.quota(QuotaType.REQUEST, "User:alice", "alice", "x") is None


def test_who_shares_a_quota_follows_the_matched_entity() -> None:
    clock = Clock()
    m = manager({QuotaEntity("alice", None): {P: 1000.0}}, monotonic_ms=clock)
    # Two client ids of one user share the user's quota.
    assert m.record(QuotaType.PRODUCE, "User:alice", "alice", "a", 6_000) == 0
    assert m.record(QuotaType.PRODUCE, "User:alice", "alice", "b", 6_000) > 0
    assert m.rate(QuotaType.PRODUCE, MetricKey("alice", "")) == pytest.approx(1200)


def test_other_clients_are_not_throttled_by_one_clients_use() -> None:
    clock = Clock()
    m = manager({QuotaEntity(None, DEFAULT): {P: 1000.0}}, monotonic_ms=clock)
    assert m.record(QuotaType.PRODUCE, "User:ANONYMOUS", "ANONYMOUS", "greedy", 50_000) > 0
    assert m.record(QuotaType.PRODUCE, "User:ANONYMOUS", "ANONYMOUS", "polite", 5_000) == 0


def test_throttle_time_and_metric_callback() -> None:
    clock = Clock()
    seen: list[tuple[QuotaType, int]] = []
    m = manager(
        {QuotaEntity(None, "c"): {P: 1000.0}},
        monotonic_ms=clock,
        on_throttle=lambda kind, ms: seen.append((kind, ms)),
    )
    assert m.record(QuotaType.PRODUCE, "User:u", "u", "c", 20_000) == 10_000
    assert seen == [(QuotaType.PRODUCE, 10_000)]
    # Still over while the burst's sample counts; free once it has expired.
    clock.ms += 5_000
    assert m.record(QuotaType.PRODUCE, "User:u", "u", "c", 0) > 0
    clock.ms += 6_000
    assert m.record(QuotaType.PRODUCE, "User:u", "u", "c", 0) == 0


def test_request_time_throttle_is_bounded_by_one_window() -> None:
    clock = Clock()
    m = manager({QuotaEntity(None, DEFAULT): {"request_percentage": 10.0}}, monotonic_ms=clock)
    # 50 s of handler time in one request (5,000 percent-seconds).
    assert m.record(QuotaType.REQUEST, "User:u", "u", "c", 5_000) == 1000


def test_super_users_get_only_quotas_naming_them() -> None:
    configs = {QuotaEntity(DEFAULT, None): {P: 1.0}, QuotaEntity(None, DEFAULT): {P: 2.0}}
    m = manager(configs, exempt=lambda p: p == "User:admin")
    assert m.quota(QuotaType.PRODUCE, "User:admin", "admin", "c") is None
    assert m.quota(QuotaType.PRODUCE, "User:bob", "bob", "c") is not None
    m.update_configs({**configs, QuotaEntity("admin", None): {P: 3.0}})
    assert m.quota(QuotaType.PRODUCE, "User:admin", "admin", "c") == (3.0, MetricKey("admin", ""))


def test_no_quota_means_no_work() -> None:
    m = manager({})
    assert not m.enabled
    assert m.record(QuotaType.PRODUCE, "User:u", "u", "c", 10**12) == 0
    assert m.sensor_count() == 0
    assert m.max_value_in_window(QuotaType.FETCH, "User:u", "u", "c") == -1


def test_max_value_in_window_is_the_quota_over_the_counted_windows() -> None:
    m = manager({QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 1000.0}})
    assert m.max_value_in_window(QuotaType.FETCH, "User:u", "u", "c") == 10_000


def test_max_value_in_window_of_a_huge_quota_is_the_wires_bound() -> None:
    # 1e308 is finite and accepted; times the counted windows it overflows to infinity.
    m = manager({QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 1e308}})
    assert m.max_value_in_window(QuotaType.FETCH, "User:u", "u", "c") == 2**31 - 1


@pytest.mark.parametrize("bad", [0.0, -5.0, math.nan, math.inf])
def test_a_stored_value_no_quota_can_be_is_ignored(
    bad: float, caplog: pytest.LogCaptureFixture
) -> None:
    # A znode or file edited by hand: the value is left out with a warning, the entity's
    # other keys and other entities still apply.
    clock = Clock()
    m = manager(
        {QuotaEntity(None, "c"): {P: bad, "consumer_byte_rate": 1000.0}},
        monotonic_ms=clock,
    )
    assert m.quota(QuotaType.PRODUCE, "User:u", "u", "c") is None
    assert m.record(QuotaType.PRODUCE, "User:u", "u", "c", 10**9) == 0
    assert m.record(QuotaType.FETCH, "User:u", "u", "c", 20_000) == 10_000
    assert "producer_byte_rate" in caplog.text and "ignored" in caplog.text
    m.update_configs({QuotaEntity(None, "c"): {P: bad}})
    assert not m.enabled


def test_idle_sensors_are_dropped() -> None:
    clock = Clock()
    m = manager({QuotaEntity(None, DEFAULT): {P: 1000.0}}, monotonic_ms=clock)
    for i in range(50):
        m.record(QuotaType.PRODUCE, "User:u", "u", f"one-off-{i}", 1)
    assert m.sensor_count() == 50
    clock.ms += SENSOR_EXPIRY_MS
    m.record(QuotaType.PRODUCE, "User:u", "u", "new", 1)
    assert m.sensor_count() == 1


def test_entity_paths_round_trip_and_sanitize() -> None:
    for entity in [
        *LEVELS,
        QuotaEntity("a/b c", "x%y"),
        QuotaEntity("..", "."),
        QuotaEntity("..."),
    ]:
        assert QuotaEntity.from_path(entity.path) == entity
    # ZooKeeper refuses "." and ".." as a path component.
    assert QuotaEntity(None, "..").path == "clients/%2E%2E"
    assert QuotaEntity(".", "c").path == "users/%2E/clients/c"
    assert QuotaEntity("a/b", "c").path == "users/a%2Fb/clients/c"
    assert QuotaEntity(DEFAULT, None).path == "users/<default>"
    with pytest.raises(ValueError, match="not a quota entity path"):
        QuotaEntity.from_path("topics/t")


@pytest.mark.parametrize(
    ("components", "message"),
    [
        ([EntityComponent("ip", "1.2.3.4")], "'ip' is not supported"),
        ([EntityComponent("user", "a"), EntityComponent("user", "b")], "twice"),
        ([EntityComponent("user", "<default>")], "reserved"),
        ([EntityComponent("client-id", "")], "empty"),
        ([], "needs a user"),
    ],
)
def test_bad_entities_are_refused_with_the_reason(
    components: list[EntityComponent], message: str
) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        QuotaEntity.from_components(components)


def test_filters_match_as_kafkas() -> None:
    entities = LEVELS

    def matched(components: list[FilterComponent], strict: bool = False) -> list[QuotaEntity]:
        keep = filter_matcher(components, strict)
        return [e for e in entities if keep(e)]

    assert matched([FilterComponent("user", 0, "alice")]) == LEVELS[:3]
    assert matched([FilterComponent("user", 0, "alice")], strict=True) == [LEVELS[2]]
    assert matched([FilterComponent("client-id", 1)]) == [LEVELS[1], LEVELS[4], LEVELS[7]]
    assert matched([FilterComponent("client-id", 2)], strict=True) == LEVELS[6:]
    assert matched([]) == LEVELS
    with pytest.raises(InvalidRequestError, match="exact"):
        filter_matcher([FilterComponent("user", 0, None)], False)
