"""DescribeConfigs (32) and AlterConfigs (33).

Topic resources are described with their effective config (the broker's topic defaults with
the topic's overrides applied; ``is_default`` is false for an override) and altered
incrementally: a key set to a value is set, a key set to None is removed so the default
applies again, other keys keep their values. The broker resource (name ``""`` or the node
id) can be described, read-only: its settings come from ``conf/broker.properties`` and the
command line, and change with a restart.

Internal topics may be altered as in Kafka (an operator tunes ``segment.bytes`` of
``__consumer_offsets``), except what would delete their data: ``cleanup.policy`` must stay
``compact`` alone and ``retention.ms`` / ``retention.bytes`` take only -1
(:func:`~spark_mq.broker.internal_topics.check_internal_config`; INVALID_CONFIG).

A single node answers from its log directory. A cluster broker answers topics from
ZooKeeper, whether it hosts a replica of the topic or not: DescribeConfigs reads
``/config/topics/<t>`` (UNKNOWN_TOPIC_OR_PARTITION without ``/brokers/topics/<t>``) and
applies it over this broker's topic defaults; AlterConfigs validates exactly as a single node
does, then writes ``/config/topics/<t>`` with a change notification, and every broker
hosting a replica applies it (:mod:`spark_mq.broker.zk.config_changes`). Both read
ZooKeeper, so a cluster broker runs them on an executor thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.broker.internal_topics import check_internal_config, is_internal
from spark_mq.errors import ConfigError, CorruptZnodeError, InvalidRequestError
from spark_mq.protocol.admin import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResponse,
    AlterConfigsResult,
    ConfigEntry,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from spark_mq.storage.log_config import LogConfig

if TYPE_CHECKING:
    from spark_mq.broker.core import BrokerCore


def _check_broker_name(core: BrokerCore, name: str) -> None:
    if name not in ("", str(core.node_id)):
        raise InvalidRequestError(
            f"broker resource {name!r} is not this broker; use '' or {core.node_id!s}"
        )


def _entries(
    values: dict[str, str],
    explicit: set[str],
    keys: list[str] | None,
    *,
    read_only: bool,
    docs: bool,
    doc_of: Mapping[str, str | None],
) -> list[ConfigEntry]:
    wanted = sorted(values) if keys is None else [k for k in keys if k in values]
    return [
        ConfigEntry(
            name=key,
            value=values[key],
            read_only=read_only,
            is_default=key not in explicit,
            documentation=doc_of.get(key) if docs else None,
        )
        for key in wanted
    ]


def _topic_config(core: BrokerCore, name: str) -> tuple[LogConfig, Mapping[str, str]]:
    """The effective config of topic ``name`` and its overrides: from the log directory on a
    single node, from ZooKeeper over this broker's defaults on a cluster broker."""
    membership = core.membership
    if membership is None:
        info = core.logs.describe_topic(name)
        return info.config, info.config_overrides
    # Imported here: a single-node broker never loads kazoo.
    from spark_mq.broker.zk.config_changes import read_cluster_topic_config  # noqa: PLC0415

    overrides = read_cluster_topic_config(membership.zk, name)
    try:
        return core.logs.default_config.with_overrides(overrides), overrides
    except ConfigError as exc:
        # Written by another tool: the request is fine, the stored config is not.
        path = f"/config/topics/{name}"
        raise CorruptZnodeError(
            f"znode {path} holds overrides this broker cannot take ({exc}); correct the znode",
            path=path,
        ) from exc


def _describe_one(
    core: BrokerCore, resource: DescribeConfigsResource, docs: bool
) -> DescribeConfigsResult:
    if resource.resource_type == RESOURCE_TOPIC:
        config, overrides = _topic_config(core, resource.resource_name)
        values = config.to_properties()
        doc_of = {k: str(f.metadata["doc"]) for k, f in LogConfig.settings().items()}
        entries = _entries(
            values,
            set(overrides),
            resource.configuration_keys,
            read_only=False,
            docs=docs,
            doc_of=doc_of,
        )
    elif resource.resource_type == RESOURCE_BROKER:
        _check_broker_name(core, resource.resource_name)
        values = core.config.to_properties()
        explicit = set(core.config.to_properties(only_set=True))
        broker_docs = {k: core.config.documentation(k) for k in values}
        entries = _entries(
            values,
            explicit,
            resource.configuration_keys,
            read_only=True,
            docs=docs,
            doc_of=broker_docs,
        )
    else:
        raise InvalidRequestError(
            f"resource_type {resource.resource_type} is not supported; use {RESOURCE_TOPIC} "
            f"(topic) or {RESOURCE_BROKER} (broker)"
        )
    return DescribeConfigsResult(0, resource.resource_type, resource.resource_name, entries)


