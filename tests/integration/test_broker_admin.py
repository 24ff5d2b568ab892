"""Metadata, ApiVersions, topic and config administration, offsets and producer ids against a
real broker process."""

from __future__ import annotations

import pyarrow as pa

from spark_mq.broker.handlers import HANDLERS
from spark_mq.protocol import admin, api_versions, offsets, producer_id
from spark_mq.protocol.api import APIS
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.storage.record_batch import encode_batch


def batch(values: list[bytes], timestamps: list[int] | None = None) -> bytes:
    return encode_batch(pa.array(values, pa.binary()), timestamp=timestamps)


def test_api_versions_names_every_api_and_the_epoch(broker):
    with broker.connect() as conn:
        body = conn.call(api_versions.ApiVersionsRequest()).body
    assert body.error_code == 0
    # Exactly the APIs the broker serves: the protocol registry may know more (an API whose
    # handler has not landed yet), and those are not advertised.
    assert {r.api_key for r in body.api_keys} == {int(k) for k in HANDLERS}
    assert set(HANDLERS) <= set(APIS)
    assert body.broker_epoch == broker.epoch >= 1
    assert body.cluster_id


def test_metadata_lists_topics_and_auto_creates(broker):
    with broker.connect(unix=True) as conn:
        conn.create_topic("a", 3)
        body = conn.metadata()
        assert [t.name for t in body.topics] == ["a"]
        assert [p.partition for p in body.topics[0].partitions] == [0, 1, 2]
        p0 = body.topics[0].partitions[0]
        assert (p0.leader_id, p0.replicas, p0.isr, p0.leader_epoch) == (0, [0], [0], broker.epoch)
        # The broker is advertised at the address the request came through.
        assert body.brokers[0].host == str(broker.unix_address)
        missing = conn.metadata(["b"]).topics[0]
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        created = conn.metadata(["b"], auto_create=True).topics[0]
        assert (created.error_code, len(created.partitions)) == (0, 1)
        bad = conn.metadata(["bad name!"], auto_create=True).topics[0]
        assert bad.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_create_topics(broker):
    with broker.connect() as conn:
        request = admin.CreateTopicsRequest(
            [
                admin.CreatableTopic("x", 2, -1, {"retention.ms": "1000"}),
                admin.CreatableTopic("dup", 1),
                admin.CreatableTopic("dup", 1),
                admin.CreatableTopic("rf", 1, 3),
                admin.CreatableTopic("cfg", 1, -1, {"retention.mss": "1"}),
                admin.CreatableTopic("zero", 0),
            ]
        )
        results = {r.name: r for r in conn.call(request).body.topics}
        assert (results["x"].error_code, results["x"].num_partitions) == (0, 2)
        assert results["dup"].error_code == ErrorCode.INVALID_REQUEST
        assert results["rf"].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
        assert results["cfg"].error_code == ErrorCode.INVALID_CONFIG
        assert "retention.ms" in results["cfg"].error_message  # the closest valid key
        assert results["zero"].error_code == ErrorCode.INVALID_PARTITIONS
        assert conn.create_topic("x").error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        only = conn.call(
            admin.CreateTopicsRequest([admin.CreatableTopic("v", 4)], validate_only=True)
        )
        assert only.body.topics[0].error_code == 0
        assert [t.name for t in conn.metadata().topics] == ["x"]


