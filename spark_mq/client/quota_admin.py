"""The admin side of client quotas (Kafka's Admin.describeClientQuotas and
alterClientQuotas): ``Admin.describe_client_quotas`` and ``Admin.alter_client_quotas``.

An entity names a user, a client id or both; :data:`DEFAULT` (Kafka's ``<default>``) stands
for the default user or client id, which applies to every one without a quota of its own::

    admin.alter_client_quotas([
        ClientQuotaAlteration(ClientQuotaEntity(user="alice"), {"producer_byte_rate": 1048576}),
        ClientQuotaAlteration(ClientQuotaEntity(client_id=DEFAULT), {"consumer_byte_rate": None}),
    ])
    admin.describe_client_quotas([filter_any("user")])
    # {ClientQuotaEntity(user='alice', client_id=None): {'producer_byte_rate': 1048576.0}}

A value of None in an alteration removes the key, as Kafka's ``Op(key, null)`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from spark_mq.errors import UsageError
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.quotas import (
    CLIENT_ID,
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    USER,
    AlterationEntry,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntityComponent,
    FilterComponent,
    QuotaOp,
)

#: The default user or client id (Kafka's ``<default>``).
DEFAULT: Final = "<default>"


@dataclasses.dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """A user, a client id or both (None: not part of the entity; :data:`DEFAULT`: the
    default)."""

    user: str | None = None
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise UsageError("a client quota entity names a user, a client id or both")

    def components(self) -> list[EntityComponent]:
        out = []
        for kind, name in ((USER, self.user), (CLIENT_ID, self.client_id)):
            if name is not None:
                out.append(EntityComponent(kind, None if name == DEFAULT else name))
        return out

    @classmethod
    def from_components(cls, components: Sequence[EntityComponent]) -> ClientQuotaEntity:
        names = {
            c.entity_type: DEFAULT if c.entity_name is None else c.entity_name for c in components
        }
        return cls(names.get(USER), names.get(CLIENT_ID))


@dataclasses.dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """Set (a number) or remove (None) each key of ``ops`` for ``entity``."""

    entity: ClientQuotaEntity
    ops: Mapping[str, float | None]


def filter_exact(entity_type: str, name: str) -> FilterComponent:
    """Entities whose ``entity_type`` (``user`` or ``client-id``) is ``name``."""
    return FilterComponent(entity_type, MATCH_EXACT, name)


def filter_default(entity_type: str) -> FilterComponent:
    """Entities whose ``entity_type`` is the default."""
    return FilterComponent(entity_type, MATCH_DEFAULT)


def filter_any(entity_type: str) -> FilterComponent:
    """Entities that have an ``entity_type`` at all."""
    return FilterComponent(entity_type, MATCH_ANY)


def describe_client_quotas(
    request_fn: Callable[[Any], Any], components: Sequence[FilterComponent], strict: bool
) -> dict[ClientQuotaEntity, dict[str, float]]:
    """The quotas of every entity the filter matches (no components: every entity)."""
    response: DescribeClientQuotasResponse = request_fn(
        DescribeClientQuotasRequest(list(components), strict)
    )
    if response.error_code != ErrorCode.NONE:
        raise error_from_code(response.error_code, response.error_message)
    return {
        ClientQuotaEntity.from_components(e.entity): {v.key: v.value for v in e.values}
        for e in response.entries
    }


def alter_client_quotas(
    request_fn: Callable[[Any], Any],
    alterations: Sequence[ClientQuotaAlteration],
    validate_only: bool,
) -> None:
    """Send the alterations; raise the first entity's error (InvalidRequestError, say)
    after all were tried: each entity succeeds or fails on its own."""
    entries = [
        AlterationEntry(
            a.entity.components(),
            [
                QuotaOp(key, 0.0, True) if value is None else QuotaOp(key, float(value))
                for key, value in a.ops.items()
            ],
        )
        for a in alterations
    ]
    response: AlterClientQuotasResponse = request_fn(
        AlterClientQuotasRequest(entries, validate_only)
    )
    for result in response.entries:
        if result.error_code != ErrorCode.NONE:
            raise error_from_code(result.error_code, result.error_message)
