"""One node's log directory: record batches, segments, indexes, partition logs, recovery.

Modules, one concept each (see ``docs/format.md`` for every byte on disk):

- ``record_batch``: the batch format (61-byte header, Arrow body) and encoding.
- ``batch_decoder``: validation (header, CRC, Arrow body) and decoding to Arrow.
- ``codecs``: none, gzip, snappy, lz4, zstd.
- ``file_records``: a segment's ``.log`` file and file ranges for zero-copy sends.
- ``abstract_index`` / ``offset_index`` / ``time_index``: sparse memory-mapped indexes.
- ``txn_index``: a segment's aborted transactions (``.txnindex``).
- ``producer_state`` / ``producer_state_replay``: idempotence and transaction state, its
  snapshots, and rebuilding it (and transaction indexes) from the log.
- ``segment``: one ``.log`` with its indexes.
- ``log``: the partition log (append, read, roll, retention, truncation, flush).
- ``log_loader``: opening a partition directory and crash recovery.
- ``log_cleaner`` / ``cleaner_swap``: key-based compaction and the crash-safe swap of cleaned
  segments.
- ``log_config``: per-topic settings with Kafka's keys.
- ``log_manager``: every topic of a directory, its lock and checkpoints.
- ``dir_lock``, ``checkpoint_file``, ``topic_names``: the manager's parts.
"""
