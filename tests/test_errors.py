"""The error hierarchy: every class pickles (errors cross process boundaries) and keeps its
code, retriable flag and attributes."""

from __future__ import annotations

import inspect
import pickle

import pytest

from spark_mq import errors


def _error_classes() -> list[type[errors.SparkMQError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.SparkMQError)
    ]


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_every_error_survives_pickle(cls: type[errors.SparkMQError]) -> None:
    kwargs = {
        name: 7 if "offset" in name or name in {"partition", "current", "requested"} else "x"
        for name, param in inspect.signature(cls.__init__).parameters.items()
        if param.kind is inspect.Parameter.KEYWORD_ONLY
    }
    exc = cls("what went wrong", **kwargs)
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is cls
    assert str(back) == "what went wrong"
    assert back.__dict__ == exc.__dict__
    assert back.error_code == exc.error_code and back.retriable == exc.retriable


def test_pickled_error_keeps_context_attributes() -> None:
    exc = errors.OffsetOutOfRangeError(
        "offset 9 is past the end",
        topic="t",
        partition=1,
        offset=9,
        log_start_offset=0,
        log_end_offset=5,
    )
    back = pickle.loads(pickle.dumps(exc))
    assert (back.topic, back.partition, back.offset, back.log_end_offset) == ("t", 1, 9, 5)
