"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37).

Every change runs on the executor (the log manager fsyncs each step) and topics are handled
one at a time in request order, each with its own result. ``validate_only`` runs every check
of a real change and changes nothing. Internal topics (``__consumer_offsets``,
``__transaction_state``) cannot be deleted nor given more partitions: INVALID_TOPIC_EXCEPTION
(:mod:`~spark_mq.broker.internal_topics`). One may be created before its coordinator does it,
with the configs an internal topic may take (``cleanup.policy=compact`` among them, since the
broker's default is ``delete``): INVALID_CONFIG otherwise.

A cluster broker (``core.cluster_admin`` set) does all three through ZooKeeper and the
controller (:class:`~spark_mq.broker.core.ClusterTopicAdmin`): it writes the request, then,
as Kafka's CreateTopics, DeleteTopics and CreatePartitions do, waits up to the request's
``timeout_ms`` for the controller to carry it out (every new partition has a leader; the
deleted topic is gone). A request not carried out in time is answered REQUEST_TIMED_OUT for
that topic: it was written and the controller carries it out later. ``timeout_ms`` 0 does
not wait.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import error_of
from spark_mq.broker.internal_topics import (
    check_internal_config,
    check_not_internal,
    is_internal,
)
from spark_mq.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    RequestTimedOutError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from spark_mq.protocol.admin import (
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.topic_metadata import MAX_PARTITIONS_PER_TOPIC
from spark_mq.storage.topic_names import validate_topic_name

if TYPE_CHECKING:
    from spark_mq.broker.core import BrokerCore, ClusterTopicAdmin


def _duplicates(names: list[str]) -> set[str]:
    return {name for name, n in Counter(names).items() if n > 1}


def _duplicate_error(name: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"topic {name!r} appears more than once in the request; name it once"
    )


def _check_partition_count(name: str, count: int, current: int | None) -> None:
    if not 1 <= count <= MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitionsError(
            f"topic {name!r}: {count} partitions requested; a topic has 1 to "
            f"{MAX_PARTITIONS_PER_TOPIC}",
            topic=name,
            current=current,
            requested=count,
        )


def _create_one(
    core: BrokerCore, topic: CreatableTopic, validate_only: bool
) -> CreatableTopicResult:
    broker = core.config.broker
    partitions = broker.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    factor = (
        broker.default_replication_factor
        if topic.replication_factor == -1
        else topic.replication_factor
    )
    validate_topic_name(topic.name)
    if factor != 1:
        raise InvalidReplicationFactorError(
            f"topic {topic.name!r}: replication factor {factor} is not possible on a single "
            "broker; use 1 (or -1 for default.replication.factor)"
        )
    _check_partition_count(topic.name, partitions, None)
    logs: LogManager = core.logs
    if is_internal(topic.name) and not logs.topic_exists(topic.name):
        # Normally its coordinator creates it on first use; one created by hand must not be
        # made to lose its data either.
        effective = logs.default_config.with_overrides(topic.configs)
        check_internal_config(topic.name, topic.configs, effective)
    if validate_only:
        logs.default_config.with_overrides(topic.configs)
        if logs.topic_exists(topic.name):
            raise TopicExistsError(f"topic {topic.name!r} already exists", topic=topic.name)
    else:
        logs.create_topic(topic.name, partitions, topic.configs)
    return CreatableTopicResult(topic.name, 0, None, partitions, factor)


def _create_in_cluster(
    core: BrokerCore, admin: ClusterTopicAdmin, topic: CreatableTopic, validate_only: bool
) -> CreatableTopicResult:
    broker = core.config.broker
    partitions = broker.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    factor = None if topic.replication_factor == -1 else topic.replication_factor
    if is_internal(topic.name) and not admin.topic_exists(topic.name):
        effective = core.logs.default_config.with_overrides(topic.configs)
        check_internal_config(topic.name, topic.configs, effective)
    assignment = admin.create_topic(
        topic.name, partitions, factor, topic.configs, validate_only=validate_only
    )
    return CreatableTopicResult(topic.name, 0, None, partitions, len(assignment[0]))


def _deadline(timeout_ms: int) -> float:
    return time.monotonic() + max(0, timeout_ms) / 1000


async def _controller_done(core: BrokerCore, done: Callable[[], bool], deadline: float) -> bool:
    """Poll ``done`` (a ZooKeeper read, on the executor) every 50 ms until it is true or the
    deadline passes; whether it became true. Between polls neither the event loop nor an
    executor thread is held (Kafka parks such a request in a purgatory)."""
    while not await core.run_blocking(done):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def _known_here(core: BrokerCore, topic: str, deadline: float) -> bool:
    """Wait until this broker's metadata cache knows ``topic`` with a leader for each
    partition (the controller's UpdateMetadata follows its ZooKeeper write), as Kafka's
    CreateTopics answers only then: a client that asks this broker's Metadata right after
    sees the topic. Whether it did before the deadline."""
    cache = core.metadata_cache

    def known() -> bool:
        partitions = cache.snapshot.partitions(topic)
        return bool(partitions) and all(p.leader >= 0 for p in partitions.values())

    while not known():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def _timed_out(what: str, timeout_ms: int) -> RequestTimedOutError:
    return RequestTimedOutError(
        f"{what} was written to ZooKeeper but the controller did not carry it out within "
        f"the request's timeout_ms={timeout_ms}; it will, once a controller is elected and "
        "the brokers it needs are live: describe the topic to see when"
    )


def _create_topics(core: BrokerCore, request: CreateTopicsRequest) -> CreateTopicsResponse:
    dups = _duplicates([t.name for t in request.topics])
    results = []
    admin = core.cluster_admin
    for topic in request.topics:
        try:
            if topic.name in dups:
                raise _duplicate_error(topic.name)
            if admin is None:
                results.append(_create_one(core, topic, request.validate_only))
                continue
            results.append(_create_in_cluster(core, admin, topic, request.validate_only))
        except Exception as exc:
            # A boundary: the topics done before this one stay done and are
            # answered so; a bug here is this topic's UNKNOWN_SERVER_ERROR, logged with
            # its traceback by error_of.
            code, message = error_of(exc, f"create topic {topic.name!r}")
            results.append(CreatableTopicResult(topic.name, code, message))
    return CreateTopicsResponse(results)


async def handle_create_topics(
    ctx: RequestContext, request: CreateTopicsRequest, _: memoryview
) -> Response:
    core = ctx.core
    deadline = _deadline(request.timeout_ms)
    response = await core.run_blocking(_create_topics, core, request)
    admin = core.cluster_admin
    if admin is None or request.validate_only or request.timeout_ms <= 0:
        return Response(response)
    for i, result in enumerate(response.topics):
        elected = functools.partial(admin.leaders_elected, result.name)
        if result.error_code == 0 and not (
            await _controller_done(core, elected, deadline)
            and await _known_here(core, result.name, deadline)
        ):
            code, message = error_of(
                _timed_out(f"topic {result.name!r}", request.timeout_ms),
                f"create topic {result.name!r}",
            )
            response.topics[i] = CreatableTopicResult(result.name, code, message)
    return Response(response)


async def handle_delete_topics(
    ctx: RequestContext, request: DeleteTopicsRequest, _: memoryview
) -> Response:
    core = ctx.core
    deadline = _deadline(request.timeout_ms)
    dups = _duplicates(request.topic_names)
    results = []
    for name in request.topic_names:
        try:
            if name in dups:
                raise _duplicate_error(name)
            check_not_internal(name, "delete")
            admin = core.cluster_admin
            if admin is not None:
                await core.run_blocking(admin.delete_topic, name)
                deleted = functools.partial(admin.topic_gone, name)
                if request.timeout_ms > 0 and not await _controller_done(core, deleted, deadline):
                    raise _timed_out(f"deletion of topic {name!r}", request.timeout_ms)
                results.append(DeletableTopicResult(name, 0))
                continue
            if not core.logs.topic_exists(name):
                raise UnknownTopicOrPartitionError(
                    f"topic {name!r} does not exist, so it cannot be deleted", topic=name
                )
            gone = await core.run_blocking(core.replicas.delete_topic, name)
            # Fetches waiting on the topic read again and report it unknown.
            core.replicas.notify(gone)
            results.append(DeletableTopicResult(name, 0))
        except Exception as exc:
            # A boundary: the topics done before this one stay done and are
            # answered so; a bug here is this topic's UNKNOWN_SERVER_ERROR, logged with
            # its traceback by error_of.
            code, message = error_of(exc, f"delete topic {name!r}")
            results.append(DeletableTopicResult(name, code, message))
    return Response(DeleteTopicsResponse(results))


def _create_partitions(
    core: BrokerCore, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    dups = _duplicates([t.name for t in request.topics])
    results = []
    for topic in request.topics:
        try:
            if topic.name in dups:
                raise _duplicate_error(topic.name)
            check_not_internal(topic.name, "add partitions to")
            admin = core.cluster_admin
            if admin is not None:
                admin.create_partitions(
                    topic.name, topic.count, validate_only=request.validate_only
                )
            elif request.validate_only:
                current = core.logs.describe_topic(topic.name).partition_count
                if topic.count <= current:
                    raise InvalidPartitionsError(
                        f"topic {topic.name!r} has {current} partitions; partitions can only be "
                        f"added, so request a total above {current}",
                        topic=topic.name,
                        current=current,
                        requested=topic.count,
                    )
                _check_partition_count(topic.name, topic.count, current)
            else:
                core.logs.add_partitions(topic.name, topic.count)
            results.append(CreatePartitionsTopicResult(topic.name, 0))
        except Exception as exc:
            # A boundary: the topics done before this one stay done and are
            # answered so; a bug here is this topic's UNKNOWN_SERVER_ERROR, logged with
            # its traceback by error_of.
            code, message = error_of(exc, f"create partitions of {topic.name!r}")
            results.append(CreatePartitionsTopicResult(topic.name, code, message))
    return CreatePartitionsResponse(results)


async def handle_create_partitions(
    ctx: RequestContext, request: CreatePartitionsRequest, _: memoryview
) -> Response:
    core = ctx.core
    deadline = _deadline(request.timeout_ms)
    response = await core.run_blocking(_create_partitions, core, request)
    admin = core.cluster_admin
    if admin is None or request.validate_only or request.timeout_ms <= 0:
        return Response(response)
    counts = {t.name: t.count for t in request.topics}
    for i, result in enumerate(response.results):
        elected = functools.partial(admin.leaders_elected, result.name, range(counts[result.name]))
        if result.error_code == 0 and not await _controller_done(core, elected, deadline):
            code, message = error_of(
                _timed_out(f"adding partitions to topic {result.name!r}", request.timeout_ms),
                f"create partitions of {result.name!r}",
            )
            response.results[i] = CreatePartitionsTopicResult(result.name, code, message)
    return Response(response)
