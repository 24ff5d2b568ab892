"""The log directory of one node: its topics, their partition logs and its checkpoints.

Layout of a log directory (``root``)::

    .lock                              DirLock: the owning process holds flock on it
    .clean_shutdown                    present only between a clean close() and the next open
    recovery-point-offset-checkpoint   per partition: everything below is fsynced
    log-start-offset-checkpoint        per partition: first offset readers may ask for
    cleaner-offset-checkpoint          per compacted partition: its first dirty offset
    replication-offset-checkpoint      per partition: its high watermark
    __meta/topics/<topic>.json         one file per topic: the topic exists iff this exists
    __meta/deleting/<topic_id>.json    a committed topic deletion still being carried out
    <topic>-<partition>/               one partition log (owned by PartitionLog)
    <topic>-<partition>.<uuid>.deleted/  a partition directory being removed
    <topic>-<partition>.<uuid>.stray/    a stray replica's log, set aside: kept, never opened

The topic metadata file is described in :mod:`~spark_mq.storage.topic_metadata`. A topic's
effective config is the manager's default config with the topic's overrides applied, so
changing the default changes every topic that does not override the key. The checkpoint
files use Kafka's format (:class:`~spark_mq.storage.checkpoint_file.OffsetCheckpointFile`).
``.clean_shutdown`` holds ``{"version": 0, "shutdown_ms": ...}``; only its existence matters.

The metadata file is the commit point of every topic change, and the crash story follows:

- **create_topic**: partition directories are created (and fsynced into ``root``) first, the
  metadata file last. A create that fails (a full disk: :class:`LogDirectoryFullError`)
  removes the directories it made before it raises. A crash before the metadata leaves empty
  partition directories and no topic; startup leaves them alone with a warning, and the next
  create (or add_partitions) of that name adopts them, because they hold no data. A leftover
  directory that *does* hold records is never adopted or removed: the create fails with
  :class:`TopicExistsError` saying to move it away. Before committing, the checkpoints are
  rewritten without the new topic, so no offsets of an earlier topic of the same name can be
  applied to the new one.
- **add_partitions**: same as create: new directories first, then the metadata with the new
  count. A crash in between leaves empty directories that the next attempt adopts.
- **host_partitions** (a cluster broker given replicas of a topic by the controller): as
  create or add_partitions: the directories first, then the metadata naming them hosted (and
  with the partition count grown if the replica is of a partition beyond it). A crash in
  between leaves directories that no metadata hosts: startup leaves them alone (with a
  warning) and the next host_partitions of them opens them.
- **stop_hosting** without deletion: the metadata without the partition is written, then its
  log closed; the directory stays (its records are kept, as Kafka keeps a stopped replica's
  log) and host_partitions opens it again, data and all. With deletion: the log is closed, the
  directory renamed to ``<dir>.<uuid>.deleted`` (it leaves the log at once), the metadata
  written, the directory removed. A stray replica goes the same way but its directory is
  renamed to ``<dir>.<uuid>.stray`` and kept (see
  :mod:`~spark_mq.storage.topic_deletion`). A crash before the metadata is written finds the
  directory gone and the partition still hosted: startup makes it a new empty partition (with
  a warning), which the controller's next request stops again. When the deletion leaves the
  topic with no partition hosted and no kept directory, the topic itself is deleted as
  delete_topic does.
- **alter_topic_config**: the metadata is rewritten, then open logs get the new config. A
  crash in between is harmless: the logs are opened with the new config at startup.
- **delete_topic**: the metadata file is *renamed* into ``__meta/deleting/`` (one atomic
  step that commits the deletion: the topic no longer exists), the logs are closed, each
  partition directory is renamed to ``<dir>.<uuid>.deleted``, the deletion record removed,
  and the directories deleted. Startup finishes whatever a crash interrupted: it renames the
  partition directories named by records in ``__meta/deleting/``, removes those records, and
  removes every ``*.deleted`` directory.
- **checkpoint**: each file is replaced atomically; a crash leaves the old or the new one.
  Old values are safe: a low recovery point only means more recovery work.
- **close**: logs flushed and closed, the checkpoints written, then ``.clean_shutdown``
  written and fsynced, then the lock released. A crash before the marker is durable makes
  the next start an unclean one.

Startup, in order: take the lock (:class:`~spark_mq.storage.dir_lock.DirLock`); read and delete
``.clean_shutdown`` (deleted at once and the deletion fsynced, so any later crash counts as
unclean); read the checkpoints (a corrupt one is logged and ignored, like Kafka does; a corrupt
recovery-point checkpoint also makes the start unclean); remove ``*.tmp`` leftovers; load the
topic metadata; finish interrupted deletions; remove ``*.deleted`` directories; list the
``*.stray`` directories kept for the operator; warn about orphan partition directories (no
metadata claims them, or the metadata does not host them: left untouched); open every hosted
partition log with its checkpointed offsets and ``had_clean_shutdown``. A metadata file whose
partition directory is missing gets a new, empty partition (with a warning: that data is
lost). A partition whose log cannot be opened does not stop the others: it is logged once and
kept as offline, with the reason (:mod:`~spark_mq.storage.offline_partition` says what that
means for its files, its checkpoints and the clean-shutdown marker); :meth:`LogManager.get_log`
raises
:class:`~spark_mq.errors.PartitionOfflineError` for it, and
:class:`~spark_mq.errors.NotLeaderOrFollowerError` for a partition the topic has but this
broker does not host.

Threads: one ``threading.RLock`` serialises every change of topic metadata (create, add
partitions, alter, delete), the checkpoint writes (two writers would share the ``.tmp``
file), ``flush_all``, ``apply_retention`` and ``close``, so no log is closed under one of them.
The topic table is replaced, never mutated, under that lock, so ``get_log``, ``logs``,
``list_topics``, ``topic_exists`` and ``describe_topic`` read a consistent snapshot without
taking it, and the produce and fetch paths never wait for an admin operation. Each
:class:`PartitionLog` is thread-safe on its own; a log obtained before ``delete_topic`` or
``close`` raises :class:`~spark_mq.errors.LogClosedError` afterwards.

    >>> import tempfile
    >>> with LogManager(tempfile.mkdtemp()) as manager:
    ...     info = manager.create_topic("events", partitions=2, config={"retention.ms": 60000})
    ...     (info.partition_count, dict(info.config_overrides))
    (2, {'retention.ms': '60000'})
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import difflib
import errno
import functools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Final, Self

from spark_mq.errors import (
    ConfigError,
    CorruptCheckpointError,
    InvalidPartitionsError,
    LogClosedError,
    LogDirectoryFullError,
    NotLeaderOrFollowerError,
    StorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from spark_mq.storage.checkpoint_file import (
    OffsetCheckpointFile,
    atomic_write_bytes,
    fsync_directory,
)
from spark_mq.storage.dir_lock import DirLock
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_cleaner import CleanerStats, LogCleaner
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.offline_partition import OfflinePartition, open_or_offline
from spark_mq.storage.partition_opening import PartitionOpener, discard
from spark_mq.storage.topic_deletion import (
    carry_out_deletion,
    delete_partition_dir,
    finish_deletions,
    remove_deleted_dir,
    remove_deleted_dirs,
    set_aside_stray_dir,
    warn_about_orphans,
    warn_about_strays,
)
from spark_mq.storage.topic_metadata import (
    MAX_PARTITIONS_PER_TOPIC,
    PartitionInfo,
    TopicInfo,
    TopicMetadata,
)
from spark_mq.storage.topic_names import partition_dir_name, validate_topic_name

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE: Final = ".clean_shutdown"
RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT: Final = "cleaner-offset-checkpoint"
#: Kafka's high watermark checkpoint: readers never see past the high watermark, so it must
#: survive a restart rather than be recomputed (a replicated log's high watermark is not its
#: log end).
REPLICATION_OFFSET_CHECKPOINT: Final = "replication-offset-checkpoint"
META_DIR: Final = "__meta"
TMP_SUFFIX: Final = ".tmp"


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _hosted_or_all(hosted: Collection[int], count: int) -> frozenset[int] | None:
    """The metadata's ``hosted`` for these partitions: None when they are all of them."""
    chosen = frozenset(hosted)
    return None if chosen == frozenset(range(count)) else chosen


