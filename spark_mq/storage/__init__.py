"""One node's log directory: record batches, segments, indexes, partition logs, recovery.

Modules, one concept each (see ``docs/format.md`` for every byte on disk):

- ``record_batch``: the batch format (61-byte header, Arrow body) and encoding.
- ``batch_decoder``: validation (header, CRC, Arrow body) and decoding to Arrow.
- ``varint_records``: the varint body of small batches (Kafka's v2 record layout), decoded to
  the same Arrow arrays; runs of them decoded in one pass by the optional C extension
  ``_varint_scan`` (with a Python fallback).
- ``batch_walk``: walking batch headers in one call (a fetch's extent, the next fetch offset).
- ``codecs``: none, gzip, snappy, lz4, zstd.
- ``file_records``: a segment's ``.log`` file and file ranges for zero-copy sends.
- ``abstract_index`` / ``offset_index`` / ``time_index``: sparse memory-mapped indexes.
- ``txn_index``: a segment's aborted transactions (``.txnindex``).
- ``producer_state`` / ``producer_state_append`` / ``producer_state_replay``: idempotence
  and transaction state and its snapshots, what an append does to it, and rebuilding it (and
  transaction indexes) from the log.
- ``segment``: one ``.log`` with its indexes.
- ``log``: the partition log (its offsets, producer state and API) over ``local_log`` (its
  segments: roll, flush, truncation, deletion); ``log_append`` (checking an append, assigning
  offsets), ``log_read`` (isolation, decoding a fetch, the next offset, lookups by time) and
  ``log_retention`` (which segments retention deletes) are its parts.
- ``log_loader``: opening a partition directory and crash recovery.
- ``log_cleaner`` / ``offset_map`` / ``cleaner_filter`` / ``cleaner_transactions`` /
  ``cleaner_swap``: key-based compaction: the pass, the newest offset per key, the retention
  rules and their transaction-aware default, and the crash-safe swap of cleaned segments.
- ``log_config``: per-topic settings with Kafka's keys.
- ``log_manager``: every topic of a directory, its lock and checkpoints.
- ``dir_lock``, ``checkpoint_file``, ``topic_names``, ``topic_metadata``, ``topic_deletion``:
  the manager's parts.
"""
