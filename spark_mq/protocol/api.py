"""The API registry: every API key with its request and response types and versions,
and the functions that turn messages into frames and back.

>>> from spark_mq.protocol.metadata import MetadataRequest
>>> head, body = encode_request(MetadataRequest(topics=["t"]), correlation_id=7)
>>> from spark_mq.protocol.framing import SIZE, decode_request
>>> frame = decode_request((head + body)[SIZE.size:])
>>> request, records = decode_request_body(frame)
>>> request.topics, frame.header.correlation_id
(['t'], 7)
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import msgspec

from spark_mq.errors import CorruptFrameError, UnsupportedVersionError
from spark_mq.protocol import (
    acls,
    admin,
    api_versions,
    controller,
    elect_leaders,
    fetch,
    group_offsets,
    groups,
    half_messages,
    log_dirs,
    metadata,
    offsets,
    produce,
    producer_id,
    quotas,
    reassignment,
    replication,
    sasl,
    token_listener,
    transactions,
    txn_participants,
)
from spark_mq.protocol.framing import (
    RequestFrame,
    RequestHeader,
    ResponseFrame,
    encode_request_head,
    encode_response_head,
)


class ApiKey(enum.IntEnum):
    """Kafka's API keys for the APIs spark_mq implements."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    #: spark_mq's own: two-phase commit for an external coordinator (KIP-939 in spirit).
    PREPARE_TXN = 1000
    COMMIT_PREPARED_TXNS = 1001
    DESCRIBE_TXN_OWNER = 1002
    OWNER_HEARTBEAT = 1003
    ABORT_TXNS = 1004
    #: spark_mq's own: RocketMQ-style half messages with check-back (docs/half_messages.md).
    SEND_HALF_MESSAGE = 1005
    END_HALF_MESSAGE = 1006
    CHECK_HALF_MESSAGES = 1007
    LIST_HALF_MESSAGES = 1008
    # The cluster: the controller's requests to brokers, a broker's to the controller, and
    # how a broker authenticates to another (protocol/controller.py).
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    ALTER_PARTITION = 56
    AUTHENTICATE_BROKER = 1009
    #: spark_mq's own: two-phase decisions across transaction coordinators
    #: (protocol/txn_participants.py).
    CHECK_PREPARED_TXNS = 1010
    DECIDE_TXNS = 1011
    QUERY_TXN_DECISIONS = 1012
    # Replication (protocol/replication.py).
    OFFSET_FOR_LEADER_EPOCH = 23
    # Partition reassignment, KIP-455 (protocol/reassignment.py).
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    # What a broker holds on disk (protocol/log_dirs.py).
    DESCRIBE_LOG_DIRS = 35
    # SASL authentication and SCRAM users (protocol/sasl.py).
    SASL_HANDSHAKE = 17
    SASL_AUTHENTICATE = 36
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    # Authorization: access control lists (protocol/acls.py).
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    # Client quotas, KIP-546 (protocol/quotas.py).
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    #: spark_mq's own: the embedded broker's TCP listener for Spark executors
    #: (protocol/token_listener.py).
    OPEN_TOKEN_LISTENER = 1015


#: The APIs only a broker of the cluster may send (Kafka: the ones that need the CLUSTER
#: ClusterAction permission: LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown,
#: WriteTxnMarkers). A broker answers a client's request for one of them with
#: CLUSTER_AUTHORIZATION_FAILED (31) and changes nothing. A connection is a broker's once
#: it has authenticated with AuthenticateBroker (the cluster's inter-broker secret, see
#: protocol/controller.py); on a single node no connection is, so only the broker's own
#: in-process callers use them.
INTER_BROKER_APIS: Final[frozenset[ApiKey]] = frozenset(
    {
        ApiKey.WRITE_TXN_MARKERS,
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
        ApiKey.CHECK_PREPARED_TXNS,
        ApiKey.DECIDE_TXNS,
        ApiKey.QUERY_TXN_DECISIONS,
    }
)


class FrameErrorBody(msgspec.Struct, array_like=True):
    """The body of a response whose ``frame_error`` is not 0."""

    error_message: str


#: What decoding a body can raise. For a MessagePack string that is not valid UTF-8 msgspec
#: up to 0.22 raises UnicodeDecodeError, 0.23 DecodeError; all of them mean a corrupt frame.
_BODY_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)

Req = TypeVar("Req", bound=msgspec.Struct)
Resp = TypeVar("Resp", bound=msgspec.Struct)


