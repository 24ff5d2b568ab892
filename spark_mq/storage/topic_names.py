"""Topic names and the partition directory names derived from them.

The rules are Kafka's, so a topic that exists here could exist in Kafka and back:

- 1 to :data:`MAX_TOPIC_NAME_LENGTH` (249) characters;
- only ASCII letters, digits, ``.``, ``_`` and ``-``;
- not ``.`` or ``..`` (they would name the log directory itself or its parent).

Kafka picked 249 so that ``<topic>-<partition>`` still fits the 255-byte file name limit of
common filesystems for any realistic partition number; the log manager also caps the number of
partitions per topic, so every partition directory name fits.

A partition's directory is ``<topic>-<partition>`` (``events-0``). Because ``-`` is legal in
topic names, a directory name is split on its *last* ``-``; the partition part must be a
canonical decimal number (``0``, ``17``; never ``017`` or ``+1``), so that every name maps back
to exactly one directory::

    >>> partition_dir_name("click-stream", 3)
    'click-stream-3'
    >>> parse_partition_dir_name("click-stream-3")
    ('click-stream', 3)
    >>> parse_partition_dir_name("__meta") is None
    True
"""

from __future__ import annotations

import re
from typing import Final

from spark_mq.errors import InvalidTopicError, UsageError

MAX_TOPIC_NAME_LENGTH: Final = 249
#: Partition numbers are Kafka's int32.
MAX_PARTITION_NUMBER: Final = 2**31 - 1
#: The longest file name (in bytes) that ext4, XFS, btrfs and APFS accept.
MAX_FILE_NAME_BYTES: Final = 255

_LEGAL_CHARS: Final = re.compile(r"[a-zA-Z0-9._-]+")
_ILLEGAL_CHAR: Final = re.compile(r"[^a-zA-Z0-9._-]")
_CANONICAL_PARTITION: Final = re.compile(r"0|[1-9][0-9]*")
_ALLOWED: Final = "ASCII letters, digits, '.', '_' and '-'"


def validate_topic_name(name: str) -> None:
    """Raise :class:`InvalidTopicError` unless Kafka would accept ``name`` as a topic name.

    The message names the rule that failed and what is allowed instead.

        >>> validate_topic_name("orders.v2_eu-west")  # accepted: returns None
    """
    if not isinstance(name, str):
        raise InvalidTopicError(
            f"a topic name must be a string, got {type(name).__name__} {name!r}", topic=str(name)
        )
    if not name:
        raise InvalidTopicError(
            f"a topic name must not be empty; use 1 to {MAX_TOPIC_NAME_LENGTH} of {_ALLOWED}",
            topic=name,
        )
    if name in (".", ".."):
        raise InvalidTopicError(
            f"topic name {name!r} is not allowed: '.' and '..' name directories; use a name with "
            f"at least one character other than '.'",
            topic=name,
        )
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name {name[:20]!r}... is {len(name)} characters long; the limit is "
            f"{MAX_TOPIC_NAME_LENGTH} so that partition directory names fit the filesystem",
            topic=name,
        )
    if not _LEGAL_CHARS.fullmatch(name):
        bad = _ILLEGAL_CHAR.search(name)
        assert bad is not None  # fullmatch failed on a non-empty string, so some char is illegal
        raise InvalidTopicError(
            f"topic name {name!r} contains {bad.group()!r} at position {bad.start()}; "
            f"only {_ALLOWED} are allowed",
            topic=name,
        )


def partition_dir_name(topic: str, partition: int) -> str:
    """The directory name of one partition: ``<topic>-<partition>``."""
    validate_topic_name(topic)
    if (
        isinstance(partition, bool)
        or not isinstance(partition, int)
        or not 0 <= partition <= MAX_PARTITION_NUMBER
    ):
        raise UsageError(
            f"a partition number must be an int from 0 to {MAX_PARTITION_NUMBER}, got {partition!r}"
        )
    name = f"{topic}-{partition}"
    if len(name.encode()) > MAX_FILE_NAME_BYTES:
        raise UsageError(
            f"partition directory name for topic {topic[:20]!r}... partition {partition} would be "
            f"{len(name)} bytes, over the filesystem limit of {MAX_FILE_NAME_BYTES}; use a "
            "shorter topic name or fewer partitions"
        )
    return name


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` if ``name`` is exactly what :func:`partition_dir_name` produces.

    Anything else (``__meta``, ``events-0.4f2a....deleted``, ``events-01``) gives ``None``.
    """
    topic, sep, number = name.rpartition("-")
    # The length check comes first so that int() never parses an absurdly long digit string.
    if not sep or len(number) > 10 or not _CANONICAL_PARTITION.fullmatch(number):
        return None
    partition = int(number)
    if partition > MAX_PARTITION_NUMBER:
        return None
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return None
    return topic, partition
