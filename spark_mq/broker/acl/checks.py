"""What each API checks before it runs (Kafka's KafkaApis), with the authorizer on.

:data:`CHECKS` maps an API to a function that raises the API's authorization error
(:class:`~spark_mq.errors.TopicAuthorizationError`, ``GroupAuthorizationError``,
``TransactionalIdAuthorizationError``, ``ClusterAuthorizationError``) for the first thing
the principal may not do; the dispatcher answers it as it answers any error of the API, with
the code in every part of the response and nothing done. :func:`authorized_handler` wraps a
handler with its check. The hot APIs answer part by part instead, as Kafka does
(:data:`FILTERS`): Produce and Fetch answer the partitions of topics the principal may not
Write or Read TOPIC_AUTHORIZATION_FAILED and serve the others; Metadata, ListGroups and
ListTransactions and OffsetFetch (of every topic) answer only what the principal may
describe.

Kafka answers a few more requests part by part (CreateTopics, DeleteTopics, DeleteRecords,
OffsetCommit, the configs APIs); here those are refused whole when any part is refused, so
nothing of them happens and the client's error names the refused part.

Connections of the cluster's brokers (AuthenticateBroker) are not checked: they may do
ClusterAction and everything replication and transaction markers need, as Kafka's inter-
broker principal usually is a super user.

spark_mq's own APIs:

- PrepareTxn, CommitPreparedTxns, AbortTxns, OwnerHeartbeat: Write on the TransactionalId
  of each transaction named, and on the owner's scope prefix (an ACL PREFIXED on the prefix
  covers both); DescribeTxnOwner: Describe on the TransactionalId named by the owner;
- half messages: SendHalfMessage Write on the topic and on the TransactionalId named by
  the producer group; EndHalfMessage and CheckHalfMessages Write on that TransactionalId;
  ListHalfMessages Describe on it (on the Cluster when no group is named).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Final

import msgspec

from spark_mq.broker.acl.authorizer import AclAuthorizer, denial
from spark_mq.broker.context import Handler, RequestContext, Response
from spark_mq.errors import (
    ClusterAuthorizationError,
    GroupAuthorizationError,
    SparkMQError,
    TopicAuthorizationError,
    TransactionalIdAuthorizationError,
)
from spark_mq.protocol import (
    admin,
    fetch,
    group_offsets,
    groups,
    half_messages,
    metadata,
    produce,
    producer_id,
    replication,
    transactions,
)
from spark_mq.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from spark_mq.protocol.api import INTER_BROKER_APIS, ApiKey
from spark_mq.protocol.error_codes import ErrorCode

Op = AclOperation
RT = ResourceType

_ERRORS: Final[dict[ResourceType, type[SparkMQError]]] = {
    RT.TOPIC: TopicAuthorizationError,
    RT.GROUP: GroupAuthorizationError,
    RT.TRANSACTIONAL_ID: TransactionalIdAuthorizationError,
    RT.CLUSTER: ClusterAuthorizationError,
}


@dataclasses.dataclass(frozen=True, slots=True)
class Subject:
    """Who asks: the principal (``User:alice``) and its host, and the authorizer."""

    authorizer: AclAuthorizer
    principal: str
    host: str

    def allows(self, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.principal, self.host, op, rtype, name)

    def require(self, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> None:
        if not self.allows(op, rtype, name):
            raise _ERRORS[rtype](denial(self.principal, self.host, op, rtype, name))

    def require_all(self, op: AclOperation, rtype: ResourceType, names: Iterable[str]) -> None:
        for name in names:
            self.require(op, rtype, name)


Check = Callable[[Subject, Any], None]


def _offset_for_leader_epoch(s: Subject, r: replication.OffsetForLeaderEpochRequest) -> None:
    if r.replica_id >= 0:
        s.require(Op.CLUSTER_ACTION, RT.CLUSTER)
    else:
        s.require_all(Op.DESCRIBE, RT.TOPIC, (t.topic for t in r.topics))


def _create_topics(s: Subject, r: admin.CreateTopicsRequest) -> None:
    if not s.allows(Op.CREATE, RT.CLUSTER, CLUSTER_NAME):
        s.require_all(Op.CREATE, RT.TOPIC, (t.name for t in r.topics))


def _config_resource(s: Subject, op: AclOperation, rtype: int, name: str) -> None:
    if rtype == admin.RESOURCE_TOPIC:
        s.require(op, RT.TOPIC, name)
    else:
        s.require(op, RT.CLUSTER)


def _configs(op: AclOperation) -> Check:
    def check(s: Subject, r: Any) -> None:
        for resource in r.resources:
            _config_resource(s, op, resource.resource_type, resource.resource_name)

    return check


def _init_producer_id(s: Subject, r: producer_id.InitProducerIdRequest) -> None:
    if r.transactional_id is not None:
        s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.transactional_id)
    elif not (
        s.allows(Op.IDEMPOTENT_WRITE, RT.CLUSTER, CLUSTER_NAME)
        or s.authorizer.authorize_any(s.principal, s.host, Op.WRITE, RT.TOPIC)
    ):
        raise ClusterAuthorizationError(
            denial(s.principal, s.host, Op.IDEMPOTENT_WRITE, RT.CLUSTER, CLUSTER_NAME)
            + " (an idempotent producer also may with Write on any topic)"
        )


def _offset_commit(s: Subject, r: group_offsets.OffsetCommitRequest) -> None:
    s.require(Op.READ, RT.GROUP, r.group_id)
    s.require_all(Op.READ, RT.TOPIC, (t.name for t in r.topics))


def _find_coordinator(s: Subject, r: groups.FindCoordinatorRequest) -> None:
    # A half-message producer group is named as a TransactionalId by the half-message APIs
    # (see the module docstring), so finding its broker needs Describe on that.
    if r.key_type in (groups.COORDINATOR_TRANSACTION, groups.COORDINATOR_HALF_MESSAGES):
        s.require(Op.DESCRIBE, RT.TRANSACTIONAL_ID, r.key)
    else:
        s.require(Op.DESCRIBE, RT.GROUP, r.key)


def _group_read(s: Subject, r: Any) -> None:
    s.require(Op.READ, RT.GROUP, r.group_id)


def _txn_write(s: Subject, r: Any) -> None:
    s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.transactional_id)


def _add_partitions(s: Subject, r: transactions.AddPartitionsToTxnRequest) -> None:
    s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.transactional_id)
    s.require_all(Op.WRITE, RT.TOPIC, (t.name for t in r.topics))


def _add_offsets(s: Subject, r: transactions.AddOffsetsToTxnRequest) -> None:
    s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.transactional_id)
    s.require(Op.READ, RT.GROUP, r.group_id)


def _txn_offset_commit(s: Subject, r: transactions.TxnOffsetCommitRequest) -> None:
    s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.transactional_id)
    s.require(Op.READ, RT.GROUP, r.group_id)
    s.require_all(Op.READ, RT.TOPIC, (t.name for t in r.topics))


def _prepare(s: Subject, r: transactions.PrepareTxnRequest) -> None:
    s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.transactional_id)
    if r.owner_prefix:
        s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.owner_prefix)


def _decision(s: Subject, r: Any) -> None:
    s.require_all(Op.WRITE, RT.TRANSACTIONAL_ID, (t.transactional_id for t in r.transactions))
    if r.scope is not None:
        s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.scope.prefix)


def _send_half(s: Subject, r: half_messages.SendHalfMessageRequest) -> None:
    s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.producer_group)
    s.require(Op.WRITE, RT.TOPIC, r.topic)


def _list_half(s: Subject, r: half_messages.ListHalfMessagesRequest) -> None:
    if r.producer_group:
        s.require(Op.DESCRIBE, RT.TRANSACTIONAL_ID, r.producer_group)
    else:
        s.require(Op.DESCRIBE, RT.CLUSTER)


def _cluster(op: AclOperation) -> Check:
    def check(s: Subject, _r: Any) -> None:
        s.require(op, RT.CLUSTER)

    return check


CHECKS: Final[dict[ApiKey, Check]] = {
    ApiKey.LIST_OFFSETS: lambda s, r: s.require_all(
        Op.DESCRIBE, RT.TOPIC, (t.name for t in r.topics)
    ),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: lambda s, r: s.require_all(Op.DELETE, RT.TOPIC, r.topic_names),
    ApiKey.DELETE_RECORDS: lambda s, r: s.require_all(
        Op.DELETE, RT.TOPIC, (t.name for t in r.topics)
    ),
    ApiKey.CREATE_PARTITIONS: lambda s, r: s.require_all(
        Op.ALTER, RT.TOPIC, (t.name for t in r.topics)
    ),
    ApiKey.DESCRIBE_CONFIGS: _configs(Op.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS),
    # SCRAM users, as Kafka's: Describe / Alter on the Cluster.
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(Op.DESCRIBE),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _cluster(Op.ALTER),
    # Client quotas, as Kafka's: DescribeConfigs / AlterConfigs on the Cluster.
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster(Op.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CLIENT_QUOTAS: _cluster(Op.ALTER_CONFIGS),
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _group_read,
    ApiKey.HEARTBEAT: _group_read,
    ApiKey.LEAVE_GROUP: _group_read,
    ApiKey.SYNC_GROUP: _group_read,
    ApiKey.DESCRIBE_GROUPS: lambda s, r: s.require_all(Op.DESCRIBE, RT.GROUP, r.groups),
    ApiKey.DELETE_GROUPS: lambda s, r: s.require_all(Op.DELETE, RT.GROUP, r.groups_names),
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions,
    ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets,
    ApiKey.END_TXN: _txn_write,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: lambda s, r: s.require_all(
        Op.DESCRIBE, RT.TRANSACTIONAL_ID, r.transactional_ids
    ),
    ApiKey.PREPARE_TXN: _prepare,
    ApiKey.COMMIT_PREPARED_TXNS: _decision,
    ApiKey.ABORT_TXNS: _decision,
    ApiKey.DESCRIBE_TXN_OWNER: lambda s, r: s.require(Op.DESCRIBE, RT.TRANSACTIONAL_ID, r.owner),
    ApiKey.OWNER_HEARTBEAT: lambda s, r: s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.owner_prefix),
    ApiKey.SEND_HALF_MESSAGE: _send_half,
    ApiKey.END_HALF_MESSAGE: lambda s, r: s.require(
        Op.WRITE, RT.TRANSACTIONAL_ID, r.producer_group
    ),
    ApiKey.CHECK_HALF_MESSAGES: lambda s, r: s.require(
        Op.WRITE, RT.TRANSACTIONAL_ID, r.producer_group
    ),
    ApiKey.LIST_HALF_MESSAGES: _list_half,
    ApiKey.ELECT_LEADERS: _cluster(Op.ALTER),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster(Op.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster(Op.DESCRIBE),
    # Kafka's rule: the sizes of every replica on a broker need Describe on the cluster.
    ApiKey.DESCRIBE_LOG_DIRS: _cluster(Op.DESCRIBE),
    ApiKey.DESCRIBE_ACLS: _cluster(Op.DESCRIBE),
    ApiKey.CREATE_ACLS: _cluster(Op.ALTER),
    ApiKey.DELETE_ACLS: _cluster(Op.ALTER),
}


# ---------------------------------------------------------------------------------------------
# APIs that answer only what the principal may see


async def _metadata(
    s: Subject,
    handler: Handler,
    ctx: RequestContext,
    r: metadata.MetadataRequest,
    records: memoryview,
) -> Response | None:
    refused: list[str] = []
    if r.topics is not None:
        allowed = [t for t in r.topics if s.allows(Op.DESCRIBE, RT.TOPIC, t)]
        refused = [t for t in r.topics if t not in allowed]
        # Auto-creation needs Create on the Cluster, or on every topic named.
        create = r.allow_auto_topic_creation and (
            s.allows(Op.CREATE, RT.CLUSTER, CLUSTER_NAME)
            or all(s.allows(Op.CREATE, RT.TOPIC, t) for t in allowed)
        )
        r = metadata.MetadataRequest(allowed, create)
    response = await handler(ctx, r, records)
    if response is None or not isinstance(response.body, metadata.MetadataResponse):
        return response
    body = response.body
    if r.topics is None:
        body.topics = [t for t in body.topics if s.allows(Op.DESCRIBE, RT.TOPIC, t.name)]
    code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    for name in refused:
        message = denial(s.principal, s.host, Op.DESCRIBE, RT.TOPIC, name)
        body.topics.append(metadata.TopicMetadata(code, name, [], error_message=message))
    return response


async def _produce(
    s: Subject,
    handler: Handler,
    ctx: RequestContext,
    r: produce.ProduceRequest,
    records: memoryview,
) -> Response | None:
    """Kafka's Produce: Write on the TransactionalId of a transactional request (refused
    whole), then the partitions of topics the principal may not Write are answered
    TOPIC_AUTHORIZATION_FAILED and the others appended. The response mirrors the request
    entry by entry (``protocol.produce.answers_by_entry``), so the refusals are put back in
    their places. An ``acks=0`` request gets no response: a refusal closes the connection,
    as any failed ``acks=0`` produce does."""
    if r.transactional_id is not None and not s.allows(
        Op.WRITE, RT.TRANSACTIONAL_ID, r.transactional_id
    ):
        if r.acks == 0:
            return Response(produce.ProduceResponse([]), close_connection=True, silent=True)
        s.require(Op.WRITE, RT.TRANSACTIONAL_ID, r.transactional_id)
    refused = {t.name for t in r.topics if not s.allows(Op.WRITE, RT.TOPIC, t.name)}
    if not refused:
        return await handler(ctx, r, records)
    if r.acks == 0:
        return Response(produce.ProduceResponse([]), close_connection=True, silent=True)
    # The records section holds each partition's records in body order: keep the slices
    # of the allowed topics (a copy, only on this mixed path).
    kept: list[memoryview] = []
    allowed: list[produce.ProduceTopic] = []
    position = 0
    for t in r.topics:
        size = sum(p.records_size for p in t.partitions)
        if t.name not in refused:
            kept.append(records[position : position + size])
            allowed.append(t)
        position += size
    answered: list[produce.ProduceTopicResponse] = []
    if allowed:
        response = await handler(
            ctx, msgspec.structs.replace(r, topics=allowed), memoryview(b"".join(kept))
        )
        if response is None or not isinstance(response.body, produce.ProduceResponse):
            return response
        answered = list(response.body.topics)
    code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    merged: list[produce.ProduceTopicResponse] = []
    for t in r.topics:
        if t.name in refused:
            message = denial(s.principal, s.host, Op.WRITE, RT.TOPIC, t.name)
            merged.append(
                produce.ProduceTopicResponse(
                    t.name,
                    [
                        produce.ProducePartitionResponse(p.partition, code, error_message=message)
                        for p in t.partitions
                    ],
                )
            )
        elif answered:
            merged.append(answered.pop(0))
    return Response(produce.ProduceResponse(merged))


async def _fetch(
    s: Subject, handler: Handler, ctx: RequestContext, r: fetch.FetchRequest, records: memoryview
) -> Response | None:
    """Kafka's Fetch: the partitions of topics the principal may not Read are answered
    TOPIC_AUTHORIZATION_FAILED, the others are fetched (a consumer assigned both keeps
    reading what it may). A replica's fetch from a client needs ClusterAction."""
    if r.replica_id >= 0:
        s.require(Op.CLUSTER_ACTION, RT.CLUSTER)
        return await handler(ctx, r, records)
    refused = [t for t in r.topics if not s.allows(Op.READ, RT.TOPIC, t.name)]
    if not refused:
        return await handler(ctx, r, records)
    code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    answers = [
        fetch.FetchTopicResponse(
            t.name,
            [
                fetch.FetchPartitionResponse(
                    p.partition,
                    code,
                    -1,
                    -1,
                    -1,
                    0,
                    error_message=denial(s.principal, s.host, Op.READ, RT.TOPIC, t.name),
                )
                for p in t.partitions
            ],
        )
        for t in refused
    ]
    allowed = [t for t in r.topics if t not in refused]
    if not allowed:
        return Response(fetch.FetchResponse(0, answers))
    response = await handler(ctx, msgspec.structs.replace(r, topics=allowed), records)
    if response is not None and isinstance(response.body, fetch.FetchResponse):
        # After the fetched partitions: they carry no records, so the records section (in
        # body order) is unchanged.
        response.body.topics.extend(answers)
    return response


