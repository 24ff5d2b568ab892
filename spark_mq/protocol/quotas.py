"""Client quotas: DescribeClientQuotas (48) and AlterClientQuotas (49), Kafka's APIs (KIP-546)
field for field (Kafka's camelCase names in snake case).

A quota entity is a list of components, each an entity type and a name: ``user`` (the
principal's name, ``alice`` for ``User:alice``) and ``client-id`` (the request header's
client id). A name of None is the type's default (Kafka's ``<default>``, which applies to
every user or client id that has no quota of its own). The keys are Kafka's:
``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per second) and
``request_percentage`` (percent of one request handler's time per quota window; see
docs/security.md for how the asyncio broker measures it); values are doubles, as Kafka's.

DescribeClientQuotas filters entities with components: ``match_type`` 0 matches the name
``match`` exactly, 1 the type's default, 2 any entity that has the type. With ``strict``
an entity matches only if it has no component of a type the filter does not name.

AlterClientQuotas applies, per entity, ``ops``: set ``key`` to ``value``, or remove it
(``remove``). Each entity succeeds or fails on its own; ``validate_only`` checks without
writing.
"""

from __future__ import annotations

from typing import Final

import msgspec

#: Kafka's entity types (ClientQuotaEntity.USER and CLIENT_ID).
USER: Final = "user"
CLIENT_ID: Final = "client-id"
ENTITY_TYPES: Final = (USER, CLIENT_ID)

#: Kafka's quota keys (QuotaConfigs).
PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
QUOTA_KEYS: Final = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)

#: ``match_type`` of a filter component (Kafka's ClientQuotaFilterComponent).
MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
MATCH_ANY: Final = 2


class EntityComponent(msgspec.Struct, array_like=True, frozen=True):
    """One part of an entity: ``entity_name`` None is the type's default."""

    entity_type: str
    entity_name: str | None


class FilterComponent(msgspec.Struct, array_like=True):
    entity_type: str
    match_type: int
    match: str | None = None


class DescribeClientQuotasRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    components: list[FilterComponent]
    strict: bool = False


class QuotaValue(msgspec.Struct, array_like=True):
    key: str
    value: float


class QuotaEntry(msgspec.Struct, array_like=True):
    entity: list[EntityComponent]
    values: list[QuotaValue]


class DescribeClientQuotasResponse(msgspec.Struct, array_like=True):
    error_code: int
    error_message: str | None = None
    entries: list[QuotaEntry] = []
    throttle_time_ms: int = 0


class QuotaOp(msgspec.Struct, array_like=True):
    """Set ``key`` to ``value``, or (``remove``) remove it."""

    key: str
    value: float = 0.0
    remove: bool = False


class AlterationEntry(msgspec.Struct, array_like=True):
    entity: list[EntityComponent]
    ops: list[QuotaOp]


class AlterClientQuotasRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    entries: list[AlterationEntry]
    validate_only: bool = False


class AlterationResult(msgspec.Struct, array_like=True):
    error_code: int
    error_message: str | None
    entity: list[EntityComponent]


class AlterClientQuotasResponse(msgspec.Struct, array_like=True):
    entries: list[AlterationResult]
    throttle_time_ms: int = 0


def describe_client_quotas_error(
    request: DescribeClientQuotasRequest, code: int, message: str
) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(code, message)


def alter_client_quotas_error(
    request: AlterClientQuotasRequest, code: int, message: str
) -> AlterClientQuotasResponse:
    return AlterClientQuotasResponse(
        [AlterationResult(code, message, list(e.entity)) for e in request.entries]
    )
