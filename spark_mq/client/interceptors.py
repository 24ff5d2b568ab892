"""Interceptors: user hooks on the produce and consume paths (Kafka's ProducerInterceptor and
ConsumerInterceptor).

A producer interceptor has ``on_send(record)`` and ``on_acknowledgement(metadata, exception)``;
a consumer interceptor has ``on_consume(records)``. Any of them may be missing. ``on_send``
runs in the thread that calls ``send()`` before the record is partitioned and may return a
changed :class:`ProducerRecord` (or None to keep it); ``on_acknowledgement`` runs on the
producer's sender thread once per record, so keep it short. ``on_consume`` receives what the
poll method returns (the dict of ``poll()`` or the Arrow table of ``poll_batch()``) and may
return a replacement. As in Kafka, an exception raised by an interceptor is logged and
otherwise ignored: interceptors observe, they do not fail the client.

>>> class Count:
...     def __init__(self): self.sent = 0
...     def on_send(self, record): self.sent += 1
>>> chain = ProducerInterceptors([Count()])
>>> chain.on_send(ProducerRecord("t", None, None, b"v", None, None)).value
b'v'
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from spark_mq.client.records import RecordMetadata

log = logging.getLogger(__name__)

T = TypeVar("T")


class ProducerRecord(NamedTuple):
    """A record as given to ``send()``, which ``on_send`` sees and may replace."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None
    headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None


class ProducerInterceptors:
    """The configured producer interceptors, called in order."""

    def __init__(self, interceptors: Sequence[object]) -> None:
        self._on_send = [i.on_send for i in interceptors if hasattr(i, "on_send")]
        self._on_ack = [
            i.on_acknowledgement for i in interceptors if hasattr(i, "on_acknowledgement")
        ]

    @property
    def has_on_acknowledgement(self) -> bool:
        return bool(self._on_ack)

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        for hook in self._on_send:
            try:
                changed = hook(record)
            except Exception:
                log.exception("producer interceptor on_send failed; record sent unchanged")
                continue
            if isinstance(changed, ProducerRecord):
                record = changed
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, exception: Exception | None) -> None:
        for hook in self._on_ack:
            try:
                hook(metadata, exception)
            except Exception:
                log.exception("producer interceptor on_acknowledgement failed")


class ConsumerInterceptors:
    """The configured consumer interceptors, called in order."""

    def __init__(self, interceptors: Sequence[object]) -> None:
        self._on_consume = [i.on_consume for i in interceptors if hasattr(i, "on_consume")]

    def __bool__(self) -> bool:
        return bool(self._on_consume)

    def on_consume(self, records: T) -> T:
        for hook in self._on_consume:
            try:
                changed: Any = hook(records)
            except Exception:
                log.exception("consumer interceptor on_consume failed; records unchanged")
                continue
            if changed is not None:
                records = changed
        return records
