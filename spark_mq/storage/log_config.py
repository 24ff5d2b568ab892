"""Per-topic log configuration: Kafka's topic-level keys and defaults.

Every default is Kafka's (3.x/4.x topic configs) unless the field's doc says why it differs.
``LONG_MAX`` means "never" exactly as Long.MAX_VALUE does in Kafka, and ``-1`` means unlimited
for the retention settings.

    >>> LogConfig.from_properties({"cleanup.policy": "compact,delete"}).compact
    True
"""

from __future__ import annotations

import dataclasses

from spark_mq.config import (
    LONG_MAX,
    Config,
    at_least,
    between,
    one_of,
    parse_bool,
    parse_float,
    parse_int,
    parse_list,
    parse_str,
    setting,
    subset_of,
    unlimited_or_at_least,
)
from spark_mq.storage.record_batch import HEADER_SIZE

CODEC_CHOICES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


@dataclasses.dataclass(frozen=True)
class LogConfig(Config):
    """Settings of one partition log; topics override them per key."""

    component = "topic"

    segment_bytes: int = setting(
        "segment.bytes",
        1024 * 1024 * 1024,
        "Roll a new segment once the active one would exceed this many bytes.",
        parse=parse_int,
        check=at_least(HEADER_SIZE + 1),
    )
    segment_ms: int = setting(
        "segment.ms",
        7 * 24 * 3600 * 1000,
        "Roll a new segment once the active one's first batch is this old, so retention and "
        "compaction can act on it.",
        parse=parse_int,
        check=at_least(1),
    )
    segment_jitter_ms: int = setting(
        "segment.jitter.ms",
        0,
        "Random jitter subtracted from segment.ms per segment, to avoid synchronised rolls.",
        parse=parse_int,
        check=at_least(0),
    )
    segment_index_bytes: int = setting(
        "segment.index.bytes",
        10 * 1024 * 1024,
        "Length of the active segment's offset and time index files (sparse: disk blocks are "
        "taken a page at a time as entries are written); a full index rolls the segment.",
        parse=parse_int,
        check=at_least(12),
    )
    index_interval_bytes: int = setting(
        "index.interval.bytes",
        4096,
        "Add an offset-index and time-index entry after this many bytes of batches.",
        parse=parse_int,
        check=at_least(0),
    )
    retention_ms: int = setting(
        "retention.ms",
        7 * 24 * 3600 * 1000,
        "Delete a segment once its newest record is older than this; -1 keeps data forever.",
        parse=parse_int,
        check=unlimited_or_at_least(0),
    )
    retention_bytes: int = setting(
        "retention.bytes",
        -1,
        "Delete the oldest segments while the partition is larger than this; -1 is unlimited.",
        parse=parse_int,
        check=unlimited_or_at_least(0),
    )
    flush_messages: int = setting(
        "flush.messages",
        LONG_MAX,
        "fsync the log after this many records. The default never forces a flush and leaves "
        "durability to the OS and to replication, as Kafka does.",
        parse=parse_int,
        check=at_least(1),
    )
    flush_ms: int = setting(
        "flush.ms",
        LONG_MAX,
        "fsync the log when the last flush is this old (checked on append and by the broker's "
        "scheduler). The default never forces a flush.",
        parse=parse_int,
        check=at_least(0),
    )
    max_message_bytes: int = setting(
        "max.message.bytes",
        1024 * 1024 + 12,
        "Largest record batch the log accepts, header included.",
        parse=parse_int,
        check=at_least(0),
    )
    cleanup_policy: tuple[str, ...] = setting(
        "cleanup.policy",
        ("delete",),
        "delete (time/size retention), compact (keep the newest record per key), or both.",
        parse=parse_list,
        check=subset_of("delete", "compact"),
    )
    delete_retention_ms: int = setting(
        "delete.retention.ms",
        24 * 3600 * 1000,
        "How long a tombstone stays after compaction reaches it.",
        parse=parse_int,
        check=at_least(0),
    )
    min_cleanable_dirty_ratio: float = setting(
        "min.cleanable.dirty.ratio",
        0.5,
        "Compact once this fraction of the log is uncompacted.",
        parse=parse_float,
        check=between(0.0, 1.0),
    )
    min_compaction_lag_ms: int = setting(
        "min.compaction.lag.ms",
        0,
        "A record stays uncompacted for at least this long.",
        parse=parse_int,
        check=at_least(0),
    )
    max_compaction_lag_ms: int = setting(
        "max.compaction.lag.ms",
        LONG_MAX,
        "A record becomes eligible for compaction after at most this long.",
        parse=parse_int,
        check=at_least(1),
    )
    file_delete_delay_ms: int = setting(
        "file.delete.delay.ms",
        60000,
        "Delay between a segment leaving the log and its files being removed. Readers already "
        "holding a file range can finish in that time.",
        parse=parse_int,
        check=at_least(0),
    )
    compression_type: str = setting(
        "compression.type",
        "producer",
        "producer keeps each batch's codec as the producer chose it (the only value the broker "
        "applies today: it never recompresses).",
        parse=parse_str,
        check=one_of(*CODEC_CHOICES),
    )
    message_timestamp_type: str = setting(
        "message.timestamp.type",
        "CreateTime",
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.",
        parse=parse_str,
        check=one_of("CreateTime", "LogAppendTime"),
    )
    min_insync_replicas: int = setting(
        "min.insync.replicas",
        1,
        "With acks=all, the fewest in-sync replicas that must have a write (replication issue).",
        parse=parse_int,
        check=at_least(1),
    )
    unclean_leader_election_enable: bool = setting(
        "unclean.leader.election.enable",
        False,
        "Allow an out-of-sync replica to become leader, at the cost of losing data.",
        parse=parse_bool,
    )
    segment_drop_behind_bytes: int = setting(
        "segment.drop.behind.bytes",
        8 * 1024 * 1024,
        "Not in Kafka. Each time the active segment grows by this many bytes, the completed "
        "bytes are written back to disk early and, one such window later, dropped from the OS "
        "page cache, so appends keep reusing the same memory instead of new pages (which cost "
        "a host fault on VMs that hand free memory back). The newest one to two windows stay "
        "cached for readers at the tail. 0 leaves caching to the OS, as Kafka does. Linux "
        "only; see spark_mq/storage/page_cache.py.",
        parse=parse_int,
        check=at_least(0),
    )
    preallocate: bool = setting(
        "preallocate",
        False,
        "Reserve disk blocks for the whole segment (segment.bytes) when it takes its first "
        "append, as Kafka's preallocate does; the file's size stays that of its data, and the "
        "unused blocks are given back when the segment rolls or closes. Linux only; see "
        "spark_mq/storage/preallocation.py.",
        parse=parse_bool,
    )

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy
