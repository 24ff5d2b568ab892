"""Every API's spec builds its error response (``ApiSpec.error_response``): the response
type of the API, carrying the code at every place the response has one, that a client
decodes as it decodes any answer. The broker's dispatcher sends it when a handler raises.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import msgspec
import pytest

from spark_mq.protocol.api import APIS, ApiKey, ApiSpec
from spark_mq.protocol.metadata import MetadataRequest

CODE = -1
MESSAGE = "PRODUCE failed on the broker (KeyError: 'x'); see its log"


def sample(tp: Any) -> Any:
    """A value of type ``tp`` with one element in every list: every part of a request is
    there once, so every part of its error response is too."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return sample(next(arg for arg in typing.get_args(tp) if arg is not type(None)))
    if origin is list:
        return [sample(typing.get_args(tp)[0])]
    if origin is dict:
        key, value = typing.get_args(tp)
        return {sample(key): sample(value)}
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        hints = typing.get_type_hints(tp)
        return tp(**{f: sample(hints[f]) for f in tp.__struct_fields__})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(iter(tp))  # the ACL messages' enums: any member
    return {str: "x", int: 0, bool: False, bytes: b"x", float: 0.0}[tp]


def codes_and_messages(value: Any) -> tuple[list[int], list[str | None]]:
    """Every ``error_code`` and ``error_message`` anywhere in a response."""
    codes: list[int] = []
    messages: list[str | None] = []
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            field = getattr(value, name)
            if name == "error_code":
                codes.append(field)
            elif name == "error_message":
                messages.append(field)
            else:
                more_codes, more_messages = codes_and_messages(field)
                codes += more_codes
                messages += more_messages
    elif isinstance(value, list):
        for item in value:
            more_codes, more_messages = codes_and_messages(item)
            codes += more_codes
            messages += more_messages
    return codes, messages


def test_every_api_has_an_error_response() -> None:
    assert set(APIS) == set(ApiKey)
    for spec in APIS.values():
        assert callable(spec.error_response), spec.key.name


@pytest.mark.parametrize("spec", list(APIS.values()), ids=lambda s: s.key.name)
def test_error_response_carries_the_code_everywhere(spec: ApiSpec[Any, Any]) -> None:
    request = sample(spec.request_type)
    body = spec.error_response(request, CODE, MESSAGE)
    assert isinstance(body, spec.response_type)
    # What a client reads: the response as it arrives on the wire.
    decoded = spec.decode_response(msgspec.msgpack.encode(body))
    if spec.key is ApiKey.FETCH:
        # The request-level code stays 0: a client reads each partition's, with its message.
        assert decoded.error_code == 0
        decoded = decoded.topics
    codes, messages = codes_and_messages(decoded)
    assert codes, f"{spec.key.name}'s error response has no error_code"
    assert set(codes) == {CODE}
    assert set(messages) <= {MESSAGE}


def test_a_metadata_request_for_all_topics_has_no_error_response() -> None:
    spec = APIS[ApiKey.METADATA]
    assert spec.error_response(MetadataRequest(topics=None), CODE, MESSAGE) is None
