"""Partition sizes on disk, for a console of a local broker (``--path DIR``).

The brokers do not tell clients how large their logs are (no DescribeLogDirs here; the
brokers' ``spark_mq_log_size_bytes`` metric has it). A console given the local broker's
directory can see for itself: a partition's size is the sum of its segment files
(``DIR/<topic>-<partition>/<base offset>.log``), whose size is that of their data even with
``preallocate`` (see ``storage/log_config.py``). Only ``stat`` is used: nothing is opened,
locked or changed, so it is safe beside the running broker (a segment being appended to is
counted as far as it has been written). Indexes and checkpoints are not counted, as the
metric does not count them.
"""

from __future__ import annotations

import os
from pathlib import Path

from spark_mq.storage.topic_names import partition_dir_name

SEGMENT_SUFFIX = ".log"


def partition_size_bytes(root: str | os.PathLike[str], topic: str, partition: int) -> int | None:
    """Bytes of the segment files of ``topic``-``partition`` under the log directory
    ``root``; None when the directory holds no such partition (not hosted here)."""
    directory = Path(root) / partition_dir_name(topic, partition)
    total = 0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(SEGMENT_SUFFIX) and entry.is_file():
                    try:
                        total += entry.stat().st_size
                    except FileNotFoundError:
                        continue  # deleted by retention since the listing
    except (FileNotFoundError, NotADirectoryError):
        return None
    return total


def format_bytes(size: int | None) -> str:
    """A size for people (binary units); ``unknown`` for None.

    >>> format_bytes(512), format_bytes(1536), format_bytes(None)
    ('512 B', '1.5 KiB', 'unknown')
    """
    if size is None:
        return "unknown"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