async def _offset_fetch(
    s: Subject,
    handler: Handler,
    ctx: RequestContext,
    r: group_offsets.OffsetFetchRequest,
    records: memoryview,
) -> Response | None:
    """Describe on the Group, and on each topic named; asked for every topic, the answer
    leaves out the topics the principal may not describe (Kafka's filtering)."""
    s.require(Op.DESCRIBE, RT.GROUP, r.group_id)
    if r.topics is not None:
        s.require_all(Op.DESCRIBE, RT.TOPIC, (t.name for t in r.topics))
        return await handler(ctx, r, records)
    response = await handler(ctx, r, records)
    if response is not None and isinstance(response.body, group_offsets.OffsetFetchResponse):
        body = response.body
        body.topics = [t for t in body.topics if s.allows(Op.DESCRIBE, RT.TOPIC, t.name)]
    return response


async def _list_groups(
    s: Subject, handler: Handler, ctx: RequestContext, r: Any, records: memoryview
) -> Response | None:
    response = await handler(ctx, r, records)
    if (
        response is not None
        and isinstance(response.body, groups.ListGroupsResponse)
        and not s.allows(Op.DESCRIBE, RT.CLUSTER, CLUSTER_NAME)
    ):
        body = response.body
        body.groups = [g for g in body.groups if s.allows(Op.DESCRIBE, RT.GROUP, g.group_id)]
    return response