def test_delete_topics_and_create_partitions(broker):
    with broker.connect() as conn:
        conn.create_topic("d", 1)
        conn.produce("d", 0, batch([b"v"]))
        grow = conn.call(
            admin.CreatePartitionsRequest([admin.CreatePartitionsTopic("d", 3)])
        ).body.results[0]
        assert grow.error_code == 0
        assert len(conn.metadata(["d"]).topics[0].partitions) == 3
        shrink = conn.call(
            admin.CreatePartitionsRequest([admin.CreatePartitionsTopic("d", 2)])
        ).body.results[0]
        assert shrink.error_code == ErrorCode.INVALID_PARTITIONS
        results = conn.call(admin.DeleteTopicsRequest(["d", "ghost"])).body.responses
        assert [(r.name, r.error_code) for r in results] == [
            ("d", 0),
            ("ghost", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        assert conn.metadata().topics == []
        # A new topic of the same name starts empty.
        conn.create_topic("d", 1)
        part, records = conn.fetch("d", 0, 0)
        assert (part.high_watermark, records) == (0, b"")


def test_describe_and_alter_topic_configs(broker):
    with broker.connect() as conn:
        conn.create_topic("c", 1, {"retention.ms": "5000"})
        topic = admin.RESOURCE_TOPIC

        def describe(keys=None):
            body = conn.call(
                admin.DescribeConfigsRequest([admin.DescribeConfigsResource(topic, "c", keys)])
            ).body
            return {e.name: e for e in body.results[0].configs}

        entries = describe()
        assert entries["retention.ms"].value == "5000" and not entries["retention.ms"].is_default
        assert entries["segment.bytes"].is_default
        assert list(describe(["cleanup.policy"])) == ["cleanup.policy"]

        def alter(configs, validate_only=False):
            body = conn.call(
                admin.AlterConfigsRequest(
                    [admin.AlterConfigsResource(topic, "c", configs)], validate_only
                )
            ).body
            return body.results[0]

        assert alter({"cleanup.policy": "compact"}, validate_only=True).error_code == 0
        assert describe()["cleanup.policy"].value == "delete"
        assert alter({"cleanup.policy": "compact", "retention.ms": None}).error_code == 0
        entries = describe()
        assert entries["cleanup.policy"].value == "compact"
        assert entries["retention.ms"].is_default
        bad = alter({"retention.ms": "soon"})
        assert bad.error_code == ErrorCode.INVALID_CONFIG and "retention.ms" in bad.error_message
        missing = conn.call(
            admin.DescribeConfigsRequest([admin.DescribeConfigsResource(topic, "nope")])
        ).body.results[0]
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_broker_configs_are_described_read_only(broker):
    with broker.connect() as conn:
        body = conn.call(
            admin.DescribeConfigsRequest(
                [admin.DescribeConfigsResource(admin.RESOURCE_BROKER, "0")],
                include_documentation=True,
            )
        ).body
        entries = {e.name: e for e in body.results[0].configs}
        assert entries["num.partitions"].read_only
        assert entries["log.retention.ms"].value == "604800000"
        assert not entries["listeners"].is_default
        assert entries["socket.request.max.bytes"].documentation
        refused = conn.call(
            admin.AlterConfigsRequest(
                [admin.AlterConfigsResource(admin.RESOURCE_BROKER, "0", {"num.partitions": "3"})]
            )
        ).body.results[0]
        assert refused.error_code == ErrorCode.INVALID_REQUEST
        assert "broker.properties" in refused.error_message


def test_list_offsets_and_delete_records(broker):
    with broker.connect() as conn:
        conn.produce("o", 0, batch([b"a", b"b"], [1000, 2000]))
        conn.produce("o", 0, batch([b"c"], [1500]))
        assert conn.list_offset("o", 0, offsets.EARLIEST_TIMESTAMP).offset == 0
        assert conn.list_offset("o", 0, offsets.LATEST_TIMESTAMP).offset == 3
        assert conn.list_offset("o", 0, offsets.LATEST_TIMESTAMP, isolation_level=1).offset == 3
        by_time = conn.list_offset("o", 0, 1500)
        assert (by_time.offset, by_time.timestamp) == (1, 2000)
        newest = conn.list_offset("o", 0, offsets.MAX_TIMESTAMP)
        assert (newest.offset, newest.timestamp) == (1, 2000)
        assert conn.list_offset("o", 0, 99_999).offset == -1
        assert conn.list_offset("o", 0, -7).error_code == ErrorCode.INVALID_REQUEST
        assert conn.list_offset("o", 4, -1).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        def delete(offset):
            body = conn.call(
                offsets.DeleteRecordsRequest(
                    [offsets.DeleteRecordsTopic("o", [offsets.DeleteRecordsPartition(0, offset)])]
                )
            ).body
            return body.topics[0].partitions[0]

        assert (delete(2).error_code, delete(2).low_watermark) == (0, 2)
        assert delete(10).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert conn.list_offset("o", 0, offsets.EARLIEST_TIMESTAMP).offset == 2
        part, _ = conn.fetch("o", 0, 0)
        assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert delete(-1).low_watermark == 3


def test_init_producer_id(start_broker, broker_dir):
    broker = start_broker()
    with broker.connect() as conn:
        first = conn.call(producer_id.InitProducerIdRequest()).body
        second = conn.call(producer_id.InitProducerIdRequest()).body
        assert (first.error_code, first.producer_epoch) == (0, 0)
        assert second.producer_id == first.producer_id + 1
        bumped = conn.call(producer_id.InitProducerIdRequest(None, 60000, first.producer_id, 0))
        assert (bumped.body.producer_id, bumped.body.producer_epoch) == (first.producer_id, 1)
        unknown = conn.call(producer_id.InitProducerIdRequest(None, 60000, 10**9, 0)).body
        assert unknown.error_code == ErrorCode.UNKNOWN_PRODUCER_ID
        # A transactional id goes to the transaction coordinator (tests/integration/
        # test_txn_coordinator_*.py); an empty one is refused.
        txn = conn.call(producer_id.InitProducerIdRequest("")).body
        assert txn.error_code == ErrorCode.INVALID_REQUEST
    broker.stop()
    # Ids survive a restart: the next broker never hands out an id already given.
    broker = start_broker()
    with broker.connect() as conn:
        after = conn.call(producer_id.InitProducerIdRequest()).body
    assert after.producer_id > second.producer_id
