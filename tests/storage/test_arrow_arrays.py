"""spark_mq/storage/arrow_arrays.py: arrays built from buffers and read as numpy, equal to what
pyarrow's own conversions give, and no pandas import anywhere in the broker or the clients."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.storage.arrow_arrays import (
    binary_array,
    constant_string,
    from_numpy,
    mask,
    to_numpy,
    to_numpy_filled,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.float64])
def test_from_numpy_equals_pa_array(dtype: type) -> None:
    values = np.arange(7).astype(dtype)
    built = from_numpy(values)
    built.validate(full=True)
    assert built.equals(pa.array(values))
    assert built.null_count == 0


def test_from_numpy_packs_booleans_and_takes_a_type_of_the_same_width() -> None:
    flags = np.array([True, False, True, True, False, False, True, False, True])
    assert from_numpy(flags).to_pylist() == flags.tolist()
    stamps = from_numpy(np.array([1, 2], np.int64), pa.timestamp("us"))
    assert stamps.type == pa.timestamp("us") and stamps.cast(pa.int64()).to_pylist() == [1, 2]
    with pytest.raises(TypeError, match="cannot become Arrow int32"):
        from_numpy(np.arange(3, dtype=np.int64), pa.int32())
    with pytest.raises(TypeError, match="boolean"):
        from_numpy(flags, pa.int8())
    with pytest.raises(ValueError, match="one-dimensional"):
        from_numpy(np.zeros((2, 2), np.int32))


def test_to_numpy_reads_slices_booleans_and_chunks() -> None:
    array = from_numpy(np.arange(10, dtype=np.int32))
    assert to_numpy(array.slice(3, 4)).tolist() == [3, 4, 5, 6]
    assert to_numpy(array.slice(10)).tolist() == []
    flags = pa.array([True, False, True, True, False, True, False, False, True, True])
    assert to_numpy(flags.slice(3, 6)).tolist() == flags.slice(3, 6).to_pylist()
    assert to_numpy(flags.slice(10)).dtype == np.bool_
    chunked = pa.chunked_array([array.slice(0, 2), array.slice(8)])
    assert to_numpy(chunked).tolist() == [0, 1, 8, 9]
    assert to_numpy(pa.chunked_array([], pa.int64())).tolist() == []


def test_to_numpy_refuses_nulls_and_types_it_would_misread() -> None:
    with pytest.raises(ValueError, match="has 1"):
        to_numpy(pa.array([1, None], pa.int64()))
    with pytest.raises(TypeError, match="timestamp"):
        to_numpy(pa.array([1], pa.timestamp("ms")))


def test_to_numpy_filled_replaces_nulls_only() -> None:
    array = pa.array([5, None, 7, None, 9], pa.int32())
    assert to_numpy_filled(array, -1).tolist() == [5, -1, 7, -1, 9]
    assert to_numpy_filled(array.slice(1, 3), 0).tolist() == [0, 7, 0]
    assert to_numpy_filled(pa.nulls(3, pa.int64()), 4).tolist() == [4, 4, 4]
    chunked = pa.chunked_array([array.slice(0, 2), pa.array([None, 3], pa.int32())])
    assert to_numpy_filled(chunked, 0).tolist() == [5, 0, 0, 3]
    # Without nulls it is the plain view.
    assert to_numpy_filled(pa.array([1, 2], pa.int64()), 0).tolist() == [1, 2]


def test_mask_counts_nulls_as_false() -> None:
    flags = pa.array([True, None, False, True, None], pa.bool_())
    assert mask(flags).tolist() == [True, False, False, True, False]
    assert mask(flags.slice(3)).tolist() == [True, False]
    with pytest.raises(TypeError, match="boolean"):
        mask(pa.array([1]))


@given(st.lists(st.one_of(st.none(), st.binary(max_size=20)), max_size=40))
def test_binary_array_equals_pa_array(items: list[bytes | None]) -> None:
    built = binary_array(items)
    built.validate(full=True)
    assert built.equals(pa.array(items, pa.binary()))
    assert built.null_count == sum(item is None for item in items)


def test_binary_array_takes_any_bytes_like() -> None:
    built = binary_array([bytearray(b"ab"), memoryview(b"xyz")[1:], b""])
    assert built.to_pylist() == [b"ab", b"yz", b""]
    with pytest.raises(TypeError):
        binary_array(["text"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="'B' format"):
        binary_array([memoryview(b"abcd").cast("i")])


@pytest.mark.parametrize(("value", "n"), [("topic-a", 3), ("", 2), ("é", 1), ("x", 0)])
def test_constant_string(value: str, n: int) -> None:
    built = constant_string(value, n)
    built.validate(full=True)
    assert built.type == pa.string() and built.to_pylist() == [value] * n


#: Run in a fresh interpreter: everything a producer, a transactional producer, a consumer
#: group and the log cleaner do, with no Python-object conversion of its own (a user's
#: ``pa.array`` of Python lists may import pandas; that is theirs to decide).
_NO_PANDAS_SCRIPT = """
import json, sys
import numpy as np
import pyarrow as pa
from spark_mq import Admin, Consumer, Producer
from spark_mq.storage.arrow_arrays import binary_array
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_cleaner import LogCleaner
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import encode_batch

