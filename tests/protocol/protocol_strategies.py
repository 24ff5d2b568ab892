"""Hypothesis strategies for the protocol's message types, built from their struct fields.

``message(cls)`` draws any value of an ``array_like`` message struct by walking
``msgspec.structs.fields``; a new field or a new message type needs no change here. Messages
that carry a records section (a Produce request, a Fetch response) are drawn with
``with_records`` so that their ``records_size`` fields match the bytes that follow the body.
"""

from __future__ import annotations

import enum
import types
import typing
from functools import cache
from typing import Any

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from spark_mq.protocol.fetch import FetchResponse
from spark_mq.protocol.produce import ProduceRequest

#: Every property test in this directory: deterministic (no example database, a fixed
#: derandomized seed) and small enough that the directory runs in a few seconds.
FAST = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: For tests parametrized over every API: fewer examples each, as there are a dozen APIs.
PER_API = settings(FAST, max_examples=30)
#: For cheap properties (a few decoders on a few bytes): many more examples.
MANY = settings(FAST, max_examples=300)

#: MessagePack carries integers up to 64 bits; message ints are Kafka's int16/32/64.
INT64 = st.integers(-(2**63), 2**63 - 1)
SMALL_INT = st.integers(-3, 100)

#: Types whose bodies announce a records section, mapped to the sizes they announce.
RECORDS_CARRIERS: tuple[type[msgspec.Struct], ...] = (ProduceRequest, FetchResponse)


def for_type(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for one field type of a message struct."""
    origin = typing.get_origin(tp)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.one_of(SMALL_INT, INT64)
    if tp is str:
        return st.text(max_size=12)
    if tp is float:
        # Quota values (protocol/quotas.py). NaN never equals itself, so a round trip of it
        # could not be compared; every other double must survive one.
        return st.floats(allow_nan=False)
    if tp is bytes:
        # Opaque bytes (group protocol metadata and assignments): MessagePack bin.
        return st.binary(max_size=16)
    if tp is type(None):
        return st.none()
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        # Enum fields (the ACL messages' resource types, operations, ...): any member.
        return st.sampled_from(list(tp))
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return message(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        return st.lists(for_type(item), max_size=3)
    if origin is dict:
        key, value = typing.get_args(tp)
        return st.dictionaries(for_type(key), for_type(value), max_size=3)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(for_type(arg) for arg in typing.get_args(tp)))
    raise TypeError(f"no strategy for message field type {tp!r}")


@cache
def message(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    """Any value of the message struct ``cls``, every field drawn."""
    fields = {f.name: for_type(f.type) for f in msgspec.structs.fields(cls)}
    return st.fixed_dictionaries(fields).map(lambda kwargs: cls(**kwargs))


def announced_sizes(msg: Any) -> list[int]:
    """The ``records_size`` values of a message, in body order (empty for most APIs)."""
    if not isinstance(msg, RECORDS_CARRIERS):
        return []
    return [p.records_size for t in msg.topics for p in t.partitions]


@st.composite
def with_records(draw: st.DrawFn, cls: type[msgspec.Struct]) -> tuple[Any, list[bytes]]:
    """A message and its records section cut per partition, ``records_size`` set to match.

    Messages that carry no records get an empty list.
    """
    msg = draw(message(cls))
    chunks: list[bytes] = []
    if isinstance(msg, RECORDS_CARRIERS):
        for topic in msg.topics:
            for partition in topic.partitions:
                chunk = draw(st.binary(max_size=40))
                partition.records_size = len(chunk)
                chunks.append(chunk)
    return msg, chunks