async def _list_transactions(
    s: Subject, handler: Handler, ctx: RequestContext, r: Any, records: memoryview
) -> Response | None:
    response = await handler(ctx, r, records)
    if response is not None and isinstance(response.body, transactions.ListTransactionsResponse):
        body = response.body
        body.transaction_states = [
            t
            for t in body.transaction_states
            if s.allows(Op.DESCRIBE, RT.TRANSACTIONAL_ID, t.transactional_id)
        ]
    return response


Filter = Callable[[Subject, Handler, RequestContext, Any, memoryview], Any]

FILTERS: Final[dict[ApiKey, Filter]] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.METADATA: _metadata,
    ApiKey.FETCH: _fetch,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.LIST_TRANSACTIONS: _list_transactions,
}


#: The APIs no principal needs an ACL for: ApiVersions (what a client asks first),
#: SaslHandshake and SaslAuthenticate (how a client proves who it is) and AuthenticateBroker
#: (how a broker proves it is one); the inter-broker APIs refuse every connection that is
#: not a broker's themselves (``handlers.inter_broker``), and OpenTokenListener every one
#: that is not the Unix socket's, whose peers the OS proved to be the directory's owner
#: (``handlers.token_listener``).
UNCHECKED: Final[frozenset[ApiKey]] = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.AUTHENTICATE_BROKER,
        ApiKey.OPEN_TOKEN_LISTENER,
    }
    | INTER_BROKER_APIS
)