@dataclass(frozen=True)
class ApiSpec(Generic[Req, Resp]):
    """One API: its key, message types and the versions implemented."""

    key: ApiKey
    request_type: type[Req]
    response_type: type[Resp]
    #: The answer to a request of this API that failed as a whole, with an error code and
    #: message for every part of it that has one (the broker's dispatcher sends it when a
    #: handler raises); None when the response cannot carry the error (a Metadata request
    #: for all topics), which the broker then sends as a frame error.
    error_response: Callable[[Req, int, str], Resp | None]
    min_version: int = 0
    max_version: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "_req_decoder", msgspec.msgpack.Decoder(self.request_type))
        object.__setattr__(self, "_resp_decoder", msgspec.msgpack.Decoder(self.response_type))

    def decode_request(self, body: memoryview | bytes) -> Req:
        try:
            return self._req_decoder.decode(body)  # type: ignore[attr-defined,no-any-return]
        except _BODY_ERRORS as exc:
            raise CorruptFrameError(f"{self.key.name} request body: {exc}") from exc

    def decode_response(self, body: memoryview | bytes) -> Resp:
        try:
            return self._resp_decoder.decode(body)  # type: ignore[attr-defined,no-any-return]
        except _BODY_ERRORS as exc:
            raise CorruptFrameError(f"{self.key.name} response body: {exc}") from exc


