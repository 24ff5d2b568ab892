"""Topic name rules against a regex reference, and partition directory names round trips."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.errors import InvalidTopicError, UsageError
from spark_mq.storage.topic_names import (
    MAX_TOPIC_NAME_LENGTH,
    parse_partition_dir_name,
    partition_dir_name,
    validate_topic_name,
)

# The reference model: Kafka's rule written as one regular expression.
REFERENCE = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def reference_valid(name: str) -> bool:
    return REFERENCE.fullmatch(name) is not None and name not in (".", "..")


def is_valid(name: str) -> bool:
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return False
    return True


# Mostly legal characters, so that valid names (and near misses) are common, plus characters
# that look legal to a careless check: non-ASCII letters and digits, whitespace, separators.
ALPHABET = st.sampled_from(
    [*"abcXYZ019._-", " ", "/", "\\", "+", ":", "\n", "\x00", "é", "٣", "Ω", "ß", "\t"]
)
NAMES = st.one_of(
    st.text(ALPHABET, max_size=260),
    st.text(max_size=20),
    st.sampled_from([".", "..", "...", "-", "_", "a" * 249, "a" * 250]),
)
VALID_NAMES = st.from_regex(REFERENCE, fullmatch=True).filter(lambda n: n not in (".", ".."))


@given(NAMES)
def test_validation_agrees_with_the_reference(name: str) -> None:
    assert is_valid(name) == reference_valid(name)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "must not be empty"),
        (".", "'.' and '..'"),
        ("..", "'.' and '..'"),
        ("a" * 250, "the limit is 249"),
        ("a b", "contains ' ' at position 1"),
        ("logs/2024", "contains '/' at position 4"),
        ("café", "contains 'é' at position 3"),
    ],
)
def test_each_rule_has_its_own_message(name: str, fragment: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name(name)
    assert fragment in str(info.value)
    assert info.value.topic == name


def test_illegal_character_message_says_what_is_allowed() -> None:
    with pytest.raises(InvalidTopicError, match=r"only ASCII letters, digits, '\.', '_' and '-'"):
        validate_topic_name("a*b")


def test_non_string_is_refused() -> None:
    with pytest.raises(InvalidTopicError, match="must be a string"):
        validate_topic_name(42)  # type: ignore[arg-type]


def test_longest_name_is_accepted() -> None:
    validate_topic_name("x" * MAX_TOPIC_NAME_LENGTH)


@given(VALID_NAMES, st.integers(min_value=0, max_value=9999))
def test_partition_dir_name_round_trips(topic: str, partition: int) -> None:
    name = partition_dir_name(topic, partition)
    assert name == f"{topic}-{partition}"
    assert len(name.encode()) <= 255
    assert parse_partition_dir_name(name) == (topic, partition)


@given(st.one_of(st.text(ALPHABET, max_size=40), st.text(max_size=40)))
def test_parse_accepts_only_names_it_could_have_produced(name: str) -> None:
    parsed = parse_partition_dir_name(name)
    if parsed is not None:
        assert partition_dir_name(*parsed) == name


@pytest.mark.parametrize(
    "name",
    [
        "__meta",
        ".lock",
        "recovery-point-offset-checkpoint",
        "events",
        "events-",
        "-3",
        "events-01",
        "events-+1",
        "events--1x",
        "events-٣",
        "events-0.4f2a9c.deleted",
        "events-1 ",
        "a b-0",
        "events-99999999999",
    ],
)
def test_parse_rejects_names_that_are_not_partition_dirs(name: str) -> None:
    assert parse_partition_dir_name(name) is None


def test_parse_splits_on_the_last_dash() -> None:
    assert parse_partition_dir_name("click-stream-12") == ("click-stream", 12)
    assert parse_partition_dir_name("t--1") == ("t-", 1)


@pytest.mark.parametrize("partition", [-1, True, 2**31, "0"])
def test_partition_dir_name_refuses_bad_partitions(partition: object) -> None:
    with pytest.raises(UsageError, match="partition number"):
        partition_dir_name("events", partition)  # type: ignore[arg-type]


def test_partition_dir_name_refuses_names_over_the_filesystem_limit() -> None:
    with pytest.raises(UsageError, match="over the filesystem limit of 255"):
        partition_dir_name("x" * 249, 123456)


def test_partition_dir_name_validates_the_topic() -> None:
    with pytest.raises(InvalidTopicError):
        partition_dir_name("a/b", 0)
