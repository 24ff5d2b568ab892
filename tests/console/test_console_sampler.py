"""The console's sampler against a real broker, with an injected clock: lag points per
group, and throughput from the growth of the end offsets between samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_mq import Admin, Producer, TopicPartition
from spark_mq.console.sampler import ConsoleSampler


class StepClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def produce(mq_dir: Path, topic: str, count: int) -> None:
    with Producer(path=mq_dir) as producer:
        for n in range(count):
            producer.send(topic, value=str(n).encode(), partition=0)
        producer.flush()


def test_lag_points_and_throughput(mq_dir: Path, admin: Admin) -> None:
    admin.create_topic("sampled", partitions=1)
    tp = TopicPartition("sampled", 0)
    admin.alter_group_offsets("readers", {tp: 0})
    clock = StepClock()
    with Admin(path=mq_dir) as sampler_admin:
        sampler = ConsoleSampler(sampler_admin, history_samples=3, clock=clock)
        sampler.sample()
        assert sampler.throughput(tp) is None  # one sample: no rate yet
        produce(mq_dir, "sampled", 40)
        clock.now += 10
        sampler.sample()
        assert sampler.throughput(tp) == pytest.approx(4.0)  # 40 records in 10 s
        history = sampler.lag_history("readers")
        assert [p.total_lag for p in history] == [0, 40]
        assert history[-1].lag_by_partition == {"sampled-0": 40}
        # The end passed offset 0 at the first sample, 10 s ago.
        assert history[-1].max_lag_seconds == pytest.approx(10.0)

        # The history is bounded: the oldest samples go.
        for _ in range(3):
            clock.now += 10
            sampler.sample()
        assert len(sampler.lag_history("readers")) == 3
        assert sampler.status().samples == 5
        assert sampler.status().last_error is None

        # A deleted group leaves the history with the next sample.
        admin.delete_groups(["readers"])
        sampler.sample()
        assert sampler.lag_history("readers") == []
