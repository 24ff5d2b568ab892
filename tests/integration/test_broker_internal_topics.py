"""Internal topics against a real broker: clients may not produce to, delete, truncate, grow
or un-compact ``__consumer_offsets`` and ``__transaction_state``, while the group coordinator
keeps writing ``__consumer_offsets`` through its own path."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from spark_mq.broker.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from spark_mq.client import Admin
from spark_mq.errors import ConfigError, InvalidTopicError
from spark_mq.protocol import admin, offsets
from spark_mq.protocol import group_offsets as go
from spark_mq.protocol.error_codes import ErrorCode as E
from spark_mq.storage.record_batch import encode_batch

OVERRIDES = {"offsets.topic.num.partitions": "3"}


def batch(values: list[bytes]) -> bytes:
    return encode_batch(pa.array(values, pa.binary()))


def commit(conn: Any, group: str, offset: int) -> int:
    """A commit from outside the group protocol (generation -1): creates the group and, on
    the first one, ``__consumer_offsets``."""
    request = go.OffsetCommitRequest(
        group, [go.OffsetCommitTopic("t", [go.OffsetCommitPartition(0, offset)])], -1, ""
    )
    return int(conn.call(request).body.topics[0].partitions[0].error_code)


def fetched(conn: Any, group: str) -> int:
    body = conn.call(go.OffsetFetchRequest(group)).body
    return int(body.topics[0].partitions[0].committed_offset)


def test_clients_cannot_change_internal_topics(start_broker: Any) -> None:
    broker = start_broker(overrides=OVERRIDES)
    with broker.connect() as conn:
        conn.create_topic("t")
        assert commit(conn, "g", 5) == 0
        end_before = [conn.list_offset(OFFSETS_TOPIC, p, -1).offset for p in range(3)]

        # Produce: refused, for existing and missing internal topics alike, and nothing is
        # auto-created; an ordinary topic whose name starts with "__" is not internal.
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            answer = conn.produce(topic, 0, batch([b"forged"]))
            assert answer.error_code == E.INVALID_TOPIC_EXCEPTION, answer
            assert "internal topic" in answer.error_message
        assert [conn.list_offset(OFFSETS_TOPIC, p, -1).offset for p in range(3)] == end_before
        missing = conn.metadata([TRANSACTION_STATE_TOPIC], auto_create=True).topics[0]
        assert missing.error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        assert conn.produce("__mine", 0, batch([b"ok"])).error_code == 0

        # DeleteTopics: refused, the topic stays; the other topic of the request is deleted.
        deleted = conn.call(admin.DeleteTopicsRequest([OFFSETS_TOPIC, "__mine"])).body.responses
        assert [r.error_code for r in deleted] == [E.INVALID_TOPIC_EXCEPTION, 0]
        assert OFFSETS_TOPIC in deleted[0].error_message
        assert [t.name for t in conn.metadata([OFFSETS_TOPIC]).topics] == [OFFSETS_TOPIC]

        # DeleteRecords: refused.
        request = offsets.DeleteRecordsRequest(
            [offsets.DeleteRecordsTopic(OFFSETS_TOPIC, [offsets.DeleteRecordsPartition(0, -1)])]
        )
        answer = conn.call(request).body.topics[0].partitions[0]
        assert answer.error_code == E.INVALID_TOPIC_EXCEPTION

        # CreatePartitions: refused, also when only validating; the count stays.
        for validate_only in (True, False):
            grow = admin.CreatePartitionsRequest(
                [admin.CreatePartitionsTopic(OFFSETS_TOPIC, 10)], validate_only=validate_only
            )
            assert conn.call(grow).body.results[0].error_code == E.INVALID_TOPIC_EXCEPTION
        assert len(conn.metadata([OFFSETS_TOPIC]).topics[0].partitions) == 3

        # AlterConfigs: nothing that would delete its data (cleanup.policy stays compact
        # alone, retention only -1); other keys may be tuned.
        def alter(configs: dict[str, str | None], validate_only: bool = False) -> Any:
            resource = admin.AlterConfigsResource(admin.RESOURCE_TOPIC, OFFSETS_TOPIC, configs)
            request = admin.AlterConfigsRequest([resource], validate_only)
            return conn.call(request).body.results[0]

        def described() -> dict[str, str]:
            resource = admin.DescribeConfigsResource(admin.RESOURCE_TOPIC, OFFSETS_TOPIC)
            body = conn.call(admin.DescribeConfigsRequest([resource])).body
            return {e.name: e.value for e in body.results[0].configs}

        before = described()
        for validate_only in (True, False):
            # Issue 26: this was accepted, and retention then deleted every group's offsets.
            refused = alter(
                {"cleanup.policy": "compact,delete", "retention.ms": "1"}, validate_only
            )
            assert refused.error_code == E.INVALID_CONFIG
            assert "compact alone" in refused.error_message
            assert "offsets.retention.minutes" in refused.error_message
            for bad in (
                {"cleanup.policy": "delete"},
                {"cleanup_policy": None},  # falls back to the broker's default, delete
                {"cleanup.policy": "compact,delete", "segment.bytes": "1048576"},
                {"retention.ms": "1"},
                {"retention_bytes": "1000000"},
            ):
                assert alter(bad, validate_only).error_code == E.INVALID_CONFIG, bad
        assert described() == before
        assert alter({"retention.ms": "1"}).error_message.startswith(
            "internal topic '__consumer_offsets' takes retention.ms only as -1"
        )
        tuned = {"segment.bytes": "1048576", "retention.ms": "-1", "delete.retention.ms": "1000"}
        assert alter({**tuned, "cleanup.policy": "compact"}).error_code == 0
        assert alter({"retention.ms": None}).error_code == 0
        after = described()
        assert (after["segment.bytes"], after["cleanup.policy"]) == ("1048576", "compact")

        # CreateTopics of a missing internal topic takes the same rules (the broker's default
        # cleanup.policy is delete, so it must be given); an existing one already exists.
        def create(name: str, configs: dict[str, str]) -> Any:
            topic = admin.CreatableTopic(name, 1, -1, configs)
            return conn.call(admin.CreateTopicsRequest([topic])).body.topics[0]

        for configs in (
            {},
            {"cleanup.policy": "compact,delete", "retention.ms": "1"},
            {"cleanup.policy": "compact", "retention.bytes": "1"},
        ):
            assert create(TRANSACTION_STATE_TOPIC, configs).error_code == E.INVALID_CONFIG
        assert conn.metadata([TRANSACTION_STATE_TOPIC]).topics[0].error_code != 0
        assert create(OFFSETS_TOPIC, {}).error_code == E.TOPIC_ALREADY_EXISTS

        # The coordinator still writes through its own path.
        assert commit(conn, "g", 9) == 0
        assert fetched(conn, "g") == 9


def test_admin_raises_typed_errors_for_internal_topics(start_broker: Any) -> None:
    broker = start_broker(overrides=OVERRIDES)
    with broker.connect() as conn:
        conn.create_topic("t")
        assert commit(conn, "g", 1) == 0
    with Admin(bootstrap_servers=str(broker.address)) as client:
        with pytest.raises(InvalidTopicError, match="internal topic"):
            client.delete_topic(OFFSETS_TOPIC)
        with pytest.raises(InvalidTopicError, match="internal topic"):
            client.create_partitions(OFFSETS_TOPIC, 6)
        with pytest.raises(ConfigError, match="compact"):
            client.alter_configs(OFFSETS_TOPIC, {"cleanup.policy": "delete"})
        assert OFFSETS_TOPIC in client.list_topics()
