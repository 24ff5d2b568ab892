"""The error hierarchy: every class pickles (errors cross process boundaries) and keeps its
code, retriable flag and attributes."""

from __future__ import annotations

import inspect
import pickle
import re
import textwrap

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


# ---------------------------------------------------------------------------------------------
# The tree drawn in the module docstring

_TREE_LINE = re.compile(r"^(?P<indent>(?:[│ ]   )*)(?:[├└]── )?(?P<name>[A-Z]\w+)(?P<rest>.*)$")


def _drawn_tree() -> dict[str, tuple[str | None, str]]:
    """Each class drawn in the errors docstring: its drawn parent and the rest of its line."""
    doc = errors.__doc__ or ""
    block = doc[doc.index("    SparkMQError\n") :].split("\n\n")[0]
    drawn: dict[str, tuple[str | None, str]] = {}
    parents: list[str] = []
    for line in textwrap.dedent(block).splitlines():
        match = _TREE_LINE.match(line)
        assert match, f"not a tree line: {line!r}"
        depth = len(match["indent"]) // 4 + (0 if line == match["name"] else 1)
        name = match["name"]
        assert name not in drawn, f"{name} is drawn twice"
        del parents[depth:]
        drawn[name] = (parents[-1] if parents else None, match["rest"])
        parents.append(name)
    return drawn


def test_docstring_tree_lists_every_class_under_its_first_base() -> None:
    drawn = _drawn_tree()
    classes = {cls.__name__: cls for cls in _error_classes()}
    assert set(drawn) == set(classes)
    for name, (parent, rest) in drawn.items():
        cls = classes[name]
        if parent is None:
            assert cls is errors.SparkMQError
            continue
        assert cls.__bases__[0] is classes[parent], name
        # A second spark_mq base is named on the line, as a [layer] tag or by name.
        for base in cls.__bases__[1:]:
            if issubclass(base, errors.SparkMQError):
                tag = {errors.StorageError: "[storage]", errors.ProtocolError: "[protocol]"}
                assert tag.get(base, base.__name__) in rest, (name, base)


def test_docstring_tree_layer_tags_and_codes_are_the_classes() -> None:
    drawn = _drawn_tree()
    classes = {cls.__name__: cls for cls in _error_classes()}
    layers: dict[str, set[str]] = {}
    for name, (parent, rest) in drawn.items():
        cls = classes[name]
        layer = set(layers.get(parent or "", set()))
        layer |= {tag for tag in ("storage", "protocol") if f"[{tag}]" in rest}
        layer |= {"storage"} if cls is errors.StorageError else set()
        layer |= {"protocol"} if cls is errors.ProtocolError else set()
        layers[name] = layer
        if parent is None:
            continue  # the root defines the default code, -1
        assert ("storage" in layer) is issubclass(cls, errors.StorageError), name
        assert ("protocol" in layer) is issubclass(cls, errors.ProtocolError), name
        code = re.search(r"\((-?\d+)(\*?)\)", rest)
        if code is None:
            assert "error_code" not in vars(cls), f"{name}: draw its code"
        else:
            assert int(code[1]) == cls.error_code, name
            assert (code[2] == "*") is cls.shares_code, name


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_retriable_exactly_under_retriable_error(cls: type[errors.SparkMQError]) -> None:
    assert cls.retriable is issubclass(cls, errors.RetriableError)


def test_client_errors_module_re_exports_the_same_classes() -> None:
    from spark_mq.client import errors as client_errors

    for name in client_errors.__all__:
        assert getattr(client_errors, name) is getattr(errors, name)