@dataclasses.dataclass(frozen=True)
class _Topic:
    """A live topic: its metadata, effective config and partitions (index = partition): an
    open log, an offline partition that could not be opened at startup, or None for a
    partition this broker does not host."""

    meta: TopicMetadata
    config: LogConfig
    partitions: tuple[PartitionLog | OfflinePartition | None, ...]

    @property
    def logs(self) -> tuple[PartitionLog, ...]:
        """The open logs (offline partitions left out)."""
        return tuple(p for p in self.partitions if isinstance(p, PartitionLog))

    @property
    def offline(self) -> tuple[OfflinePartition, ...]:
        return tuple(p for p in self.partitions if isinstance(p, OfflinePartition))


@contextlib.contextmanager
def _io_errors(what: str, root: Path) -> Iterator[None]:
    """Map an OSError from the filesystem to the storage error a caller can act on."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise LogDirectoryFullError(
                f"{what} failed: the disk holding {root} is full ({exc}); free space and retry",
                path=str(root),
            ) from exc
        raise StorageError(f"{what} failed in log directory {root}: {exc}") from exc


def _kafka_key(name: str) -> str:
    """The Kafka key of a LogConfig setting given as ``retention.ms`` or ``retention_ms``."""
    settings = LogConfig.settings()
    for candidate in (name, name.replace("_", ".")):
        if candidate in settings:
            return candidate
    for key, field in settings.items():
        if field.name == name:
            return key
    close = difflib.get_close_matches(name.replace("_", "."), list(settings), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"unknown topic setting {name!r}{hint} (valid keys: {', '.join(sorted(settings))})",
        key=name,
    )


class LogManager:
    """Owns one log directory: creates, opens, alters and deletes topics and their logs.

    ``time_ms`` is the clock given to every log (tests inject one); ``owner`` is recorded in
    the lock file so that a refused opener can say who holds the directory; ``flush_executor``
    is passed to every log for its background fsyncs. Opening takes the directory's lock:
    a second manager on the same directory, in any process, gets
    :class:`~spark_mq.errors.LogDirectoryLockedError`.

    ``high_watermark_follows_log_end`` (the default: one node, no replication) makes every
    log's high watermark its log end. A cluster broker turns it off: each log then starts at
    the high watermark ``replication-offset-checkpoint`` kept for it (at its log start without
    one, as Kafka), and replication moves it.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        default_config: LogConfig | None = None,
        *,
        time_ms: Callable[[], int] = _wall_clock_ms,
        owner: str | None = None,
        flush_executor: concurrent.futures.Executor | None = None,
        high_watermark_follows_log_end: bool = True,
    ) -> None:
        self.root = Path(root)
        self._hw_follows_leo = high_watermark_follows_log_end
        self.default_config = default_config if default_config is not None else LogConfig()
        self._time_ms = time_ms
        self._flush_executor = flush_executor
        self._opener = PartitionOpener(
            self.root, time_ms, flush_executor, high_watermark_follows_log_end
        )
        self._topics_dir = self.root / META_DIR / "topics"
        self._deleting_dir = self.root / META_DIR / "deleting"
        self._recovery_checkpoint = OffsetCheckpointFile(self.root / RECOVERY_POINT_CHECKPOINT)
        self._start_checkpoint = OffsetCheckpointFile(self.root / LOG_START_OFFSET_CHECKPOINT)
        self._cleaner_checkpoint = OffsetCheckpointFile(self.root / CLEANER_OFFSET_CHECKPOINT)
        self._hw_checkpoint = OffsetCheckpointFile(self.root / REPLICATION_OFFSET_CHECKPOINT)
        #: High watermarks read at startup: offline partitions keep theirs in the checkpoint.
        self._startup_high_watermarks: Mapping[tuple[str, int], int] = {}
        # One cleaning pass at a time; cleaning does not hold _lock, so admin calls go on.
        self._cleaning_lock = threading.Lock()
        self._lock = threading.RLock()
        self._closed = False
        self._topics: Mapping[str, _Topic] = MappingProxyType({})
        #: Whether the directory held nothing of a log before this open (set by startup).
        self.new_directory = False
        # Whether an offline partition missed the recovery of an unclean start: close() then
        # writes no clean-shutdown marker, so that the next start recovers it.
        self._offline_unrecovered = False
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create log directory {self.root}: {exc}") from exc
        self._dir_lock = DirLock(self.root, owner=owner, time_ms=time_ms)
        try:
            with _io_errors("opening the log directory", self.root):
                self.had_clean_shutdown = self._startup()
        except BaseException:
            # Leave nothing open and the directory unlocked, so the caller can fix and retry.
            self._closed = True
            for topic in self._topics.values():
                discard([(log, False) for log in topic.logs])
            self._topics = MappingProxyType({})
            self._dir_lock.release()
            raise

    # -----------------------------------------------------------------------------------------
    # Startup

    def _startup(self) -> bool:
        had_clean_shutdown = self._consume_clean_shutdown_marker()
        # Nothing was ever stored here: no marker, no recovery points, no topic. Such a start
        # is neither clean nor a recovery, and the broker says so.
        self.new_directory = (
            not had_clean_shutdown
            and not self._recovery_checkpoint.path.exists()
            and not any(self._topics_dir.glob("*.json"))
        )
        self._topics_dir.mkdir(parents=True, exist_ok=True)
        self._deleting_dir.mkdir(parents=True, exist_ok=True)
        recovery_points = self._read_checkpoint(self._recovery_checkpoint)
        if recovery_points is None:
            # Without recovery points every log is recovered from its start: slower, but safe.
            had_clean_shutdown = False
        log_start_offsets = self._read_checkpoint(self._start_checkpoint)
        self._startup_high_watermarks = self._read_checkpoint(self._hw_checkpoint) or {}
        self._remove_tmp_files()
        metas: dict[str, TopicMetadata] = {}
        for path in sorted(self._topics_dir.glob("*.json")):
            meta = TopicMetadata.read(path)
            if path.name != f"{meta.name}.json":
                raise CorruptCheckpointError(
                    f"topic metadata file {path} describes topic {meta.name!r}; the file name "
                    "must be <topic>.json. Rename or remove it",
                    path=str(path),
                )
            metas[meta.name] = meta
        finish_deletions(self.root, self._deleting_dir, live=set(metas))
        remove_deleted_dirs(self.root)
        warn_about_orphans(self.root, metas)
        warn_about_strays(self.root)

        topics: dict[str, _Topic] = {}
        for name, meta in metas.items():
            try:
                config = self.default_config.with_overrides(meta.config)
            except ConfigError as exc:
                raise ConfigError(
                    f"topic {name!r} in {self._metadata_path(name)}: {exc}",
                    key=exc.key,
                    value=exc.value,
                ) from exc
            logs: list[PartitionLog | OfflinePartition | None] = []
            try:
                for p in range(meta.partitions):
                    if not meta.hosts(p):
                        logs.append(None)
                        continue
                    key = (name, p)
                    logs.append(
                        open_or_offline(
                            functools.partial(
                                self._open_existing,
                                meta,
                                p,
                                config=config,
                                recovery_points=recovery_points or {},
                                log_start_offsets=log_start_offsets or {},
                                had_clean_shutdown=had_clean_shutdown,
                            ),
                            topic=name,
                            partition=p,
                            directory=self.root / partition_dir_name(name, p),
                            recovery_point=(recovery_points or {}).get(key),
                            log_start_offset=(log_start_offsets or {}).get(key),
                        )
                    )
            finally:
                # Published even when a later partition fails, so the error path closes them.
                topics[name] = _Topic(meta, config, tuple(logs))
                self._topics = MappingProxyType(dict(topics))
        offline = [p for topic in topics.values() for p in topic.offline]
        self._offline_unrecovered = bool(offline) and not had_clean_shutdown
        if offline:
            logger.error(
                "log directory %s opened with %d offline partition(s): %s",
                self.root,
                len(offline),
                ", ".join(f"{p.topic}-{p.partition}" for p in offline),
            )
        return had_clean_shutdown

    def _consume_clean_shutdown_marker(self) -> bool:
        marker = self.root / CLEAN_SHUTDOWN_FILE
        try:
            marker.unlink()
        except FileNotFoundError:
            return False
        # The removal must be durable before any log is touched: if it came back after a power
        # failure, the next start would skip recovery of logs written after this one.
        fsync_directory(self.root)
        return True

    def _read_checkpoint(
        self, checkpoint: OffsetCheckpointFile
    ) -> dict[tuple[str, int], int] | None:
        try:
            return checkpoint.read()
        except CorruptCheckpointError as exc:
            # As Kafka does: checkpoints are an optimisation, so a damaged one is reported and
            # ignored (recovery starts from offset 0, log start offsets from the segments).
            logger.warning("%s; ignoring it", exc)
            return None

    def _remove_tmp_files(self) -> None:
        """Torn outputs of interrupted atomic writes: never read, so simply removed."""
        for directory in (self.root, self._topics_dir):
            for path in directory.glob(f"*{TMP_SUFFIX}"):
                if path.is_file():
                    path.unlink(missing_ok=True)

    def _open_existing(
        self,
        meta: TopicMetadata,
        partition: int,
        *,
        config: LogConfig,
        recovery_points: Mapping[tuple[str, int], int],
        log_start_offsets: Mapping[tuple[str, int], int],
        had_clean_shutdown: bool,
    ) -> PartitionLog:
        directory = self.root / partition_dir_name(meta.name, partition)
        key = (meta.name, partition)
        if directory.is_dir():
            recovery_point, log_start = recovery_points.get(key, 0), log_start_offsets.get(key)
        else:
            logger.warning(
                "partition directory %s of topic %r is missing; creating an empty partition "
                "(any records it held are lost)",
                directory,
                meta.name,
            )
            recovery_point, log_start = 0, None
        return PartitionLog.open(
            directory,
            config,
            topic=meta.name,
            partition=partition,
            recovery_point=recovery_point,
            log_start_offset=log_start,
            had_clean_shutdown=had_clean_shutdown,
            time_ms=self._time_ms,
            flush_executor=self._flush_executor,
            high_watermark_follows_log_end=self._hw_follows_leo,
            high_watermark=self._startup_high_watermarks.get(key, 0),
        )

    # -----------------------------------------------------------------------------------------
    # Helpers

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"the log manager of {self.root} is closed")

    def _metadata_path(self, name: str) -> Path:
        return self._topics_dir / f"{name}.json"

    def _write_metadata(self, meta: TopicMetadata) -> None:
        # "<topic>.json.tmp" could exceed 255 bytes for a 249-character name; "<topic>.tmp"
        # cannot, and never collides with a metadata file because those end in ".json".
        atomic_write_bytes(
            self._metadata_path(meta.name),
            meta.to_json(),
            tmp_path=self._topics_dir / f"{meta.name}{TMP_SUFFIX}",
        )

    def _require_topic(self, name: str) -> _Topic:
        topics = self._topics
        topic = topics.get(name)
        if topic is None:
            names = sorted(topics)
            shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if names[10:] else "")
            raise UnknownTopicOrPartitionError(
                f"topic {name!r} does not exist in log directory {self.root}; create it first "
                f"(existing topics: {shown or 'none'})",
                topic=name,
            )
        return topic

    def _publish(self, name: str, topic: _Topic | None) -> None:
        topics = dict(self._topics)
        if topic is None:
            del topics[name]
        else:
            topics[name] = topic
        self._topics = MappingProxyType(topics)

    def _normalize_overrides(self, config: Mapping[str, object]) -> dict[str, str]:
        """Validate settings against the default config; return them as Kafka key -> string."""
        effective = self.default_config.with_overrides(config)  # ConfigError names a bad key
        properties = effective.to_properties()
        return {_kafka_key(k): properties[_kafka_key(k)] for k in config}

    def _check_count(self, name: str, requested: object, current: int | None) -> int:
        if type(requested) is not int or not 1 <= requested <= MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(
                f"topic {name!r}: the number of partitions must be an int from 1 to "
                f"{MAX_PARTITIONS_PER_TOPIC}, got {requested!r}",
                topic=name,
                current=current,
                requested=requested if type(requested) is int else -1,
            )
        return requested

    @staticmethod
    def _check_hosted(name: str, partitions: Collection[int]) -> list[int]:
        """The partitions to host, sorted; anything but ints from 0 up is refused."""
        chosen = sorted(set(partitions))
        if not all(type(p) is int and 0 <= p < MAX_PARTITIONS_PER_TOPIC for p in chosen):
            raise InvalidPartitionsError(
                f"topic {name!r}: the partitions to host must be ints from 0 to "
                f"{MAX_PARTITIONS_PER_TOPIC - 1}, got {sorted(partitions, key=repr)!r}",
                topic=name,
                current=None,
                requested=-1,
            )
        return chosen

    # -----------------------------------------------------------------------------------------
    # Topic administration

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, object] | None = None,
        *,
        hosted: Collection[int] | None = None,
    ) -> TopicInfo:
        """Create a topic with ``partitions`` empty partitions and config overrides.

        ``hosted``: the partitions this broker holds a replica of (a cluster broker's, as the
        controller assigned them); None, the default, is every partition, as on one node.
        Raises InvalidTopicError, InvalidPartitionsError, ConfigError (naming the key) or
        TopicExistsError. Crash-safe: see the module docstring.
        """
        validate_topic_name(name)
        with self._lock:
            self._check_open()
            count = self._check_count(name, partitions, None)
            local = list(range(count)) if hosted is None else self._check_hosted(name, hosted)
            if local and local[-1] >= count:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {count} partitions, so it cannot host partition "
                    f"{local[-1]}: hosted partitions must be from 0 to {count - 1}",
                    topic=name,
                    current=None,
                    requested=count,
                )
            overrides = self._normalize_overrides(config or {})
            effective = self.default_config.with_overrides(overrides)
            if name in self._topics:
                raise TopicExistsError(
                    f"topic {name!r} already exists in {self.root}; delete it first or use "
                    "add_partitions / alter_topic_config to change it",
                    topic=name,
                )
            with _io_errors(f"creating topic {name!r}", self.root):
                finish_deletions(self.root, self._deleting_dir, live=set(self._topics))
                opened = self._opener.open(name, local, effective, keep_records=False)
                meta = TopicMetadata(
                    name,
                    uuid.uuid4().hex,
                    count,
                    MappingProxyType(overrides),
                    self._time_ms(),
                    _hosted_or_all(local, count),
                )
                try:
                    # Offsets checkpointed for an earlier topic of this name must not be applied
                    # to this one after a crash, so the checkpoints are rewritten without it.
                    self._write_checkpoints()
                    self._write_metadata(meta)
                except BaseException:
                    discard(opened)
                    # If only the final directory fsync failed, the metadata may be in place.
                    with contextlib.suppress(OSError):
                        self._metadata_path(name).unlink()
                    raise
            slots: list[PartitionLog | OfflinePartition | None] = [None] * count
            for log, _ in opened:
                slots[log.partition] = log
            self._publish(name, _Topic(meta, effective, tuple(slots)))
            return self.describe_topic(name)

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow topic ``name`` to ``total`` partitions (Kafka's CreatePartitions).

        Partitions can only be added: removing one would move its keys to other partitions and
        lose its records and its consumers' offsets, so Kafka does not allow it either.
        """
        with self._lock:
            self._check_open()
            topic = self._require_topic(name)
            current = topic.meta.partitions
            if type(total) is int and total <= current:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {current} partitions and {total} were requested: "
                    "partitions can only be added, never removed (keys would move to other "
                    "partitions and records and offsets would be lost). Request a total above "
                    f"{current}",
                    topic=name,
                    current=current,
                    requested=total,
                )
            count = self._check_count(name, total, current)
            with _io_errors(f"adding partitions to topic {name!r}", self.root):
                opened = self._opener.open(
                    name, range(current, count), topic.config, keep_records=False
                )
                hosted = topic.meta.hosted
                meta = dataclasses.replace(
                    topic.meta,
                    partitions=count,
                    hosted=None if hosted is None else hosted | frozenset(range(current, count)),
                )
                try:
                    self._write_metadata(meta)
                except BaseException:
                    discard(opened)
                    raise
            logs = topic.partitions + tuple(log for log, _ in opened)
            self._publish(name, _Topic(meta, topic.config, logs))
            return self.describe_topic(name)

    def host_partitions(
        self,
        name: str,
        partitions: Collection[int],
        *,
        partition_count: int | None = None,
        config: Mapping[str, object] | None = None,
    ) -> TopicInfo:
        """Hold replicas of ``partitions`` of topic ``name`` here (a cluster broker given them
        by the controller); partitions already hosted are left as they are.

        A topic not here yet is created (with ``config`` as its overrides; an existing topic
        keeps its own) hosting only these. The topic's partition count grows to
        ``partition_count`` or past the largest partition named, whichever is more; it never
        shrinks. A partition this broker stopped hosting without deleting it gets its kept
        log back, records and all (recovered from its start, as after a crash: nothing says
        how it was closed). Crash-safe: see the module docstring.
        """
        validate_topic_name(name)
        with self._lock:
            self._check_open()
            wanted = self._check_hosted(name, partitions)
            topic = self._topics.get(name)
            needed = max([partition_count or 0, *(p + 1 for p in wanted)])
            if topic is None:
                return self.create_topic(name, max(needed, 1), config, hosted=wanted)
            current = topic.meta.partitions
            count = self._check_count(name, max(current, needed), current)
            kept = [p for p in wanted if p < current and topic.partitions[p] is None]
            fresh = [p for p in wanted if p >= current]
            if not kept and not fresh and count == current:
                return self.describe_topic(name)
            hosted = {p for p in range(current) if topic.meta.hosts(p)}
            hosted.update(wanted)
            meta = dataclasses.replace(
                topic.meta, partitions=count, hosted=_hosted_or_all(hosted, count)
            )
            opened: list[tuple[PartitionLog, bool]] = []
            with _io_errors(f"hosting partitions {wanted} of topic {name!r}", self.root):
                try:
                    opened += self._opener.open(name, kept, topic.config, keep_records=True)
                    opened += self._opener.open(name, fresh, topic.config, keep_records=False)
                    self._write_metadata(meta)
                except BaseException:
                    discard(opened)
                    raise
            slots = list(topic.partitions) + [None] * (count - current)
            for log, _ in opened:
                slots[log.partition] = log
            self._publish(name, _Topic(meta, topic.config, tuple(slots)))
            logger.info("now hosting %s of topic %r", sorted(p for p in kept + fresh), name)
            return self.describe_topic(name)

    def stop_hosting(self, name: str, partition: int, *, delete: bool, stray: bool = False) -> bool:
        """Stop holding a replica of ``name``-``partition`` here: its log is closed and, with
        ``delete``, its directory removed; without, the directory is kept for
        :meth:`host_partitions` to open again. ``stray`` (with ``delete``): the directory is
        set aside as ``*.stray`` instead of removed, kept for an operator and never opened.
        Whether the partition was hosted (a partition not hosted, or of a topic not here, is
        no error: the controller may say it twice; ``delete`` still removes a kept
        directory). A deletion that leaves the topic with nothing here deletes the topic.
        Crash-safe: see the module docstring.
        """
        with self._lock:
            self._check_open()
            topic = self._topics.get(name)
            if topic is None or type(partition) is not int:
                return False
            if not 0 <= partition < len(topic.partitions):
                return False
            directory = self.root / partition_dir_name(name, partition)
            log = topic.partitions[partition]
            if log is None and not (delete and directory.exists()):
                return False
            count = topic.meta.partitions
            hosted = {p for p in range(count) if topic.meta.hosts(p) and p != partition}
            meta = dataclasses.replace(topic.meta, hosted=_hosted_or_all(hosted, count))
            slots = list(topic.partitions)
            slots[partition] = None
            with _io_errors(f"stopping the replica of {name}-{partition}", self.root):
                if not delete:
                    self._write_metadata(meta)
                    self._publish(name, _Topic(meta, topic.config, tuple(slots)))
                    if isinstance(log, PartitionLog):
                        log.close()
                    return True
                self._publish(name, _Topic(meta, topic.config, tuple(slots)))
                if isinstance(log, PartitionLog):
                    log.close()
                doomed = None
                if directory.exists():
                    if stray:
                        set_aside_stray_dir(self.root, directory)
                    else:
                        doomed = delete_partition_dir(self.root, directory)
                left = [
                    p for p in range(count) if (self.root / partition_dir_name(name, p)).exists()
                ]
                if hosted or left:
                    self._write_metadata(meta)
                else:
                    # Nothing of the topic is left here: delete it, as delete_topic does.
                    record = self._deleting_dir / f"{meta.topic_id}.json"
                    os.replace(self._metadata_path(name), record)
                    self._publish(name, None)
                    fsync_directory(self._deleting_dir)
                    fsync_directory(self._topics_dir)
                    carry_out_deletion(self.root, self._deleting_dir, meta, record)
                if doomed is not None:
                    remove_deleted_dir(doomed)
            return log is not None

    def alter_topic_config(self, name: str, config: Mapping[str, object | None]) -> TopicInfo:
        """Set (or with a ``None`` value, remove) config overrides of topic ``name``.

        Incremental, like Kafka's IncrementalAlterConfigs: keys not given keep their values.
        The open logs get the new config at once.
        """
        with self._lock:
            self._check_open()
            topic = self._require_topic(name)
            removed = {_kafka_key(k) for k, v in config.items() if v is None}
            merged: dict[str, object] = {
                k: v for k, v in topic.meta.config.items() if k not in removed
            }
            for key, value in config.items():
                if value is not None:
                    merged[_kafka_key(key)] = value
            overrides = self._normalize_overrides(merged)
            effective = self.default_config.with_overrides(overrides)
            meta = dataclasses.replace(topic.meta, config=MappingProxyType(overrides))
            with _io_errors(f"altering the config of topic {name!r}", self.root):
                self._write_metadata(meta)
            for log in topic.logs:
                log.update_config(effective)
            self._publish(name, _Topic(meta, effective, topic.partitions))
            return self.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name`` and all its data. Crash-safe: see the module docstring."""
        with self._lock:
            self._check_open()
            topic = self._require_topic(name)
            record = self._deleting_dir / f"{topic.meta.topic_id}.json"
            with _io_errors(f"deleting topic {name!r}", self.root):
                # The commit point: from this rename on, the topic does not exist.
                os.replace(self._metadata_path(name), record)
                self._publish(name, None)
                fsync_directory(self._deleting_dir)
                fsync_directory(self._topics_dir)
                for log in topic.logs:
                    log.close()
                carry_out_deletion(self.root, self._deleting_dir, topic.meta, record)

    # -----------------------------------------------------------------------------------------
    # Queries

    def describe_topic(self, name: str) -> TopicInfo:
        """A snapshot of topic ``name``: identity, config and per-partition offsets."""
        self._check_open()
        topic = self._require_topic(name)
        partitions = tuple(
            PartitionInfo(
                topic=name,
                partition=p,
                log_start_offset=log.log_start_offset,
                log_end_offset=log.log_end_offset,
                high_watermark=log.high_watermark,
                recovery_point=log.recovery_point,
                size_bytes=log.size_bytes,
                num_segments=log.num_segments,
            )
            if isinstance(log, PartitionLog)
            else PartitionInfo.not_hosted(name, p)
            if log is None
            else PartitionInfo.offline(name, p, log.reason)
            for p, log in enumerate(topic.partitions)
        )
        meta = topic.meta
        return TopicInfo(
            name, meta.topic_id, partitions, meta.config, topic.config, meta.created_ms
        )

    def list_topics(self) -> list[str]:
        self._check_open()
        return sorted(self._topics)

    def topic_exists(self, name: str) -> bool:
        self._check_open()
        return name in self._topics

    def get_log(self, topic: str, partition: int) -> PartitionLog:
        """The log of one partition; UnknownTopicOrPartitionError names what does not exist,
        PartitionOfflineError a partition that could not be opened (and why),
        NotLeaderOrFollowerError one this broker does not host."""
        self._check_open()
        live = self._require_topic(topic)
        if type(partition) is not int or not 0 <= partition < len(live.partitions):
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0 to {len(live.partitions) - 1}; partition "
                f"{partition!r} does not exist (add_partitions adds more)",
                topic=topic,
                partition=partition if type(partition) is int else None,
            )
        log = live.partitions[partition]
        if log is None:
            raise NotLeaderOrFollowerError(
                f"this broker hosts no replica of {topic}-{partition} (log directory "
                f"{self.root}); refresh metadata to find the brokers that do"
            )
        if isinstance(log, OfflinePartition):
            raise log.error()
        return log

    def hosted_partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` this broker holds a replica of (offline ones included);
        UnknownTopicOrPartitionError for a topic not here."""
        self._check_open()
        return [p for p, log in enumerate(self._require_topic(topic).partitions) if log is not None]

    def offline_partitions(self) -> list[OfflinePartition]:
        """The partitions that could not be opened, by topic name then partition."""
        self._check_open()
        topics = self._topics
        return [p for name in sorted(topics) for p in topics[name].offline]

    def logs(self) -> Iterator[PartitionLog]:
        """Every open partition log, by topic name then partition."""
        self._check_open()
        topics = self._topics
        return iter([log for name in sorted(topics) for log in topics[name].logs])

    # -----------------------------------------------------------------------------------------
    # Maintenance

    def _write_checkpoints(self) -> None:
        logs = [log for topic in self._topics.values() for log in topic.logs]
        offline = [p for topic in self._topics.values() for p in topic.offline]
        recovery = {(x.topic, x.partition): x.recovery_point for x in logs}
        starts = {(x.topic, x.partition): x.log_start_offset for x in logs}
        high_watermarks = {(x.topic, x.partition): x.high_watermark for x in logs}
        # Offline partitions keep what the checkpoints said of them when the directory opened.
        for p in offline:
            key = (p.topic, p.partition)
            if p.recovery_point is not None:
                recovery[key] = p.recovery_point
            if p.log_start_offset is not None:
                starts[key] = p.log_start_offset
            if key in self._startup_high_watermarks:
                high_watermarks[key] = self._startup_high_watermarks[key]
        self._recovery_checkpoint.write(recovery)
        self._start_checkpoint.write(starts)
        self._hw_checkpoint.write(high_watermarks)
        if self._cleaner_checkpoint.path.exists():
            # Like the two above, rewritten without topics that are gone or being created, so
            # a new topic never inherits the first dirty offset of an old one of its name.
            cleaned = self._read_checkpoint(self._cleaner_checkpoint) or {}
            live = {(x.topic, x.partition) for x in logs}
            live.update((p.topic, p.partition) for p in offline)
            self._cleaner_checkpoint.write({k: v for k, v in cleaned.items() if k in live})

    def checkpoint(self) -> None:
        """Write every log's recovery point, log start offset and high watermark to the
        checkpoint files."""
        with self._lock:
            self._check_open()
            with _io_errors("writing the checkpoints", self.root):
                self._write_checkpoints()

    def clean_logs(self, now_ms: int | None = None) -> CleanerStats:
        """Compact every log whose ``cleanup.policy`` has ``compact``; the stats' total.

        Each log is cleaned from its first dirty offset in ``cleaner-offset-checkpoint``
        (Kafka's format; a log without an entry starts at its log start) if it qualifies
        (rules in :mod:`~spark_mq.storage.log_cleaner`), and the file is rewritten with the new
        offsets. The pass runs without the manager's lock; a log closed or deleted meanwhile
        is skipped, and a log whose cleaning fails is logged and skipped. ``now_ms``
        overrides the clock.
        """
        with self._cleaning_lock:
            with self._lock:
                self._check_open()
                logs = [log for log in self.logs() if log.config.compact]
                checkpoint = self._read_checkpoint(self._cleaner_checkpoint) or {}
            cleaner = LogCleaner(time_ms=self._time_ms)
            passes = []
            for log in logs:
                key = (log.topic, log.partition)
                first_dirty = checkpoint.get(key, log.log_start_offset)
                try:
                    stats = cleaner.clean(log, first_dirty_offset=first_dirty, now_ms=now_ms)
                except StorageError as exc:
                    # As Kafka: one log that cannot be cleaned (a corrupt batch, a full disk)
                    # must not stop the others; it is retried on the next call.
                    logger.error("cleaning %s-%d failed: %s", log.topic, log.partition, exc)
                    continue
                if stats is not None:
                    checkpoint[key] = stats.first_dirty_offset
                    passes.append(stats)
            with self._lock:
                if not self._closed:
                    # Entries of topics deleted since are dropped with them; offline
                    # partitions keep theirs.
                    live = {(x.topic, x.partition) for x in self.logs() if x.config.compact}
                    live.update((x.topic, x.partition) for x in self.offline_partitions())
                    with _io_errors("writing the cleaner checkpoint", self.root):
                        self._cleaner_checkpoint.write(
                            {k: v for k, v in checkpoint.items() if k in live}
                        )
            return CleanerStats.total(passes)

    def apply_retention(self) -> int:
        """Apply every log's retention; returns how many segments were deleted in total."""
        with self._lock:
            self._check_open()
            return sum(log.apply_retention() for log in self.logs())

    def flush_all(self) -> None:
        """fsync every log up to its end (moving its recovery point there)."""
        with self._lock:
            self._check_open()
            for log in self.logs():
                log.flush()

    def close(self) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown marker, and
        release the directory. Idempotent.

        If any step fails, the rest still runs (except the marker, so the next start recovers)
        and the first error is raised; the directory is unlocked either way.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                with _io_errors("closing the log directory", self.root):
                    self._close_logs_and_mark_clean()
            finally:
                self._topics = MappingProxyType({})
                self._dir_lock.release()

    def _close_logs_and_mark_clean(self) -> None:
        logs = [log for topic in self._topics.values() for log in topic.logs]
        failures: list[Exception] = []
        # Broad catches on purpose: one failing log must not keep the others open or unflushed.
        for log in logs:
            try:
                log.close()  # flushes first
            except Exception as exc:
                logger.error("closing %s failed: %s", log.directory, exc)
                failures.append(exc)
        try:
            self._write_checkpoints()
        except Exception as exc:
            logger.error("writing the checkpoints of %s failed: %s", self.root, exc)
            failures.append(exc)
        if failures:
            raise failures[0]
        if self._offline_unrecovered:
            logger.warning(
                "no clean-shutdown marker for %s: offline partitions were not recovered, so "
                "the next start recovers every partition",
                self.root,
            )
            return
        marker = json.dumps({"version": 0, "shutdown_ms": self._time_ms()}).encode()
        atomic_write_bytes(self.root / CLEAN_SHUTDOWN_FILE, marker)

    def directory_lost(self) -> str | None:
        """Why the directory this manager opened is no longer at :attr:`root` (deleted, moved,
        or replaced by another directory at the same path), None while it is there; see
        :meth:`DirLock.lost <spark_mq.storage.dir_lock.DirLock.lost>`. Cheap (two ``stat``
        calls), so a broker can ask every second."""
        return self._dir_lock.lost()

    def abandon(self) -> None:
        """Let go of a directory that is lost (:meth:`directory_lost`) without writing to it.

        Nothing is flushed, closed, checkpointed or marked clean: :meth:`close` writes the
        checkpoints and the clean-shutdown marker by path, which would put them into whatever
        now stands at :attr:`root` (a new directory, perhaps another broker's). The logs'
        descriptors close with their objects (their finalizers write nothing); the lock is
        released. Idempotent; the manager is closed afterwards.
        """
        with self._lock:
            self._closed = True
            self._topics = MappingProxyType({})
            self._dir_lock.release()

    def _simulate_crash(self) -> None:
        """Test hook: stop as if the process had died. Nothing is flushed, closed, checkpointed
        or marked clean; only the directory lock is released so another manager can open it.
        """
        self.abandon()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._topics)} topics"
        return f"LogManager({str(self.root)!r}, {state})"