mq, compacted = sys.argv[1], sys.argv[2]
with Admin(path=mq) as admin:
    admin.create_topic("t", partitions=2)
valid = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little"))
partition = pa.Array.from_buffers(  # [1, None, 0]
    pa.int32(), 3, [valid, pa.py_buffer(np.array([1, 0, 0], np.int32))]
)
table = pa.table({"value": binary_array([b"a", b"b", b"c"]), "partition": partition})
with Producer(path=mq) as producer:
    producer.send("t", b"v", key=b"k", headers=[("h", b"x")], timestamp_ms=5)
    producer.send_batch("t", table)
    producer.flush()
with Producer(path=mq, transactional_id="tx") as producer:
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"w", key=b"k")
    producer.commit_transaction()
seen = 0
with Consumer(path=mq, group_id="g", auto_offset_reset="earliest") as consumer:
    consumer.subscribe(["t"])
    for _ in range(50):
        seen += sum(len(records) for records in consumer.poll(timeout_ms=200).values())
        if seen >= 5:
            break
    consumer.commit()
config = LogConfig.from_properties(
    {"cleanup.policy": "compact", "segment.bytes": 2000, "min.cleanable.dirty.ratio": 0.0}
)
log = PartitionLog.open(compacted, config, topic="c", partition=0)
for i in range(20):
    log.append(encode_batch(binary_array([b"v%d" % i]), key=binary_array([b"k%d" % (i % 3)])))
cleaned = LogCleaner().clean(log, first_dirty_offset=0)
log.close()
print(json.dumps({
    "seen": seen,
    "removed": 0 if cleaned is None else cleaned.records_removed,
    "broker": json.load(open(mq + "/broker.json"))["pid"],
    "pandas": "pandas" in sys.modules,
}))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("pandas") is None or not sys.platform.startswith("linux"),
    reason="needs pandas installed (what pyarrow would import) and /proc",
)
def test_broker_and_clients_never_import_pandas(tmp_path: Path) -> None:
    """Neither a client process nor the embedded broker loads pandas: producing (keys,
    headers, timestamps, a partly null partition column), a transaction's commit, a group's
    poll and offset commit, and a compaction."""
    done = subprocess.run(
        [sys.executable, "-c", _NO_PANDAS_SCRIPT, str(tmp_path / "mq"), str(tmp_path / "c-0")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    try:
        broker_maps = Path(f"/proc/{result['broker']}/maps").read_text()
        assert result["seen"] == 5
        assert result["removed"] > 0
        assert not result["pandas"], "the client process imported pandas"
        assert "pandas" not in broker_maps, "the broker process loaded pandas"
    finally:
        os.kill(result["broker"], signal.SIGTERM)
