"""The ACL part of the admin client: CreateAcls, DescribeAcls and DeleteAcls, sent to any
broker (every broker of a cluster shares ZooKeeper's ACLs; a single node keeps its own).

    >>> AclBinding(
    ...     ResourcePattern(ResourceType.TOPIC, "orders"),
    ...     AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    ... ).entry.principal
    'User:alice'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from spark_mq.errors import UsageError
from spark_mq.protocol.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from spark_mq.protocol.error_codes import ErrorCode, error_from_code

__all__ = [
    "AccessControlEntry",
    "AclAdmin",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
]


def _raise(code: int, message: str | None) -> None:
    if code != ErrorCode.NONE:
        raise error_from_code(code, message)


class AclAdmin:
    """ACL calls over one ``request(message) -> response`` function (the admin client's)."""

    def __init__(self, request: Callable[[Any], Any]) -> None:
        self._request = request

    def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Add ACLs (one that exists already is kept as it is). Raises the first refusal:
        ConfigError for a binding that cannot be stored, SecurityDisabledError when the
        broker has no authorizer, ClusterAuthorizationError without Alter on the Cluster."""
        if isinstance(bindings, AclBinding):
            raise UsageError("create_acls() takes a list of AclBinding")
        response: CreateAclsResponse = self._request(CreateAclsRequest(list(bindings)))
        for result in response.results:
            _raise(result.error_code, result.error_message)

    def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches (all of them by default)."""
        response: DescribeAclsResponse = self._request(
            DescribeAclsRequest(acl_filter or AclBindingFilter())
        )
        _raise(response.error_code, response.error_message)
        return list(response.bindings)

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """Remove every ACL one of ``filters`` matches; returns those removed."""
        if isinstance(filters, AclBindingFilter):
            raise UsageError("delete_acls() takes a list of AclBindingFilter")
        response: DeleteAclsResponse = self._request(DeleteAclsRequest(list(filters)))
        removed: list[AclBinding] = []
        for result in response.filter_results:
            _raise(result.error_code, result.error_message)
            removed.extend(result.matching_acls)
        return removed
