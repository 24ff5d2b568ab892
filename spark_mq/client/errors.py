"""The errors only the clients raise, kept importable here for existing imports: they live
in :mod:`spark_mq.errors`, in the one tree, grouped by what a caller does about them."""

from __future__ import annotations

from spark_mq.errors import (
    BufferExhaustedError,
    CommitFailedError,
    DeliveryTimeoutError,
    NoOffsetForPartitionError,
)

__all__ = [
    "BufferExhaustedError",
    "CommitFailedError",
    "DeliveryTimeoutError",
    "NoOffsetForPartitionError",
]