def _describe(core: BrokerCore, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results = []
    for resource in request.resources:
        try:
            results.append(_describe_one(core, resource, request.include_documentation))
        except TYPED_ERRORS as exc:
            code, message = error_of(exc, f"describe configs of {resource.resource_name!r}")
            results.append(
                DescribeConfigsResult(
                    code, resource.resource_type, resource.resource_name, [], message
                )
            )
    return DescribeConfigsResponse(results)


async def handle_describe_configs(
    ctx: RequestContext, request: DescribeConfigsRequest, _: memoryview
) -> Response:
    core = ctx.core
    if core.membership is None:
        # A single node reads only memory: answered on the loop, cheaper than a thread hop.
        return Response(_describe(core, request))
    return Response(await core.run_blocking(_describe, core, request))


def merge_overrides(
    defaults: LogConfig, current: Mapping[str, str], changes: Mapping[str, str | None]
) -> tuple[dict[str, str], LogConfig]:
    """The overrides ``current`` with ``changes`` applied (None: the key is removed) as Kafka
    key to string, and the effective config: checked as
    :meth:`~spark_mq.storage.log_manager.LogManager.alter_topic_config` checks them, so an
    unknown key or a bad value is the same ConfigError on a cluster as on a single node."""
    merged: dict[str, object] = dict(current)
    for key, value in changes.items():
        canonical = LogConfig._field_for(key).metadata["key"]
        if value is None:
            merged.pop(canonical, None)
        else:
            merged[canonical] = value
    effective = defaults.with_overrides(merged)
    properties = effective.to_properties()
    return {key: properties[key] for key in merged}, effective


def _alter_in_cluster(
    core: BrokerCore, name: str, changes: Mapping[str, str | None], validate_only: bool
) -> None:
    membership = core.membership
    assert membership is not None
    from spark_mq.broker.zk.config_changes import change_topic_config  # noqa: PLC0415

    def update(current: Mapping[str, str]) -> dict[str, str]:
        overrides, effective = merge_overrides(core.logs.default_config, current, changes)
        check_internal_config(name, changes, effective)
        return overrides

    change_topic_config(membership.zk, name, update, validate_only=validate_only)


def _alter_one(core: BrokerCore, resource: AlterConfigsResource, validate_only: bool) -> None:
    if resource.resource_type == RESOURCE_BROKER:
        _check_broker_name(core, resource.resource_name)
        raise InvalidRequestError(
            "broker settings are read-only while the broker runs: edit conf/broker.properties "
            "(or the --override flags) and restart the broker"
        )
    if resource.resource_type != RESOURCE_TOPIC:
        raise InvalidRequestError(
            f"resource_type {resource.resource_type} is not supported; use {RESOURCE_TOPIC} (topic)"
        )
    name = resource.resource_name
    if core.membership is not None:
        _alter_in_cluster(core, name, resource.configs, validate_only)
        return
    if validate_only or is_internal(name):
        info = core.logs.describe_topic(name)
        merged: dict[str, object] = dict(info.config_overrides)
        for key, value in resource.configs.items():
            canonical = LogConfig._field_for(key).metadata["key"]
            if value is None:
                merged.pop(canonical, None)
            else:
                merged[canonical] = value
        effective = core.logs.default_config.with_overrides(merged)
        check_internal_config(name, resource.configs, effective)
    if not validate_only:
        core.logs.alter_topic_config(name, resource.configs)


def _alter(core: BrokerCore, request: AlterConfigsRequest) -> AlterConfigsResponse:
    results = []
    for resource in request.resources:
        try:
            _alter_one(core, resource, request.validate_only)
            results.append(AlterConfigsResult(0, resource.resource_type, resource.resource_name))
        except Exception as exc:
            # A boundary: the resources done before this one stay done and are
            # answered so; a bug here is this resource's UNKNOWN_SERVER_ERROR, logged with
            # its traceback by error_of.
            code, message = error_of(exc, f"alter configs of {resource.resource_name!r}")
            results.append(
                AlterConfigsResult(code, resource.resource_type, resource.resource_name, message)
            )
    return AlterConfigsResponse(results)


async def handle_alter_configs(
    ctx: RequestContext, request: AlterConfigsRequest, _: memoryview
) -> Response:
    return Response(await ctx.core.run_blocking(_alter, ctx.core, request))
