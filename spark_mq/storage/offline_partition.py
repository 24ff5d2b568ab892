"""A partition of a log directory that could not be opened: what the LogManager keeps of it.

Opening a log directory opens every partition log in it. One that fails (an unreadable or
corrupt file that recovery cannot repair, no room for a file it must write, a directory that is
not a directory) must not keep the others from being served: the LogManager records it as an
:class:`OfflinePartition` with the reason, logs that once, and opens the rest, as Kafka takes
a failed log directory offline and goes on with the others. The partition stays in its
topic's metadata and keeps its place (partition numbers do not move), but it has no log until
the cause is fixed and the directory opened again (a broker restart):

- :meth:`~spark_mq.storage.log_manager.LogManager.get_log` raises
  :class:`~spark_mq.errors.PartitionOfflineError` naming it and the reason, which a broker
  answers as KAFKA_STORAGE_ERROR (56);
- its files are not touched: nothing is flushed, trimmed or deleted by retention or cleaning;
- its checkpointed offsets (recovery point, log start, cleaner's first dirty offset) are
  written back unchanged, so nothing about it is forgotten when it comes back;
- if the directory was not shut down cleanly, the LogManager's close writes no clean-shutdown
  marker, so the next start recovers the partition it could not recover this time.

Threads: immutable.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from spark_mq.errors import PartitionOfflineError, StorageError
from spark_mq.storage.log import PartitionLog

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class OfflinePartition:
    """One partition that could not be opened, and what must be kept of it."""

    topic: str
    partition: int
    #: Why it could not be opened: the error's type and message.
    reason: str
    #: Its entries in the checkpoint files when the directory was opened (None: it had none).
    recovery_point: int | None
    log_start_offset: int | None

    def error(self) -> PartitionOfflineError:
        """The error that every use of this partition raises."""
        return PartitionOfflineError(
            f"partition {self.topic}-{self.partition} is offline: its log could not be opened "
            f"({self.reason}); the other partitions are served. Fix the cause (see the "
            "broker's log) and restart the broker",
            topic=self.topic,
            partition=self.partition,
            reason=self.reason,
        )


def open_or_offline(
    open_log: Callable[[], PartitionLog],
    *,
    topic: str,
    partition: int,
    directory: Path,
    recovery_point: int | None,
    log_start_offset: int | None,
) -> PartitionLog | OfflinePartition:
    """``open_log()``, or, if it fails, the partition as offline, logged here, once.

    ``recovery_point`` and ``log_start_offset`` are the partition's checkpoint entries (None
    when it has none), kept so that they are written back unchanged.
    """
    try:
        return open_log()
    except Exception as exc:
        # Broad on purpose: whatever a damaged partition makes the loader raise must not keep
        # the rest of the directory from being served. Errors not raised on purpose get their
        # traceback in the log.
        reason = f"{type(exc).__name__}: {exc}"
        logger.error(
            "partition %s-%d is offline, its log in %s could not be opened: %s; the other "
            "partitions are served. Fix the cause and restart the broker",
            topic,
            partition,
            directory,
            reason,
            exc_info=None if isinstance(exc, StorageError) else exc,
        )
        return OfflinePartition(topic, partition, reason, recovery_point, log_start_offset)
