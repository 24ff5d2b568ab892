"""broker.meta.json's record of the cluster a log directory joined: a directory serves one
cluster under one broker.id (Kafka's InconsistentClusterId/BrokerId checks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_mq.broker.dir_files import META_FILE, BrokerMeta
from spark_mq.errors import (
    CorruptCheckpointError,
    InconsistentBrokerIdError,
    InconsistentClusterIdError,
)


def test_the_first_join_is_recorded_and_kept_across_takeovers(tmp_path: Path) -> None:
    meta = BrokerMeta.take_over(tmp_path)
    assert (meta.joined_cluster_id, meta.joined_broker_id) == (None, None)
    joined = meta.join_cluster(tmp_path, "clusterA", 2)
    assert (joined.joined_cluster_id, joined.joined_broker_id) == ("clusterA", 2)
    assert joined.cluster_id == meta.cluster_id and joined.epoch == meta.epoch
    on_disk = json.loads((tmp_path / META_FILE).read_text())
    assert (on_disk["joined_cluster_id"], on_disk["joined_broker_id"]) == ("clusterA", 2)
    again = BrokerMeta.take_over(tmp_path)
    assert again.epoch == meta.epoch + 1
    assert (again.joined_cluster_id, again.joined_broker_id) == ("clusterA", 2)
    assert again.join_cluster(tmp_path, "clusterA", 2) == again


def test_another_cluster_or_broker_id_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    BrokerMeta.take_over(tmp_path).join_cluster(tmp_path, "clusterA", 2)
    meta = BrokerMeta.take_over(tmp_path)
    before = (tmp_path / META_FILE).read_bytes()
    with pytest.raises(InconsistentClusterIdError, match="belongs to cluster clusterA") as exc:
        meta.join_cluster(tmp_path, "clusterB", 2)
    assert exc.value.directory == str(tmp_path)
    with pytest.raises(InconsistentBrokerIdError, match=r"logs of broker 2, but broker\.id is 3"):
        meta.join_cluster(tmp_path, "clusterA", 3)
    assert (tmp_path / META_FILE).read_bytes() == before


def test_a_single_node_file_has_no_joined_keys_and_bad_ones_are_corrupt(tmp_path: Path) -> None:
    BrokerMeta.take_over(tmp_path)
    assert set(json.loads((tmp_path / META_FILE).read_text())) == {"version", "cluster_id", "epoch"}
    (tmp_path / META_FILE).write_text(
        json.dumps({"version": 0, "cluster_id": "x", "epoch": 1, "joined_broker_id": "2"})
    )
    with pytest.raises(CorruptCheckpointError):
        BrokerMeta.read(tmp_path)
