"""The admin client: topics, partitions, configs, offsets, record deletion, consumer
groups (the group calls are in :mod:`spark_mq.client.group.admin_groups`) and transactions
(:mod:`spark_mq.client.txn_admin`).

Every call is synchronous and raises the typed exception for the broker's error code
(:func:`spark_mq.protocol.error_codes.error_from_code`): creating a topic that exists raises
:class:`~spark_mq.TopicExistsError`, an unknown topic
:class:`~spark_mq.UnknownTopicOrPartitionError`, a bad config value
:class:`~spark_mq.ConfigError`, and so on. Topic changes go to the controller, partition
operations to each partition's leader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from typing import Any

from spark_mq.client import quota_admin, reassignments, scram_users
from spark_mq.client.acl_admin import AclAdmin, AclBinding, AclBindingFilter
from spark_mq.client.cluster import ANY_NODE, Cluster
from spark_mq.client.config import AdminConfig, client_config_props
from spark_mq.client.descriptions import (
    ClusterDescription,
    PartitionDescription,
    TopicDescription,
)
from spark_mq.client.group.admin_groups import (
    GroupAdmin,
    GroupDescription,
    GroupListing,
    PartitionLag,
)
from spark_mq.client.group.offsets import OffsetAndMetadata, OffsetsArg, normalize_offsets
from spark_mq.client.leader_election import election_request, election_results, response_codes
from spark_mq.client.log_dirs import LogDirDescription, describe_log_dirs
from spark_mq.client.offset_lookup import OFFSET_SPECS, list_offsets, resolve_specs
from spark_mq.client.reassignments import PartitionReassignment, ReassignmentPlan
from spark_mq.client.record_deletion import delete_records
from spark_mq.client.records import LATEST, OffsetAndTimestamp, TopicPartition
from spark_mq.client.retry import Again, Retry, sent
from spark_mq.client.transactions import (
    CompletionResult,
    PreparedTransaction,
    TransactionDescription,
    TransactionListing,
)
from spark_mq.client.txn_admin import TransactionAdmin
from spark_mq.client.txn_owner import TxnOwner
from spark_mq.errors import (
    RequestTimedOutError,
    SparkMQError,
    UnknownTopicOrPartitionError,
    UsageError,
)
from spark_mq.protocol import admin as msg
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.fetch import READ_COMMITTED, READ_UNCOMMITTED
from spark_mq.protocol.metadata import MetadataResponse, TopicMetadata
from spark_mq.protocol.quotas import FilterComponent
from spark_mq.protocol.sasl import ScramCredentialInfo

# OFFSET_SPECS moved to client/offset_lookup.py; re-exported for callers that import it here.
__all__ = ["OFFSET_SPECS", "Admin"]


def _as_tp(item: TopicPartition | tuple[str, int]) -> TopicPartition:
    return item if isinstance(item, TopicPartition) else TopicPartition(*item)


def _raise_for(code: int, message: str | None, topic: str | None = None) -> None:
    if code != ErrorCode.NONE:
        raise error_from_code(code, message, topic=topic)


class Admin:
    """Administers topics of a broker (or of the local broker of ``path``).

    Example (assumes the broker can be started for the directory)::

        with Admin(path="/data/mq") as admin:
            admin.create_topic("events", partitions=4, config={"retention.ms": "86400000"})
            print(admin.describe_topic("events").partition_count)
            admin.alter_configs("events", {"retention.ms": None})   # back to the default

    >>> Admin(path="/tmp/mq", bootstrap_servers="localhost:9092")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spark_mq.errors.ConfigError: admin: give exactly one of path=DIR ...
    """

    def __init__(
        self,
        path: str | PathLike[str] | None = None,
        *,
        bootstrap_servers: str | Sequence[str] | None = None,
        config: Mapping[str, object] | None = None,
        **configs: object,
    ) -> None:
        self.config = AdminConfig.from_properties(
            client_config_props(path, bootstrap_servers, config, configs)
        )
        self.config.check_endpoint()
        self._cluster = Cluster(self.config)
        self._groups = GroupAdmin(self._cluster, timeout_ms=self.config.default_api_timeout_ms)
        self._txns = TransactionAdmin(self._cluster, timeout_ms=self.config.default_api_timeout_ms)
        self._acls = AclAdmin(self._request)
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the admin client is closed")

    def _request(self, request: Any, *, controller: bool = False) -> Any:
        self._check_open()
        node = ANY_NODE
        if controller:
            if self._cluster.controller_id == ANY_NODE or self._cluster.update_requested:
                self._cluster.refresh([])
            node = self._cluster.controller_id
        return self._cluster.request(
            request, node_id=node, timeout_ms=self.config.default_api_timeout_ms
        )

    def _retry(self) -> Retry:
        """The deadline of one admin call: ``default.api.timeout.ms``."""
        return Retry.within_ms(
            self.config.default_api_timeout_ms,
            backoff_s=max(self.config.retry_backoff_ms, 1) / 1000,
            max_backoff_s=max(self.config.retry_backoff_max_ms, self.config.retry_backoff_ms)
            / 1000,
            clock=self._cluster.clock,
            sleep=self._cluster.sleep,
        )

    def _controller_request(self, request: Any, codes: Callable[[Any], list[int]]) -> Any:
        """Send ``request`` to the controller, as Kafka's admin client does in a ZooKeeper
        cluster: a broker that is no longer controller (NOT_CONTROLLER) or a lost connection
        refreshes the metadata and tries the new controller, within
        ``default.api.timeout.ms``. ``codes`` gives the error codes of the response."""

        def attempt() -> Any:
            response = sent(lambda: self._request(request, controller=True))
            if isinstance(response, Again):
                self._cluster.request_update()
                return response
            if ErrorCode.NOT_CONTROLLER in codes(response):
                self._cluster.request_update()
                return Again(error_from_code(ErrorCode.NOT_CONTROLLER))
            return response

        def timed_out(last: SparkMQError) -> SparkMQError:
            return RequestTimedOutError(
                f"{type(request).__name__} did not reach the controller within "
                f"default.api.timeout.ms={self.config.default_api_timeout_ms} "
                f"(last error: {last})"
            )

        return self._retry().until(attempt, timed_out)

    # -- topics ---------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, object] | None = None,
    ) -> None:
        """Create a topic; ``config`` holds topic-level keys (``retention.ms``,
        ``cleanup.policy``, ...). ``replication_factor`` None (or -1) takes the brokers'
        ``default.replication.factor``; more than the live brokers is
        InvalidReplicationFactorError. Raises TopicExistsError if it exists. With
        ``path=DIR``, this is the one call that creates DIR's log when it holds none yet;
        every other call raises LogDirectoryNotFoundError for such a path."""
        self._cluster.create_log = True
        configs = {k: str(v) for k, v in (config or {}).items()}
        factor = -1 if replication_factor is None else replication_factor
        request = msg.CreateTopicsRequest(
            [msg.CreatableTopic(name, partitions, factor, configs)],
            timeout_ms=self.config.default_api_timeout_ms,
        )
        response: msg.CreateTopicsResponse = self._controller_request(
            request, lambda r: [t.error_code for t in r.topics]
        )
        for result in response.topics:
            _raise_for(result.error_code, result.error_message, result.name)

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data."""
        request = msg.DeleteTopicsRequest([name], timeout_ms=self.config.default_api_timeout_ms)
        response: msg.DeleteTopicsResponse = self._controller_request(
            request, lambda r: [t.error_code for t in r.responses]
        )
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, result.name)

    def create_partitions(self, name: str, total: int) -> None:
        """Grow ``name`` to ``total`` partitions (never fewer: InvalidPartitionsError)."""
        request = msg.CreatePartitionsRequest(
            [msg.CreatePartitionsTopic(name, total)],
            timeout_ms=self.config.default_api_timeout_ms,
        )
        response: msg.CreatePartitionsResponse = self._controller_request(
            request, lambda r: [t.error_code for t in r.results]
        )
        for result in response.results:
            _raise_for(result.error_code, result.error_message, result.name)

    def alter_partition_reassignments(self, plan: ReassignmentPlan) -> None:
        """Start moving partitions to new replicas (KIP-455): ``plan`` maps each partition
        to its target replicas, the first the preferred leader, or to None to cancel its
        reassignment in progress. Returns once the controller has started them; the move
        goes on in the background (see :meth:`list_partition_reassignments`). A refused
        partition raises its error (InvalidReplicaAssignmentError,
        UnknownTopicOrPartitionError, NoReassignmentInProgressError), naming every refused
        partition; the others were started."""
        request = reassignments.alter_request(plan, self.config.default_api_timeout_ms)
        response = self._controller_request(
            request,
            lambda r: [r.error_code, *(p.error_code for t in r.responses for p in t.partitions)],
        )
        reassignments.raise_for_alter(response)

    def list_partition_reassignments(
        self, partitions: Sequence[TopicPartition | tuple[str, int]] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (of ``partitions``, or all): replicas, adding and
        removing replicas per partition still moving."""
        request = reassignments.list_request(partitions, self.config.default_api_timeout_ms)
        response = self._controller_request(request, lambda r: [r.error_code])
        return reassignments.ongoing(response)

    def describe_log_dirs(
        self, broker_ids: Sequence[int] | None = None, *, timeout_ms: int | None = None
    ) -> dict[int, list[LogDirDescription]]:
        """Each broker's log directory (of ``broker_ids``, or every live broker): the size
        in bytes of every replica it holds and the space of its file system
        (DescribeLogDirs, Kafka's ``describeLogDirs``). ``timeout_ms`` bounds each broker's
        answer (Kafka's ``DescribeLogDirsOptions.timeoutMs``; default
        ``default.api.timeout.ms``)."""
        self._check(None)
        timeout = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return describe_log_dirs(self._cluster, timeout, broker_ids)

    def list_topics(self) -> list[str]:
        """Names of every topic, sorted."""
        response = self._check(self._cluster.refresh(None))
        return sorted(t.name for t in response.topics if t.error_code == ErrorCode.NONE)

    def describe_topic(self, name: str) -> TopicDescription:
        """Per partition the leader (-1: none now), leader epoch, replicas, in-sync replicas
        and offline replicas, and the topic's config overrides. A topic just created whose
        leaders are not elected yet (LEADER_NOT_AVAILABLE) is asked again within
        ``default.api.timeout.ms``; a partition that lost its leader is described as it is
        (leader -1)."""
        topic = self._topic_metadata(name)
        parts = tuple(
            PartitionDescription(
                p.partition,
                p.leader_id,
                p.leader_epoch,
                tuple(p.replicas),
                tuple(p.isr),
                tuple(p.offline_replicas),
            )
            for p in sorted(topic.partitions, key=lambda p: p.partition)
        )
        entries = self._config_entries(name)
        overrides = {e.name: e.value for e in entries if not e.is_default}
        return TopicDescription(
            name, parts, {k: v for k, v in overrides.items() if v}, topic.topic_id
        )

    def describe_cluster(self) -> ClusterDescription:
        """The cluster id, the controller and every live broker (from Metadata)."""
        response: MetadataResponse = self._check(self._cluster.refresh([]))
        brokers = tuple(sorted((b.node_id, b.host, b.port, b.rack) for b in response.brokers))
        return ClusterDescription(response.cluster_id, response.controller_id, brokers)

    def _topic_metadata(self, name: str) -> TopicMetadata:
        retry = self._retry()
        while True:
            response: MetadataResponse = self._check(self._cluster.refresh([name]))
            topic = next((t for t in response.topics if t.name == name), None)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist", topic=name)
            if topic.error_code != ErrorCode.LEADER_NOT_AVAILABLE or not retry.backoff():
                _raise_for(topic.error_code, topic.error_message, name)
                return topic

    def _check(self, response: Any) -> Any:
        if self._closed:
            raise UsageError("the admin client is closed")
        return response

    # -- configs --------------------------------------------------------------------------

    def _config_entries(self, topic: str) -> list[msg.ConfigEntry]:
        request = msg.DescribeConfigsRequest(
            [msg.DescribeConfigsResource(msg.RESOURCE_TOPIC, topic)]
        )
        response: msg.DescribeConfigsResponse = self._request(request)
        entries: list[msg.ConfigEntry] = []
        for result in response.results:
            _raise_for(result.error_code, result.error_message, topic)
            entries.extend(result.configs)
        return entries

    def describe_configs(self, topic: str) -> dict[str, str | None]:
        """Every config key of ``topic`` with its effective value (default or override)."""
        return {e.name: e.value for e in self._config_entries(topic)}

    def alter_configs(self, topic: str, configs: Mapping[str, object | None]) -> None:
        """Set topic config keys; a value of None removes the override (the default applies
        again). Keys not named keep their values."""
        values = {k: None if v is None else str(v) for k, v in configs.items()}
        request = msg.AlterConfigsRequest(
            [msg.AlterConfigsResource(msg.RESOURCE_TOPIC, topic, values)]
        )
        response: msg.AlterConfigsResponse = self._request(request)
        for result in response.results:
            _raise_for(result.error_code, result.error_message, topic)

    # -- SCRAM users (client/scram_users.py) ----------------------------------------------

    def alter_user_scram_credentials(self, alterations: Sequence[scram_users.Alteration]) -> None:
        """Add, change or remove users' SCRAM credentials (Kafka's
        alterUserScramCredentials); the password is salted here and never sent."""
        scram_users.alter_user_scram_credentials(self._request, alterations)

    def describe_user_scram_credentials(
        self, users: Sequence[str] | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        """Each user's SCRAM mechanisms and iteration counts (None: every user)."""
        return scram_users.describe_user_scram_credentials(self._request, users)

    # -- client quotas (client/quota_admin.py) --------------------------------------------

    def describe_client_quotas(
        self, components: Sequence[FilterComponent] = (), *, strict: bool = False
    ) -> dict[quota_admin.ClientQuotaEntity, dict[str, float]]:
        """The quotas of the entities the filter matches (Kafka's describeClientQuotas;
        no components: every entity), e.g. ``[quota_admin.filter_exact("user", "alice")]``."""
        return quota_admin.describe_client_quotas(self._request, components, strict)

    def alter_client_quotas(
        self,
        alterations: Sequence[quota_admin.ClientQuotaAlteration],
        *,
        validate_only: bool = False,
    ) -> None:
        """Set or remove client quotas (Kafka's alterClientQuotas); each entity succeeds or
        fails on its own, and the first failure is raised after all were tried."""
        quota_admin.alter_client_quotas(self._request, alterations, validate_only)

    # -- offsets and records --------------------------------------------------------------

    def list_offsets(
        self,
        specs: Mapping[TopicPartition | tuple[str, int], str | int],
        *,
        isolation_level: str = "read_committed",
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Offsets by spec: ``"earliest"`` (log start), ``"latest"`` (the last stable offset
        with read_committed, else the high watermark), ``"max_timestamp"``, or a timestamp in
        ms (the first offset at or after it; offset -1 when every record is older)."""
        if isolation_level not in ("read_committed", "read_uncommitted"):
            raise UsageError("isolation_level must be read_committed or read_uncommitted")
        resolved = resolve_specs({_as_tp(key): spec for key, spec in specs.items()})
        level = READ_COMMITTED if isolation_level == "read_committed" else READ_UNCOMMITTED
        answers = list_offsets(
            self._cluster,
            resolved,
            isolation_level=level,
            timeout_ms=self.config.default_api_timeout_ms,
        )
        return {tp: OffsetAndTimestamp(o, t) for tp, (o, t) in answers.items()}

    def delete_records(
        self, offsets: Mapping[TopicPartition | tuple[str, int], int]
    ) -> dict[TopicPartition, int]:
        """Delete every record below each offset (-1: up to the high watermark); returns
        each partition's new log start offset (:mod:`spark_mq.client.record_deletion`)."""
        return delete_records(
            self._cluster,
            {_as_tp(k): v for k, v in offsets.items()},
            retry=self._retry(),
            timeout_ms=self.config.default_api_timeout_ms,
            check_open=self._check_open,
        )

    # -- consumer groups ------------------------------------------------------------------

    def list_groups(self, states: Sequence[str] = ()) -> list[GroupListing]:
        """Every consumer group (of every broker), sorted by id; ``states`` (Kafka's names,
        any case: ``Stable``, ``Empty``, ...) keeps only groups in those states."""
        self._check(None)
        return self._groups.list_groups(states)

    def describe_group(self, group_id: str) -> GroupDescription:
        """State, protocol, generation and members (client id, host, decoded assignment) of
        a group; a group that does not exist is reported in state ``Dead``."""
        self._check(None)
        return self._groups.describe_group(group_id)

    def list_group_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition | tuple[str, int]] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The offsets ``group_id`` committed (of ``partitions``, or all), sorted."""
        self._check(None)
        tps = None if partitions is None else [_as_tp(p) for p in partitions]
        return self._groups.list_group_offsets(group_id, tps)

    def alter_group_offsets(self, group_id: str, offsets: OffsetsArg) -> None:
        """Set committed offsets (next offset to read) of a group that has no members
        (Empty, or not existing yet: it is created). Raises NonEmptyGroupError while
        consumers are in the group: stop them first."""
        self._check(None)
        self._groups.alter_group_offsets(group_id, normalize_offsets(offsets))

    def delete_groups(self, group_ids: Sequence[str]) -> None:
        """Delete groups and their committed offsets. Raises GroupIdNotFoundError for a
        group that does not exist and NonEmptyGroupError for one with members (the others
        are deleted)."""
        self._check(None)
        if isinstance(group_ids, str):
            raise UsageError("delete_groups() takes a list of group ids")
        self._groups.delete_groups(group_ids)

    def group_lag(
        self, group_id: str, *, isolation_level: str = "read_committed"
    ) -> dict[TopicPartition, PartitionLag]:
        """For every partition the group committed or has assigned: the committed offset,
        the end offset (the last stable offset with read_committed, else the high watermark)
        and the lag between them, with the member it is assigned to."""
        description = self.describe_group(group_id)
        committed = self.list_group_offsets(group_id)
        owners = description.assignment
        tps = sorted(set(committed) | set(owners))
        topics = sorted({tp.topic for tp in tps})
        if topics:
            self._cluster.refresh(topics)
        existing = [
            tp for tp in tps if tp.partition < (self._cluster.partition_count(tp.topic) or 0)
        ]
        ends = (
            self.list_offsets(dict.fromkeys(existing, LATEST), isolation_level=isolation_level)
            if existing
            else {}
        )
        out: dict[TopicPartition, PartitionLag] = {}
        for tp in tps:
            found = committed.get(tp)
            end = ends[tp].offset if tp in ends else -1
            offset = None if found is None else found.offset
            lag = None if offset is None or end < 0 else max(end - offset, 0)
            out[tp] = PartitionLag(offset, end, lag, owners.get(tp))
        return out

    # -- transactions ---------------------------------------------------------------------

    def complete_prepared_transactions(
        self,
        transactions: Sequence[PreparedTransaction],
        *,
        commit: bool = True,
        owner: str | None = None,
        sequence: int = -1,
        abort_prefix: str | None = None,
        close_owner: bool = False,
        instance: str | None = None,
    ) -> CompletionResult:
        """Commit (or, with ``commit=False``, abort) prepared transactions as one decision,
        the second phase of a two-phase commit. ``owner`` and ``sequence`` (>= 0, increasing
        per owner) tag a commit: the tag and the decision are one durable append, and asking
        again with a sequence already recorded aborts ``transactions`` instead and reports
        ``already_committed``, so a replay never doubles output. ``abort_prefix`` also aborts
        every other open or prepared transaction whose id starts with it (leftovers of
        earlier attempts). ``close_owner`` (with ``owner`` and ``abort_prefix``) closes that
        prefix for good, for an owner that decides once: an id under it can no longer start,
        grow or prepare a transaction (ProducerFencedError), so a task that outlived its job
        leaves nothing hanging. ``instance`` (with ``owner``) names which instance of the
        owner decides, for an owner whose sequences start again with a new instance (the
        Spark sink passes its streaming query's id): the owner's first commit naming one
        binds the owner to it, and a decision from another instance raises
        OwnerInstanceConflictError with nothing decided. A commit is all or nothing: if any
        transaction cannot commit (fenced, not prepared, unknown), nothing is committed and
        its typed error is raised.

        Example (handles from ``Producer.prepare_transaction()`` in other processes)::

            result = admin.complete_prepared_transactions(handles, owner="sink-1", sequence=7)
            assert result.committed or result.already_committed
        """
        self._check(None)
        return self._txns.complete(
            transactions,
            commit=commit,
            owner=owner,
            sequence=sequence,
            abort_prefix=abort_prefix,
            close_owner=close_owner,
            instance=instance,
        )

    def txn_owner(
        self, owner: str, *, instance: str | None = None, prefix: str | None = None
    ) -> TxnOwner:
        """The decisions of one two-phase owner, one method per intent (commit a batch,
        abort, close its scope): see :class:`~spark_mq.client.txn_owner.TxnOwner`.
        ``prefix`` (default ``owner + "/"``) is the owner's scope of transactional ids;
        ``instance`` names which instance of the owner decides."""
        self._check(None)
        return TxnOwner(self._txns, owner, instance=instance, prefix=prefix)

    def last_committed_sequence(self, owner: str) -> int:
        """The newest sequence committed for ``owner`` (-1: none)."""
        self._check(None)
        return self._txns.last_committed_sequence(owner)

    def owner_heartbeat(self, owner_prefix: str) -> None:
        """Tell the coordinator that a writer of the two-phase owner whose transactional ids
        start with ``owner_prefix`` is still running, so that transactions prepared with
        that ``owner_prefix`` (``Producer.prepare_transaction(owner_prefix=)``) are not
        aborted for a quiet owner. Send one well within ``transaction.timeout.ms`` while a
        writer works without other requests to the coordinator (the Spark sink's tasks do)."""
        self._check(None)
        self._txns.owner_heartbeat(owner_prefix)

    def list_transactions(
        self,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        duration_ms: int = -1,
        prefix: str | None = None,
    ) -> list[TransactionListing]:
        """Transactional ids known to the coordinators, sorted. Filters: ``states`` (Kafka's
        names, any case: Ongoing, Prepared, ...), ``producer_ids``, ``duration_ms`` (only
        transactions open longer than that: the hanging ones) and an id ``prefix``."""
        self._check(None)
        return self._txns.list_transactions(states, producer_ids, duration_ms, prefix)

    def describe_transactions(
        self, transactional_ids: Sequence[str]
    ) -> list[TransactionDescription]:
        """State, producer id and epoch, timeout, start time and partitions of each id;
        raises TransactionalIdNotFoundError for an id the coordinator does not know."""
        self._check(None)
        return self._txns.describe_transactions(transactional_ids)

    def abort_transaction(self, transactional_id: str) -> None:
        """End a hanging transaction (Ongoing or Prepared) with an abort, releasing the last
        stable offset of its partitions; its producer, if still alive, is fenced from that
        transaction. Raises InvalidTxnStateError when there is nothing to abort."""
        self._check(None)
        self._txns.abort(transactional_id)

    # -- leaders --------------------------------------------------------------------------

    def elect_leaders(
        self,
        election_type: str = "preferred",
        partitions: Sequence[TopicPartition | tuple[str, int]] | None = None,
    ) -> dict[TopicPartition, SparkMQError | None]:
        """Ask the controller for leader elections (Kafka's ``electLeaders``): 'preferred'
        moves each partition's leadership to its preferred replica (the first of its
        assignment) if that replica is in sync; 'unclean' elects a leader for partitions
        that have none, out-of-sync replicas allowed (records only the old leader had are
        lost). ``partitions`` None means every partition. Returns each partition's outcome:
        None if elected, else the error (ElectionNotNeededError: it already had that
        leader; PreferredLeaderNotAvailableError; EligibleLeadersNotAvailableError)."""
        request = election_request(
            election_type, partitions, timeout_ms=self.config.default_api_timeout_ms
        )
        return election_results(self._controller_request(request, response_codes))

    # -- lifecycle ------------------------------------------------------------------------

    # -- ACLs (client/acl_admin.py) -------------------------------------------------------

    def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Add ACLs (Kafka's Admin.createAcls); see :class:`~spark_mq.client.acl_admin.AclAdmin`."""
        self._acls.create_acls(bindings)

    def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches (all by default)."""
        return self._acls.describe_acls(acl_filter)

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """Remove the ACLs the filters match; returns those removed."""
        return self._acls.delete_acls(filters)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._cluster.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
