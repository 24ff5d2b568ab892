"""Topic administration: CreateTopics (19), DeleteTopics (20), CreatePartitions (37),
DescribeConfigs (32), AlterConfigs (33)."""

from __future__ import annotations

import msgspec

#: ``resource_type`` values of the config APIs, Kafka's numbering.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


class CreatableTopic(msgspec.Struct, array_like=True):
    """``num_partitions`` / ``replication_factor`` of -1 take the broker's defaults
    (``num.partitions``, ``default.replication.factor``); ``configs`` are topic-level keys
    such as ``retention.ms`` or ``cleanup.policy``."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = {}


class CreateTopicsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    topics: list[CreatableTopic]
    timeout_ms: int = 30_000
    validate_only: bool = False


class CreatableTopicResult(msgspec.Struct, array_like=True):
    name: str
    error_code: int
    error_message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1


class CreateTopicsResponse(msgspec.Struct, array_like=True):
    topics: list[CreatableTopicResult]
    throttle_time_ms: int = 0


class DeleteTopicsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    topic_names: list[str]
    timeout_ms: int = 30_000


class DeletableTopicResult(msgspec.Struct, array_like=True):
    name: str
    error_code: int
    error_message: str | None = None


class DeleteTopicsResponse(msgspec.Struct, array_like=True):
    responses: list[DeletableTopicResult]
    throttle_time_ms: int = 0


class CreatePartitionsTopic(msgspec.Struct, array_like=True):
    """``count`` is the new total number of partitions; it may only grow."""

    name: str
    count: int


class CreatePartitionsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    topics: list[CreatePartitionsTopic]
    timeout_ms: int = 30_000
    validate_only: bool = False


class CreatePartitionsTopicResult(msgspec.Struct, array_like=True):
    name: str
    error_code: int
    error_message: str | None = None


class CreatePartitionsResponse(msgspec.Struct, array_like=True):
    results: list[CreatePartitionsTopicResult]
    throttle_time_ms: int = 0


class DescribeConfigsResource(msgspec.Struct, array_like=True):
    """``configuration_keys`` None asks for every key."""

    resource_type: int
    resource_name: str
    configuration_keys: list[str] | None = None


class DescribeConfigsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    resources: list[DescribeConfigsResource]
    include_documentation: bool = False


class ConfigEntry(msgspec.Struct, array_like=True):
    """``is_default`` is true when the value is the default, not set on the resource."""

    name: str
    value: str | None
    read_only: bool = False
    is_default: bool = True
    is_sensitive: bool = False
    documentation: str | None = None


class DescribeConfigsResult(msgspec.Struct, array_like=True):
    error_code: int
    resource_type: int
    resource_name: str
    configs: list[ConfigEntry]
    error_message: str | None = None


class DescribeConfigsResponse(msgspec.Struct, array_like=True):
    results: list[DescribeConfigsResult]
    throttle_time_ms: int = 0


class AlterConfigsResource(msgspec.Struct, array_like=True):
    """Set each key to its value; a value of None removes the override so the default
    applies again. Keys not named keep their values (the semantics of Kafka's
    IncrementalAlterConfigs SET/DELETE, which is what users expect of ``alter``)."""

    resource_type: int
    resource_name: str
    configs: dict[str, str | None]


class AlterConfigsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    resources: list[AlterConfigsResource]
    validate_only: bool = False


class AlterConfigsResult(msgspec.Struct, array_like=True):
    error_code: int
    resource_type: int
    resource_name: str
    error_message: str | None = None


class AlterConfigsResponse(msgspec.Struct, array_like=True):
    results: list[AlterConfigsResult]
    throttle_time_ms: int = 0


# ---------------------------------------------------------------------------------------------
# The answers to requests that failed as a whole: every topic or resource with the code.


def create_topics_error(
    request: CreateTopicsRequest, code: int, message: str
) -> CreateTopicsResponse:
    return CreateTopicsResponse(
        [CreatableTopicResult(t.name, code, message) for t in request.topics]
    )


def delete_topics_error(
    request: DeleteTopicsRequest, code: int, message: str
) -> DeleteTopicsResponse:
    return DeleteTopicsResponse(
        [DeletableTopicResult(name, code, message) for name in request.topic_names]
    )


def create_partitions_error(
    request: CreatePartitionsRequest, code: int, message: str
) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(
        [CreatePartitionsTopicResult(t.name, code, message) for t in request.topics]
    )


def describe_configs_error(
    request: DescribeConfigsRequest, code: int, message: str
) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(
        [
            DescribeConfigsResult(code, r.resource_type, r.resource_name, [], message)
            for r in request.resources
        ]
    )


def alter_configs_error(
    request: AlterConfigsRequest, code: int, message: str
) -> AlterConfigsResponse:
    return AlterConfigsResponse(
        [
            AlterConfigsResult(code, r.resource_type, r.resource_name, message)
            for r in request.resources
        ]
    )
