"""Request handlers, one module per API family, and the table that dispatches to them.

An exception that escapes a handler is answered once, by the dispatcher
(:func:`~spark_mq.broker.handlers.errors.answer`), with the API's error response; handlers
catch only where the parts of a request fail apart, mapping a part's exception to its
``error_code`` and ``error_message`` (:func:`~spark_mq.broker.handlers.errors.error_of`).
ApiVersions advertises exactly the APIs of this table (an API the protocol registry knows
but the broker does not serve yet is answered with UNSUPPORTED_VERSION). The handlers of the
inter-broker APIs (``protocol.api.INTER_BROKER_APIS``) refuse clients with
CLUSTER_AUTHORIZATION_FAILED (:mod:`~spark_mq.broker.handlers.inter_broker`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spark_mq.broker.context import Handler
from spark_mq.broker.handlers.acls import (
    handle_create_acls,
    handle_delete_acls,
    handle_describe_acls,
)
from spark_mq.broker.handlers.alter_partition import REFUSAL_HINT as ALTER_PARTITION_HINT
from spark_mq.broker.handlers.alter_partition import handle_alter_partition
from spark_mq.broker.handlers.authenticate_broker import handle_authenticate_broker
from spark_mq.broker.handlers.client_quotas import (
    handle_alter_client_quotas,
    handle_describe_client_quotas,
)
from spark_mq.broker.handlers.configs import handle_alter_configs, handle_describe_configs
from spark_mq.broker.handlers.controlled_shutdown import (
    REFUSAL_HINT as CONTROLLED_SHUTDOWN_HINT,
)
from spark_mq.broker.handlers.controlled_shutdown import handle_controlled_shutdown
from spark_mq.broker.handlers.controller_requests import (
    REFUSAL_HINT,
    handle_leader_and_isr,
    handle_stop_replica,
)
from spark_mq.broker.handlers.elect_leaders import handle_elect_leaders
from spark_mq.broker.handlers.fetch import handle_fetch
from spark_mq.broker.handlers.group_offsets import handle_offset_commit, handle_offset_fetch
from spark_mq.broker.handlers.groups import (
    handle_delete_groups,
    handle_describe_groups,
    handle_find_coordinator,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_sync_group,
)
from spark_mq.broker.handlers.half_messages import (
    handle_check_half_messages,
    handle_end_half_message,
    handle_list_half_messages,
    handle_send_half_message,
)
from spark_mq.broker.handlers.inter_broker import guard
from spark_mq.broker.handlers.log_dirs import handle_describe_log_dirs
from spark_mq.broker.handlers.metadata import handle_api_versions, handle_metadata
from spark_mq.broker.handlers.offsets import handle_delete_records, handle_list_offsets
from spark_mq.broker.handlers.produce import handle_produce
from spark_mq.broker.handlers.producer_id import handle_init_producer_id
from spark_mq.broker.handlers.reassignments import (
    handle_alter_partition_reassignments,
    handle_list_partition_reassignments,
)
from spark_mq.broker.handlers.replication import handle_offset_for_leader_epoch
from spark_mq.broker.handlers.sasl import handle_sasl_authenticate, handle_sasl_handshake
from spark_mq.broker.handlers.scram_users import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from spark_mq.broker.handlers.token_listener import handle_open_token_listener
from spark_mq.broker.handlers.topics import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
)
from spark_mq.broker.handlers.transactions import (
    handle_abort_txns,
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_commit_prepared_txns,
    handle_describe_transactions,
    handle_describe_txn_owner,
    handle_end_txn,
    handle_list_transactions,
    handle_owner_heartbeat,
    handle_prepare_txn,
    handle_txn_offset_commit,
    handle_write_txn_markers,
    refuse_write_txn_markers,
)
from spark_mq.broker.handlers.txn_participants import (
    TWO_PHASE_HINT,
    handle_check_prepared_txns,
    handle_decide_txns,
    handle_query_txn_decisions,
)
from spark_mq.broker.handlers.update_metadata import CLIENT_HINT, handle_update_metadata
from spark_mq.protocol.api import ApiKey
from spark_mq.protocol.controller import (
    alter_partition_error,
    controlled_shutdown_error,
    leader_and_isr_error,
    stop_replica_error,
    update_metadata_error,
)
from spark_mq.protocol.txn_participants import (
    check_prepared_txns_error,
    decide_txns_error,
    query_txn_decisions_error,
)

_SERVED: Final[Mapping[ApiKey, Handler]] = {
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
    ApiKey.OPEN_TOKEN_LISTENER: handle_open_token_listener,
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
    ApiKey.PREPARE_TXN: handle_prepare_txn,
    ApiKey.COMMIT_PREPARED_TXNS: handle_commit_prepared_txns,
    ApiKey.DESCRIBE_TXN_OWNER: handle_describe_txn_owner,
    ApiKey.OWNER_HEARTBEAT: handle_owner_heartbeat,
    ApiKey.ABORT_TXNS: handle_abort_txns,
    ApiKey.SEND_HALF_MESSAGE: handle_send_half_message,
    ApiKey.END_HALF_MESSAGE: handle_end_half_message,
    ApiKey.CHECK_HALF_MESSAGES: handle_check_half_messages,
    ApiKey.LIST_HALF_MESSAGES: handle_list_half_messages,
    ApiKey.AUTHENTICATE_BROKER: handle_authenticate_broker,
    ApiKey.UPDATE_METADATA: handle_update_metadata,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    ApiKey.LEADER_AND_ISR: handle_leader_and_isr,
    ApiKey.STOP_REPLICA: handle_stop_replica,
    ApiKey.ALTER_PARTITION: handle_alter_partition,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
    ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    ApiKey.CONTROLLED_SHUTDOWN: handle_controlled_shutdown,
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.SASL_HANDSHAKE: handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
    ApiKey.CHECK_PREPARED_TXNS: handle_check_prepared_txns,
    ApiKey.DECIDE_TXNS: handle_decide_txns,
    ApiKey.QUERY_TXN_DECISIONS: handle_query_txn_decisions,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: handle_alter_client_quotas,
}

HANDLERS: Final[Mapping[ApiKey, Handler]] = guard(
    _SERVED,
    {
        ApiKey.WRITE_TXN_MARKERS: (
            refuse_write_txn_markers,
            "A client ends its transaction with EndTxn (Producer.commit_transaction() or "
            "abort_transaction()); the transaction coordinator writes the markers.",
        ),
        ApiKey.LEADER_AND_ISR: (leader_and_isr_error, REFUSAL_HINT),
        ApiKey.STOP_REPLICA: (stop_replica_error, REFUSAL_HINT),
        ApiKey.UPDATE_METADATA: (update_metadata_error, CLIENT_HINT),
        ApiKey.ALTER_PARTITION: (alter_partition_error, ALTER_PARTITION_HINT),
        ApiKey.CONTROLLED_SHUTDOWN: (controlled_shutdown_error, CONTROLLED_SHUTDOWN_HINT),
        ApiKey.CHECK_PREPARED_TXNS: (check_prepared_txns_error, TWO_PHASE_HINT),
        ApiKey.DECIDE_TXNS: (decide_txns_error, TWO_PHASE_HINT),
        ApiKey.QUERY_TXN_DECISIONS: (query_txn_decisions_error, TWO_PHASE_HINT),
    },
)

__all__ = ["HANDLERS"]
