"""The transaction coordinator (issue 6): state machine, ``__transaction_state``, markers,
two-phase commit. See docs/transactions.md.

Modules: :mod:`.state` (states, transition table, per-id metadata), :mod:`.records` (the
internal topic's record formats), :mod:`.state_topic` (the topic: append and load),
:mod:`.markers` (commit/abort markers into partitions), :mod:`.coordinator` (InitProducerId,
AddPartitionsToTxn, EndTxn, timeouts, recovery), :mod:`.owners` (two-phase owners: their
states, transition table, closed prefixes and activity), :mod:`.two_phase` (PrepareTxn,
CommitPreparedTxns, AbortTxns), :mod:`.service` (the coordinator on the event loop),
:mod:`.config`.

This package's ``__init__`` imports nothing, so that the group coordinator can use
:mod:`.log_reader` without an import cycle.
"""
