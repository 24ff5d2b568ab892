"""InitProducerId (key 22): a producer id and epoch for an idempotent producer.

A request with ``transactional_id`` set asks for a transactional producer; a broker without a
transaction coordinator answers it with INVALID_REQUEST (see docs/protocol.md).
"""

from __future__ import annotations

import msgspec


class InitProducerIdRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """``producer_id``/``producer_epoch`` -1 ask for a new id; an existing pair asks for the
    epoch to be bumped (a producer recovering from an error keeps its id)."""

    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    producer_id: int = -1
    producer_epoch: int = -1


class InitProducerIdResponse(msgspec.Struct, array_like=True):
    error_code: int
    producer_id: int = -1
    producer_epoch: int = -1
    error_message: str | None = None
    throttle_time_ms: int = 0


def init_producer_id_error(
    _: InitProducerIdRequest, code: int, message: str
) -> InitProducerIdResponse:
    """InitProducerId failed with ``code``."""
    return InitProducerIdResponse(code, error_message=message)
