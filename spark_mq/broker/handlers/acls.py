"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): the ACLs of the broker's store (a
single node's file, a cluster's ZooKeeper; ``broker.acl.store``).

As Kafka, a broker with no authorizer answers SECURITY_DISABLED: ACLs it would not enforce
are not kept. Who may call them is checked before (``acl.checks``: Describe, and Alter, on
the Cluster). Each creation is checked on its own and answered in its own result; the valid
ones are written together.
"""

from __future__ import annotations

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.errors import SecurityDisabledError
from spark_mq.protocol.acls import (
    AclBinding,
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    check_binding,
)


def _require_authorizer(ctx: RequestContext) -> None:
    if not ctx.core.authorizer.enabled:
        raise SecurityDisabledError(
            "this broker has no authorizer, so it keeps no ACLs: set authorizer.class.name="
            "kafka.security.authorizer.AclAuthorizer on the brokers (and super.users for the "
            "administrators) first"
        )


async def handle_describe_acls(
    ctx: RequestContext, request: DescribeAclsRequest, _: memoryview
) -> Response:
    _require_authorizer(ctx)
    flt = request.filter
    found = [b for b in ctx.core.authorizer.bindings() if flt.matches(b)]
    return Response(DescribeAclsResponse(0, None, found))


async def handle_create_acls(
    ctx: RequestContext, request: CreateAclsRequest, _: memoryview
) -> Response:
    _require_authorizer(ctx)
    results: list[AclCreationResult] = []
    valid: list[AclBinding] = []
    for binding in request.creations:
        try:
            check_binding(binding)
        except TYPED_ERRORS as exc:
            results.append(AclCreationResult(*error_of(exc, "CREATE_ACLS")))
            continue
        valid.append(binding)
        results.append(AclCreationResult(0))
    if valid:
        await ctx.core.run_blocking(ctx.core.acl_store.create, valid)
    return Response(CreateAclsResponse(results))


async def handle_delete_acls(
    ctx: RequestContext, request: DeleteAclsRequest, _: memoryview
) -> Response:
    _require_authorizer(ctx)
    matched = await ctx.core.run_blocking(ctx.core.acl_store.delete, request.filters)
    return Response(DeleteAclsResponse([DeleteAclsFilterResult(0, None, m) for m in matched]))