APIS: dict[ApiKey, ApiSpec[Any, Any]] = {
    spec.key: spec
    for spec in (
        ApiSpec(
            ApiKey.PRODUCE, produce.ProduceRequest, produce.ProduceResponse, produce.produce_error
        ),
        ApiSpec(ApiKey.FETCH, fetch.FetchRequest, fetch.FetchResponse, fetch.fetch_error),
        ApiSpec(
            ApiKey.LIST_OFFSETS,
            offsets.ListOffsetsRequest,
            offsets.ListOffsetsResponse,
            offsets.list_offsets_error,
        ),
        ApiSpec(
            ApiKey.METADATA,
            metadata.MetadataRequest,
            metadata.MetadataResponse,
            metadata.metadata_error,
        ),
        ApiSpec(
            ApiKey.API_VERSIONS,
            api_versions.ApiVersionsRequest,
            api_versions.ApiVersionsResponse,
            api_versions.api_versions_error,
        ),
        ApiSpec(
            ApiKey.CREATE_TOPICS,
            admin.CreateTopicsRequest,
            admin.CreateTopicsResponse,
            admin.create_topics_error,
        ),
        ApiSpec(
            ApiKey.DELETE_TOPICS,
            admin.DeleteTopicsRequest,
            admin.DeleteTopicsResponse,
            admin.delete_topics_error,
        ),
        ApiSpec(
            ApiKey.DELETE_RECORDS,
            offsets.DeleteRecordsRequest,
            offsets.DeleteRecordsResponse,
            offsets.delete_records_error,
        ),
        ApiSpec(
            ApiKey.INIT_PRODUCER_ID,
            producer_id.InitProducerIdRequest,
            producer_id.InitProducerIdResponse,
            producer_id.init_producer_id_error,
        ),
        ApiSpec(
            ApiKey.DESCRIBE_CONFIGS,
            admin.DescribeConfigsRequest,
            admin.DescribeConfigsResponse,
            admin.describe_configs_error,
        ),
        ApiSpec(
            ApiKey.ALTER_CONFIGS,
            admin.AlterConfigsRequest,
            admin.AlterConfigsResponse,
            admin.alter_configs_error,
        ),
        ApiSpec(
            ApiKey.CREATE_PARTITIONS,
            admin.CreatePartitionsRequest,
            admin.CreatePartitionsResponse,
            admin.create_partitions_error,
        ),
        ApiSpec(
            ApiKey.OFFSET_COMMIT,
            group_offsets.OffsetCommitRequest,
            group_offsets.OffsetCommitResponse,
            group_offsets.offset_commit_error,
        ),
        ApiSpec(
            ApiKey.OFFSET_FETCH,
            group_offsets.OffsetFetchRequest,
            group_offsets.OffsetFetchResponse,
            group_offsets.offset_fetch_error,
        ),
        ApiSpec(
            ApiKey.FIND_COORDINATOR,
            groups.FindCoordinatorRequest,
            groups.FindCoordinatorResponse,
            groups.find_coordinator_error,
        ),
        ApiSpec(
            ApiKey.JOIN_GROUP,
            groups.JoinGroupRequest,
            groups.JoinGroupResponse,
            groups.join_group_error,
        ),
        ApiSpec(
            ApiKey.HEARTBEAT,
            groups.HeartbeatRequest,
            groups.HeartbeatResponse,
            groups.heartbeat_error,
        ),
        ApiSpec(
            ApiKey.LEAVE_GROUP,
            groups.LeaveGroupRequest,
            groups.LeaveGroupResponse,
            groups.leave_group_error,
        ),
        ApiSpec(
            ApiKey.SYNC_GROUP,
            groups.SyncGroupRequest,
            groups.SyncGroupResponse,
            groups.sync_group_error,
        ),
        ApiSpec(
            ApiKey.DESCRIBE_GROUPS,
            groups.DescribeGroupsRequest,
            groups.DescribeGroupsResponse,
            groups.describe_groups_error,
        ),
        ApiSpec(
            ApiKey.LIST_GROUPS,
            groups.ListGroupsRequest,
            groups.ListGroupsResponse,
            groups.list_groups_error,
        ),
        ApiSpec(
            ApiKey.ELECT_LEADERS,
            elect_leaders.ElectLeadersRequest,
            elect_leaders.ElectLeadersResponse,
            elect_leaders.elect_leaders_error,
        ),
        ApiSpec(
            ApiKey.DELETE_GROUPS,
            groups.DeleteGroupsRequest,
            groups.DeleteGroupsResponse,
            groups.delete_groups_error,
        ),
        ApiSpec(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            transactions.AddPartitionsToTxnRequest,
            transactions.AddPartitionsToTxnResponse,
            transactions.add_partitions_to_txn_error,
        ),
        ApiSpec(
            ApiKey.ADD_OFFSETS_TO_TXN,
            transactions.AddOffsetsToTxnRequest,
            transactions.AddOffsetsToTxnResponse,
            transactions.add_offsets_to_txn_error,
        ),
        ApiSpec(
            ApiKey.END_TXN,
            transactions.EndTxnRequest,
            transactions.EndTxnResponse,
            transactions.end_txn_error,
        ),
        ApiSpec(
            ApiKey.WRITE_TXN_MARKERS,
            transactions.WriteTxnMarkersRequest,
            transactions.WriteTxnMarkersResponse,
            transactions.write_txn_markers_error,
        ),
        ApiSpec(
            ApiKey.TXN_OFFSET_COMMIT,
            transactions.TxnOffsetCommitRequest,
            transactions.TxnOffsetCommitResponse,
            transactions.txn_offset_commit_error,
        ),
        ApiSpec(
            ApiKey.DESCRIBE_TRANSACTIONS,
            transactions.DescribeTransactionsRequest,
            transactions.DescribeTransactionsResponse,
            transactions.describe_transactions_error,
        ),
        ApiSpec(
            ApiKey.LIST_TRANSACTIONS,
            transactions.ListTransactionsRequest,
            transactions.ListTransactionsResponse,
            transactions.list_transactions_error,
        ),
        # v1 adds owner_prefix.
        ApiSpec(
            ApiKey.PREPARE_TXN,
            transactions.PrepareTxnRequest,
            transactions.PrepareTxnResponse,
            transactions.prepare_txn_error,
            max_version=1,
        ),
        # v0-1 were CompletePreparedTxns, one request with flags for every intent; v2 is
        # the commit alone (aborts moved to AbortTxns), a body the old versions cannot read.
        ApiSpec(
            ApiKey.COMMIT_PREPARED_TXNS,
            transactions.CommitPreparedTxnsRequest,
            transactions.CommitPreparedTxnsResponse,
            transactions.commit_prepared_txns_error,
            min_version=2,
            max_version=2,
        ),
        ApiSpec(
            ApiKey.DESCRIBE_TXN_OWNER,
            transactions.OwnerSequenceRequest,
            transactions.OwnerSequenceResponse,
            transactions.owner_sequence_error,
        ),
        ApiSpec(
            ApiKey.OWNER_HEARTBEAT,
            transactions.OwnerHeartbeatRequest,
            transactions.OwnerHeartbeatResponse,
            transactions.owner_heartbeat_error,
        ),
        ApiSpec(
            ApiKey.ABORT_TXNS,
            transactions.AbortTxnsRequest,
            transactions.AbortTxnsResponse,
            transactions.abort_txns_error,
        ),
        ApiSpec(
            ApiKey.CHECK_PREPARED_TXNS,
            txn_participants.CheckPreparedTxnsRequest,
            txn_participants.CheckPreparedTxnsResponse,
            txn_participants.check_prepared_txns_error,
        ),
        ApiSpec(
            ApiKey.DECIDE_TXNS,
            txn_participants.DecideTxnsRequest,
            txn_participants.DecideTxnsResponse,
            txn_participants.decide_txns_error,
        ),
        ApiSpec(
            ApiKey.QUERY_TXN_DECISIONS,
            txn_participants.QueryTxnDecisionsRequest,
            txn_participants.QueryTxnDecisionsResponse,
            txn_participants.query_txn_decisions_error,
        ),
        ApiSpec(
            ApiKey.SEND_HALF_MESSAGE,
            half_messages.SendHalfMessageRequest,
            half_messages.SendHalfMessageResponse,
            half_messages.send_half_message_error,
        ),
        ApiSpec(
            ApiKey.END_HALF_MESSAGE,
            half_messages.EndHalfMessageRequest,
            half_messages.EndHalfMessageResponse,
            half_messages.end_half_message_error,
        ),
        ApiSpec(
            ApiKey.CHECK_HALF_MESSAGES,
            half_messages.CheckHalfMessagesRequest,
            half_messages.CheckHalfMessagesResponse,
            half_messages.check_half_messages_error,
        ),
        ApiSpec(
            ApiKey.LIST_HALF_MESSAGES,
            half_messages.ListHalfMessagesRequest,
            half_messages.ListHalfMessagesResponse,
            half_messages.list_half_messages_error,
        ),
        ApiSpec(
            ApiKey.LEADER_AND_ISR,
            controller.LeaderAndIsrRequest,
            controller.LeaderAndIsrResponse,
            controller.leader_and_isr_error,
        ),
        ApiSpec(
            ApiKey.STOP_REPLICA,
            controller.StopReplicaRequest,
            controller.StopReplicaResponse,
            controller.stop_replica_error,
        ),
        ApiSpec(
            ApiKey.UPDATE_METADATA,
            controller.UpdateMetadataRequest,
            controller.UpdateMetadataResponse,
            controller.update_metadata_error,
        ),
        ApiSpec(
            ApiKey.CONTROLLED_SHUTDOWN,
            controller.ControlledShutdownRequest,
            controller.ControlledShutdownResponse,
            controller.controlled_shutdown_error,
        ),
        ApiSpec(
            ApiKey.ALTER_PARTITION,
            controller.AlterPartitionRequest,
            controller.AlterPartitionResponse,
            controller.alter_partition_error,
        ),
        ApiSpec(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            replication.OffsetForLeaderEpochRequest,
            replication.OffsetForLeaderEpochResponse,
            replication.offset_for_leader_epoch_error,
        ),
        ApiSpec(
            ApiKey.AUTHENTICATE_BROKER,
            controller.AuthenticateBrokerRequest,
            controller.AuthenticateBrokerResponse,
            controller.authenticate_broker_error,
        ),
        ApiSpec(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            reassignment.AlterPartitionReassignmentsRequest,
            reassignment.AlterPartitionReassignmentsResponse,
            reassignment.alter_partition_reassignments_error,
        ),
        ApiSpec(
            ApiKey.LIST_PARTITION_REASSIGNMENTS,
            reassignment.ListPartitionReassignmentsRequest,
            reassignment.ListPartitionReassignmentsResponse,
            reassignment.list_partition_reassignments_error,
        ),
        ApiSpec(
            ApiKey.DESCRIBE_LOG_DIRS,
            log_dirs.DescribeLogDirsRequest,
            log_dirs.DescribeLogDirsResponse,
            log_dirs.describe_log_dirs_error,
        ),
        ApiSpec(
            ApiKey.SASL_HANDSHAKE,
            sasl.SaslHandshakeRequest,
            sasl.SaslHandshakeResponse,
            sasl.sasl_handshake_error,
        ),
        ApiSpec(
            ApiKey.SASL_AUTHENTICATE,
            sasl.SaslAuthenticateRequest,
            sasl.SaslAuthenticateResponse,
            sasl.sasl_authenticate_error,
        ),
        ApiSpec(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            sasl.DescribeUserScramCredentialsRequest,
            sasl.DescribeUserScramCredentialsResponse,
            sasl.describe_user_scram_credentials_error,
        ),
        ApiSpec(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            sasl.AlterUserScramCredentialsRequest,
            sasl.AlterUserScramCredentialsResponse,
            sasl.alter_user_scram_credentials_error,
        ),
        # Authorization (protocol/acls.py).
        ApiSpec(
            ApiKey.DESCRIBE_ACLS,
            acls.DescribeAclsRequest,
            acls.DescribeAclsResponse,
            acls.describe_acls_error,
        ),
        ApiSpec(
            ApiKey.CREATE_ACLS,
            acls.CreateAclsRequest,
            acls.CreateAclsResponse,
            acls.create_acls_error,
        ),
        ApiSpec(
            ApiKey.DELETE_ACLS,
            acls.DeleteAclsRequest,
            acls.DeleteAclsResponse,
            acls.delete_acls_error,
        ),
        # Client quotas (protocol/quotas.py).
        ApiSpec(
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            quotas.DescribeClientQuotasRequest,
            quotas.DescribeClientQuotasResponse,
            quotas.describe_client_quotas_error,
        ),
        ApiSpec(
            ApiKey.ALTER_CLIENT_QUOTAS,
            quotas.AlterClientQuotasRequest,
            quotas.AlterClientQuotasResponse,
            quotas.alter_client_quotas_error,
        ),
        # The embedded broker's TCP listener for Spark executors (protocol/token_listener.py).
        ApiSpec(
            ApiKey.OPEN_TOKEN_LISTENER,
            token_listener.OpenTokenListenerRequest,
            token_listener.OpenTokenListenerResponse,
            token_listener.open_token_listener_error,
        ),
    )
}

