"""DescribeClientQuotas (48) and AlterClientQuotas (49): the client quotas of the broker (a
single node: its log directory; a cluster: ZooKeeper, applied by every broker through a
change notification; see :mod:`spark_mq.broker.quotas.store`).

Describe answers every configured entity the filter matches (see protocol/quotas.py for the
match rules), with its quotas; a filter component of an unknown entity type, or naming a
type twice, is INVALID_REQUEST. Alter applies each entity's ops on its own: an unknown key,
a value that is not positive, a key altered twice or a bad entity is INVALID_REQUEST for
that entity, and nothing of it is written.

Who may call these is the authorizer's business (Kafka: DescribeConfigs / AlterConfigs on
the Cluster); without one, any connection that may send requests may.
"""

from __future__ import annotations

import logging

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.quotas.entity import QuotaEntity, filter_matcher
from spark_mq.errors import InvalidRequestError
from spark_mq.protocol.error_codes import code_for
from spark_mq.protocol.quotas import (
    AlterationResult,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    QuotaEntry,
    QuotaValue,
)

logger = logging.getLogger("spark_mq.broker.quotas")


async def handle_describe_client_quotas(
    ctx: RequestContext, request: DescribeClientQuotasRequest, _: memoryview
) -> Response:
    matches = filter_matcher(request.components, request.strict)
    entries = [
        QuotaEntry(entity.components(), [QuotaValue(k, v) for k, v in sorted(values.items())])
        for entity, values in sorted(
            ctx.core.quota_store.configs().items(),
            key=lambda item: (item[0].user or "", item[0].client_id or ""),
        )
        if matches(entity)
    ]
    return Response(DescribeClientQuotasResponse(0, None, entries))


async def handle_alter_client_quotas(
    ctx: RequestContext, request: AlterClientQuotasRequest, _: memoryview
) -> Response:
    store = ctx.core.quota_store
    results = []
    for entry in request.entries:
        try:
            entity = QuotaEntity.from_components(entry.entity)
            await ctx.core.run_blocking(
                lambda e=entity, ops=entry.ops: store.alter(
                    e, ops, validate_only=request.validate_only
                )
            )
        except InvalidRequestError as exc:
            results.append(AlterationResult(exc.error_code, str(exc), list(entry.entity)))
            continue
        except Exception as exc:
            logger.exception("altering the client quotas of %s failed", entry.entity)
            results.append(AlterationResult(int(code_for(exc)), str(exc), list(entry.entity)))
            continue
        if not request.validate_only:
            logger.info(
                "%s (%s) altered the client quotas of %s: %s",
                ctx.session.principal,
                ctx.peer,
                entity,
                ", ".join(f"{op.key}={'(removed)' if op.remove else op.value}" for op in entry.ops),
            )
        results.append(AlterationResult(0, None, list(entry.entity)))
    return Response(AlterClientQuotasResponse(results))
