"""Partition directories of deleted topics, and the ones no topic claims.

The :class:`~spark_mq.storage.log_manager.LogManager` commits a topic deletion by renaming
its metadata file into ``__meta/deleting/`` (one atomic step: the topic no longer exists).
:func:`carry_out_deletion` then does the rest, in an order a crash can interrupt anywhere:
each partition directory is renamed to ``<dir>.<uuid>.deleted`` (so it leaves the log at
once), the root is fsynced, the deletion record is removed, and the directories are deleted.
At startup :func:`finish_deletions` carries out every deletion a crash interrupted, and
:func:`remove_deleted_dirs` removes the ``*.deleted`` directories left behind.

A cluster broker that stops hosting one partition with deletion
(:meth:`~spark_mq.storage.log_manager.LogManager.stop_hosting`) removes its directory the same
way: :func:`delete_partition_dir` renames it to ``*.deleted`` and fsyncs the root, and
:func:`remove_deleted_dir` removes it once the metadata no longer hosts it. A stray replica
(one the controller's full LeaderAndIsr does not list) is set aside instead, as Kafka does:
:func:`set_aside_stray_dir` renames it to ``<dir>.<uuid>.stray``, out of the log and never
opened again, but kept, so that nothing is lost if the controller was wrong; startup lists
those directories at WARNING (:func:`warn_about_strays`) until an operator removes them.

Partition directories that no metadata claims (an interrupted create, or copied in), or that
their topic's metadata does not host (a replica stopped without deletion), are never removed
automatically: :func:`warn_about_orphans` reports them, and a later create of
that partition adopts one only if it holds no records (:func:`has_records`).

Threads: the manager calls these under its lock, or at startup before anything else runs.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from spark_mq.storage.checkpoint_file import fsync_directory
from spark_mq.storage.segment import LOG_SUFFIX
from spark_mq.storage.topic_metadata import TopicMetadata
from spark_mq.storage.topic_names import (
    MAX_FILE_NAME_BYTES,
    parse_partition_dir_name,
    partition_dir_name,
)

__all__ = [
    "DELETED_DIR_SUFFIX",
    "STRAY_DIR_SUFFIX",
    "carry_out_deletion",
    "delete_partition_dir",
    "finish_deletions",
    "has_records",
    "remove_deleted_dir",
    "remove_deleted_dirs",
    "set_aside_stray_dir",
    "warn_about_orphans",
    "warn_about_strays",
]

logger = logging.getLogger(__name__)

DELETED_DIR_SUFFIX: Final = ".deleted"
STRAY_DIR_SUFFIX: Final = ".stray"


def has_records(directory: Path) -> bool:
    """Whether a partition directory holds any record bytes (its segment ``.log`` files)."""
    return any(
        entry.name.endswith(LOG_SUFFIX) and entry.stat().st_size > 0
        for entry in os.scandir(directory)
    )


def finish_deletions(root: Path, deleting_dir: Path, *, live: set[str]) -> None:
    """Carry out deletions committed to ``deleting_dir`` but interrupted."""
    for record in sorted(deleting_dir.glob("*.json")):
        meta = TopicMetadata.read(record)
        if meta.name in live:
            # Cannot happen through the manager (a create first finishes pending deletions);
            # the directories belong to the live topic, so only the record goes.
            logger.warning(
                "deletion record %s names live topic %r; removing the record only",
                record,
                meta.name,
            )
            record.unlink()
        else:
            logger.info("finishing the interrupted deletion of topic %r", meta.name)
            carry_out_deletion(root, deleting_dir, meta, record)


def carry_out_deletion(root: Path, deleting_dir: Path, meta: TopicMetadata, record: Path) -> None:
    """Remove the partition directories of a topic whose deletion ``record`` committed."""
    doomed = []
    for p in range(meta.partitions):
        directory = root / partition_dir_name(meta.name, p)
        if directory.exists():
            doomed.append(_rename_to_deleted(directory))
    fsync_directory(root)
    record.unlink()
    fsync_directory(deleting_dir)
    for directory in doomed:
        _remove_tree(directory)


def delete_partition_dir(root: Path, directory: Path) -> Path:
    """Take one partition directory out of the log (renamed to ``*.deleted``, the rename made
    durable); :func:`remove_deleted_dir` removes it afterwards, or the next startup does."""
    target = _rename_to_deleted(directory)
    fsync_directory(root)
    return target


def set_aside_stray_dir(root: Path, directory: Path) -> Path:
    """Take a stray replica's directory out of the log without deleting it: renamed to
    ``*.stray`` (never opened, adopted or removed by the log), the rename made durable."""
    target = _rename_with_suffix(directory, STRAY_DIR_SUFFIX)
    fsync_directory(root)
    return target


def warn_about_strays(root: Path) -> None:
    """Log every directory :func:`set_aside_stray_dir` left (kept for the operator)."""
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.name.endswith(STRAY_DIR_SUFFIX) and entry.is_dir(follow_symlinks=False):
            logger.warning(
                "stray replica directory %s is kept, not served: the controller said this "
                "broker no longer holds that replica. Copy out what you need and delete it",
                entry.path,
            )


def remove_deleted_dir(directory: Path) -> None:
    """Remove a directory :func:`delete_partition_dir` renamed (a failure is logged: startup
    retries)."""
    _remove_tree(directory)


def _rename_to_deleted(directory: Path) -> Path:
    return _rename_with_suffix(directory, DELETED_DIR_SUFFIX)


def _rename_with_suffix(directory: Path, kind: str) -> Path:
    suffix = f".{uuid.uuid4().hex}{kind}"
    # Like Kafka, shorten the name so that it fits the filesystem's limit; only the suffix
    # matters to startup, and the uuid keeps names unique.
    stem = directory.name[: MAX_FILE_NAME_BYTES - len(suffix)]
    target = directory.with_name(stem + suffix)
    os.rename(directory, target)
    return target


def _remove_tree(directory: Path) -> None:
    try:
        shutil.rmtree(directory)
    except OSError as exc:
        # The directory is already out of the log (renamed); the next startup retries.
        logger.warning("could not remove %s (%s); it is removed at the next start", directory, exc)


def remove_deleted_dirs(root: Path) -> None:
    """Remove the ``*.deleted`` partition directories that deletions left behind."""
    for entry in os.scandir(root):
        if entry.name.endswith(DELETED_DIR_SUFFIX) and entry.is_dir(follow_symlinks=False):
            _remove_tree(Path(entry.path))


def warn_about_orphans(root: Path, metas: Mapping[str, TopicMetadata]) -> None:
    """Log every partition directory that no topic metadata claims (never removed)."""
    for entry in os.scandir(root):
        parsed = parse_partition_dir_name(entry.name)
        if parsed is None or not entry.is_dir():
            continue
        topic, partition = parsed
        meta = metas.get(topic)
        if meta is None or partition >= meta.partitions:
            # Never removed automatically: it may hold data we know nothing about.
            logger.warning(
                "orphan partition directory %s: no topic metadata claims it; leaving it "
                "alone. If an interrupted create left it, it is empty and is reused when "
                "that partition is created; otherwise move it out of %s",
                entry.path,
                root,
            )
        elif not meta.hosts(partition):
            logger.warning(
                "partition directory %s is not opened: this broker does not host a replica "
                "of %s-%d (stopped by the controller, or an interrupted hosting). It is kept "
                "and opened again if the controller gives this broker that replica",
                entry.path,
                topic,
                partition,
            )
