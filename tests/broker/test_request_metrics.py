"""The per-API request metrics: error codes found at every level of a response, and the
histogram families built from the loop's counts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from spark_mq.broker.metrics.requests import RequestMetrics, error_codes
from spark_mq.protocol.api import ApiKey
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.produce import (
    ProducePartitionResponse,
    ProduceResponse,
    ProduceTopicResponse,
)


def _produce_response(*codes: int) -> ProduceResponse:
    partitions = [ProducePartitionResponse(partition=i, error_code=c) for i, c in enumerate(codes)]
    return ProduceResponse([ProduceTopicResponse("t", partitions)])


def test_error_codes_are_found_in_nested_lists() -> None:
    body = _produce_response(0, ErrorCode.NOT_LEADER_OR_FOLLOWER, 0, ErrorCode.CORRUPT_MESSAGE)
    assert error_codes(body) == [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.CORRUPT_MESSAGE]
    assert error_codes(_produce_response(0, 0)) == []


def test_phases_add_up_and_buckets_are_cumulative() -> None:
    metrics = RequestMetrics()
    registry = CollectorRegistry()
    registry.register(metrics)
    # Two produces: 1 ms queued, 2 ms handled of which 1.5 ms waiting for followers.
    for _ in range(2):
        metrics.observe(
            ApiKey.PRODUCE,
            _produce_response(0, ErrorCode.NOT_ENOUGH_REPLICAS),
            received=10.0,
            started=10.001,
            handled=10.003,
            sent=10.0031,
            remote_s=0.0015,
        )
    metrics.frame_error(None, ErrorCode.CORRUPT_MESSAGE)

    def get(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert get("spark_mq_requests_total", api="PRODUCE") == 2
    assert get("spark_mq_requests_total", api="FETCH") is None  # never seen: not exported
    assert get("spark_mq_request_errors_total", api="PRODUCE", error="NOT_ENOUGH_REPLICAS") == 2
    assert get("spark_mq_request_errors_total", api="UNKNOWN_API", error="CORRUPT_MESSAGE") == 1
    sums = {
        phase: get("spark_mq_request_seconds_sum", api="PRODUCE", phase=phase)
        for phase in ("queue", "local", "remote", "send", "total")
    }
    assert sums["remote"] == 0.003
    assert abs(sums["local"] - 0.001) < 1e-9  # 2 x (2 ms - 1.5 ms remote)
    assert abs(sums["queue"] + sums["local"] + sums["remote"] + sums["send"] - sums["total"]) < 1e-9
    # 1 ms falls in the 1 ms bucket (le is inclusive), not the 0.5 ms one.
    assert get("spark_mq_request_seconds_bucket", api="PRODUCE", phase="queue", le="0.0005") == 0
    assert get("spark_mq_request_seconds_bucket", api="PRODUCE", phase="queue", le="0.001") == 2
    assert get("spark_mq_request_seconds_bucket", api="PRODUCE", phase="queue", le="+Inf") == 2
    assert get("spark_mq_request_seconds_count", api="PRODUCE", phase="queue") == 2
    assert b"spark_mq_request_seconds_bucket" in generate_latest(registry)