def _unclassified(key: ApiKey) -> Check:
    """An API this module does not know yet (added without a check): only super users and
    brokers may call it, so that a new API is never open to every principal by omission.
    tests/broker/test_acl_authorizer.py checks that every API is classified."""

    def check(s: Subject, _r: Any) -> None:
        if not s.allows(Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME):
            raise ClusterAuthorizationError(
                denial(s.principal, s.host, Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME)
                + f" ({key.name} has no ACL check of its own yet: only super users may call it)"
            )

    return check


def subject_of(ctx: RequestContext) -> Subject:
    session = ctx.session
    return Subject(ctx.core.authorizer, str(session.principal), session.host)


def authorized_handler(key: ApiKey, handler: Handler) -> Handler:
    """``handler`` behind the check of its API (see the module docstring); an API of
    :data:`UNCHECKED` is returned as is, and one no table names needs ClusterAction."""
    if key in UNCHECKED:
        return handler
    check = CHECKS.get(key) or _unclassified(key)
    filtered = FILTERS.get(key)
    if filtered is not None:
        f = filtered

        async def filtering(
            ctx: RequestContext, request: Any, records: memoryview
        ) -> Response | None:
            if ctx.inter_broker:
                return await handler(ctx, request, records)
            return await f(subject_of(ctx), handler, ctx, request, records)  # type: ignore[no-any-return]

        return filtering
    c = check

    async def checked(ctx: RequestContext, request: Any, records: memoryview) -> Response | None:
        if not ctx.inter_broker:
            c(subject_of(ctx), request)
        return await handler(ctx, request, records)

    return checked