_SPEC_BY_REQUEST_TYPE: dict[type[msgspec.Struct], ApiSpec[Any, Any]] = {
    spec.request_type: spec for spec in APIS.values()
}
_ENCODER = msgspec.msgpack.Encoder()
_FRAME_ERROR_DECODER = msgspec.msgpack.Decoder(FrameErrorBody)


def spec_for_request(request: msgspec.Struct) -> ApiSpec[Any, Any]:
    """The API a request message belongs to."""
    try:
        return _SPEC_BY_REQUEST_TYPE[type(request)]
    except KeyError:
        raise TypeError(f"{type(request).__name__} is not a request type") from None


def spec_for(api_key: int, api_version: int) -> ApiSpec[Any, Any]:
    """The API for a request header, or UnsupportedVersionError."""
    try:
        spec = APIS[ApiKey(api_key)]
    except ValueError:
        raise UnsupportedVersionError(f"unknown API key {api_key}") from None
    if not spec.min_version <= api_version <= spec.max_version:
        raise UnsupportedVersionError(
            f"{spec.key.name} version {api_version} is not supported "
            f"(this broker implements {spec.min_version}..{spec.max_version})"
        )
    return spec


def encode_request(
    request: msgspec.Struct,
    *,
    correlation_id: int,
    client_id: str | None = None,
    records_len: int = 0,
    api_version: int | None = None,
) -> tuple[bytes, bytes]:
    """Encode a request: returns (head, body). The caller sends head, body, then the
    ``records_len`` bytes of record batches the body announces."""
    spec = spec_for_request(request)
    body = _ENCODER.encode(request)
    version = spec.max_version if api_version is None else api_version
    head = encode_request_head(
        RequestHeader(spec.key, version, correlation_id, client_id), len(body), records_len
    )
    return head, body


def decode_request_body(frame: RequestFrame) -> tuple[Any, memoryview]:
    """Decode a request frame's body into its request type; returns (request, records)."""
    spec = spec_for(frame.header.api_key, frame.header.api_version)
    return spec.decode_request(frame.body), frame.records


def encode_response(
    response: msgspec.Struct, *, correlation_id: int, records_len: int = 0
) -> tuple[bytes, bytes]:
    """Encode a response: returns (head, body); the records follow."""
    body = _ENCODER.encode(response)
    return encode_response_head(correlation_id, len(body), records_len), body


def encode_frame_error(correlation_id: int, error_code: int, message: str) -> bytes:
    """A whole response frame reporting that a request could not be parsed."""
    body = _ENCODER.encode(FrameErrorBody(message))
    return encode_response_head(correlation_id, len(body), 0, error_code) + body


def decode_frame_error(frame: ResponseFrame) -> FrameErrorBody:
    """The body of a response frame with a non-zero ``frame_error``."""
    try:
        return _FRAME_ERROR_DECODER.decode(frame.body)
    except _BODY_ERRORS as exc:
        raise CorruptFrameError(f"frame error body: {exc}") from exc
