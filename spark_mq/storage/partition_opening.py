"""Opening the partition logs a topic change brings, and undoing that when the change fails.

A change of a topic's partitions (a create, added partitions, replicas a cluster broker is
given) opens the new partition logs *before* it commits the topic metadata that names them
(:mod:`~spark_mq.storage.log_manager` has the crash story): the directories are made and
fsynced into the log directory first. If anything fails before the commit, :func:`discard`
removes what was created and closes the rest, so a failed change leaves nothing behind.

What a partition directory that already exists means depends on the change:

- a **new** partition (``keep_records=False``): only an empty leftover of an interrupted
  change is adopted; one that holds records belongs to no metadata the manager knows, and
  the change is refused with :class:`~spark_mq.errors.TopicExistsError` saying to move it
  away (never adopted, never removed);
- a partition of the topic that the broker stopped hosting without deleting its log
  (``keep_records=True``): the directory is this topic's (deleting a topic removes the
  directories of all its partitions, hosted or not), so it is opened with its records,
  recovered from its start, as after a crash, because nothing says how it was closed.

Threads: called under the LogManager's lock.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from spark_mq.errors import StorageError, TopicExistsError
from spark_mq.storage.checkpoint_file import fsync_directory
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.topic_deletion import has_records
from spark_mq.storage.topic_names import partition_dir_name

logger = logging.getLogger(__name__)

#: ``(log, created)``: an opened log, and whether its directory was made by the open.
Opened = tuple[PartitionLog, bool]


@dataclasses.dataclass(frozen=True)
class PartitionOpener:
    """Opens partition logs under ``root`` with the manager's clock, flush executor and
    high-watermark mode."""

    root: Path
    time_ms: Callable[[], int]
    flush_executor: concurrent.futures.Executor | None
    high_watermark_follows_log_end: bool

    def open(
        self, name: str, partitions: Sequence[int], config: LogConfig, *, keep_records: bool
    ) -> list[Opened]:
        """Open the logs of ``partitions`` of topic ``name`` (rules in the module docstring)
        and make their directory entries durable; on failure nothing is left open or made."""
        opened: list[Opened] = []
        directory, existed = self.root, True
        try:
            for p in partitions:
                directory = self.root / partition_dir_name(name, p)
                existed = directory.exists()
                self._check_existing(name, p, directory, existed, keep_records=keep_records)
                log = PartitionLog.open(
                    directory,
                    config,
                    topic=name,
                    partition=p,
                    had_clean_shutdown=not existed,
                    time_ms=self.time_ms,
                    flush_executor=self.flush_executor,
                    high_watermark_follows_log_end=self.high_watermark_follows_log_end,
                )
                opened.append((log, not existed))
            # The new directory entries must be durable before the metadata that names them.
            fsync_directory(self.root)
        except BaseException:
            discard(opened)
            if not existed and len(opened) < len(partitions):
                # The partition whose open failed (a full disk, say) may have made its
                # directory and some files: a failed change leaves nothing behind.
                shutil.rmtree(directory, ignore_errors=True)
            raise
        return opened

    @staticmethod
    def _check_existing(
        name: str, partition: int, directory: Path, existed: bool, *, keep_records: bool
    ) -> None:
        if not existed:
            return
        if keep_records:
            if not directory.is_dir():
                raise StorageError(
                    f"cannot open partition {partition} of topic {name!r}: {directory} is not "
                    "a directory; move it out of the log directory and try again"
                )
            logger.info("opening the kept log of %s-%d in %s", name, partition, directory)
            return
        if not directory.is_dir() or has_records(directory):
            raise TopicExistsError(
                f"cannot create partition {partition} of topic {name!r}: {directory} already "
                "exists and holds data, but no topic metadata claims it (an orphan, perhaps "
                "copied in or left by lost metadata). Move it out of the log directory, or "
                "delete it, and try again",
                topic=name,
            )
        logger.info("reusing empty leftover directory %s", directory)


def discard(opened: list[Opened]) -> None:
    """Undo :meth:`PartitionOpener.open` after a later failure: remove what it created,
    close the rest."""
    for log, created in opened:
        try:
            if created:
                log.delete()
            else:
                log.close()
        except Exception as exc:  # the original failure is the one to raise
            logger.warning("cleaning up %s after a failed change: %s", log.directory, exc)
