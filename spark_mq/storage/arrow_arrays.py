"""Arrow arrays built from numpy or bytes, and read as numpy, without importing pandas.

When pandas is installed, pyarrow imports it the first time a process converts Python or numpy
objects (``pa.array``, ``pa.scalar``, ``fill_null`` with a Python value) or converts an array
with ``to_numpy``, to recognise pandas' missing values. Measured on the 2-core benchmark
machine: the first ``pa.array`` of a fresh interpreter took 0.19 s; an embedded broker's first
transaction took 0.28-0.35 s instead of 0.02 s, while its event loop served nobody else, and
left it 43 MB larger (128 MB instead of 85); producer and consumer processes imported pandas
the same way. (A Spark Python worker imports pandas anyway: pyspark's data source write path
puts each task's commit message in a column with ``pa.array``.)

Nothing in the broker or the clients needs pandas. These helpers build arrays from their
buffers (``pa.Array.from_buffers``) and read primitive arrays as numpy views of their buffers,
so the storage engine, the broker, the producer and the consumer never trigger that import.
Code that takes Python objects from a user (an ``encode_batch`` of Python lists, say) may
still go through ``pa.array``; it imports pandas only in a process that asked for it that way.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any, Final, cast

import numpy as np
import pyarrow as pa

#: The most bytes one ``binary`` or ``string`` array holds (its offsets are int32).
BINARY_MAX_BYTES: Final = 2**31 - 1
#: What :func:`binary_array` takes per element.
BytesLike = bytes | bytearray | memoryview


def from_numpy(values: Any, type: pa.DataType | None = None) -> pa.Array:
    """A primitive Arrow array with no nulls holding ``values`` (a numpy array or anything
    ``np.asarray`` takes; booleans are packed into a bitmap). ``type`` defaults to the numpy
    dtype's Arrow type; it must have the same width when given."""
    values = np.ascontiguousarray(values)
    if values.ndim != 1:
        raise ValueError(f"from_numpy takes a one-dimensional array, got shape {values.shape}")
    arrow_type = pa.from_numpy_dtype(values.dtype) if type is None else type
    if values.dtype == np.bool_:
        if arrow_type != pa.bool_():
            raise TypeError(f"a boolean numpy array cannot become Arrow {arrow_type}")
        data = np.packbits(values, bitorder="little")
    else:
        if arrow_type.bit_width != values.dtype.itemsize * 8:
            raise TypeError(f"numpy {values.dtype} cannot become Arrow {arrow_type}")
        data = values
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(data)])


def to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a primitive Arrow array without nulls, as a read-only numpy view of its
    buffer (a copy for booleans, which Arrow packs into bits, and for several chunks)."""
    if isinstance(array, pa.ChunkedArray):
        return _concatenate([to_numpy(chunk) for chunk in array.chunks], array.type)
    if array.null_count:
        raise ValueError(f"to_numpy takes an array without nulls; this one has {array.null_count}")
    data = array.buffers()[1]
    n = len(array)
    if array.type == pa.bool_():
        if n == 0:
            return np.zeros(0, dtype=np.bool_)
        bits = np.frombuffer(data, dtype=np.uint8)
        unpacked = np.unpackbits(bits, bitorder="little", count=array.offset + n)
        return unpacked[array.offset :].astype(np.bool_)
    dtype = _numpy_dtype(array.type)
    if n == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=n, offset=array.offset * dtype.itemsize)


def to_numpy_filled(array: pa.Array | pa.ChunkedArray, fill: Any) -> np.ndarray:
    """The values of a primitive Arrow array as numpy, its nulls replaced by ``fill``."""
    if isinstance(array, pa.ChunkedArray):
        return _concatenate([to_numpy_filled(chunk, fill) for chunk in array.chunks], array.type)
    if not array.null_count:
        return to_numpy(array)
    # The same values without the validity bitmap: a null slot holds whatever its buffer has.
    # (pyarrow never makes a fixed-width array without a values buffer, nulls or not.)
    values = pa.Array.from_buffers(
        array.type, len(array), [None, *array.buffers()[1:]], offset=array.offset
    )
    return np.where(to_numpy(array.is_valid()), to_numpy(values), fill)


def _concatenate(parts: list[np.ndarray], arrow_type: pa.DataType) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype=_numpy_dtype(arrow_type))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _numpy_dtype(arrow_type: pa.DataType) -> np.dtype:
    if arrow_type == pa.bool_():
        return np.dtype(np.bool_)
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
        dtype: np.dtype = np.dtype(arrow_type.to_pandas_dtype())
        return dtype
    # A timestamp's unit would be lost: view it as int64 first.
    raise TypeError(f"arrow_arrays reads integers, floats and booleans, not {arrow_type}")


def mask(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow array as numpy booleans, nulls counting as False."""
    if array.type != pa.bool_():
        raise TypeError(f"mask takes a boolean array, got {array.type}")
    return to_numpy_filled(array, False)


def binary_array(items: Sequence[BytesLike | None]) -> pa.Array:
    """A ``binary`` Arrow array of ``items`` (bytes, bytearray or byte-format memoryview, or
    None for null), built from one joined data buffer and its offsets. The per-item work runs
    in C (``map``, ``itertools.compress``, ``bytes.join``), not in a Python loop."""
    n = len(items)
    present = cast("Sequence[BytesLike]", items)
    valid = None
    if None in items:
        valid = np.fromiter(map(operator.is_not, items, itertools.repeat(None)), np.bool_, n)
        present = list(itertools.compress(present, valid))
    sizes = np.fromiter(map(len, present), np.int64, count=len(present))
    nulls = n - len(present)
    if nulls:
        lengths = np.zeros(n, dtype=np.int64)
        lengths[valid] = sizes
    else:
        lengths = sizes
    data = b"".join(present)
    if len(data) > BINARY_MAX_BYTES:
        raise OverflowError(f"{len(data)} bytes do not fit one binary array (at most 2 GiB - 1)")
    if int(lengths.sum()) != len(data):
        raise TypeError("binary_array takes bytes, bytearray or memoryviews of bytes ('B' format)")
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:], dtype=np.int32)
    validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )


def constant_string(value: str, n: int) -> pa.Array:
    """``n`` copies of ``value`` as a ``string`` array: one repeated data buffer and evenly
    spaced offsets."""
    data = value.encode()
    if len(data) * n > BINARY_MAX_BYTES:
        raise OverflowError(f"{n} copies of a {len(data)}-byte string do not fit one array")
    offsets = (np.arange(n + 1, dtype=np.int64) * len(data)).astype(np.int32)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)], null_count=0
    )
