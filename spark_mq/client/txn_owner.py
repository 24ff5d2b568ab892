"""One two-phase owner's decisions, one method per intent.

A decider that completes prepared transactions for an owner (the Spark sink's driver for a
sink id, a job runner for its job) holds a :class:`TxnOwner` and says what it means:
:meth:`~TxnOwner.commit` a batch of prepared transactions under the next sequence, or
:meth:`~TxnOwner.abort` them; both also end what the owner's scope (every transactional id
under its prefix) left behind, in the same decision, and can close the scope for good. Each
call is one typed request (CommitPreparedTxns or AbortTxns, docs/protocol.md) to the owner's
transaction coordinator.

>>> from spark_mq import Admin
>>> with Admin(path="/tmp/mq") as admin:  # doctest: +SKIP
...     job = admin.txn_owner("job-7", instance="run-2")
...     job.commit(handles, sequence=0, close=True).committed
True

Threads: those of the ``Admin`` it came from.
"""

from __future__ import annotations

from collections.abc import Sequence

from spark_mq.client.transactions import CompletionResult, PreparedTransaction
from spark_mq.client.txn_admin import TransactionAdmin
from spark_mq.errors import UsageError
from spark_mq.protocol.transactions import TxnAbortOwner, TxnCommitOwner, TxnOwnerScope


class TxnOwner:
    """The decisions of owner ``owner`` from instance ``instance`` (None: unchecked) over
    the transactional ids under ``prefix`` (default ``owner + "/"``)."""

    def __init__(
        self,
        txns: TransactionAdmin,
        owner: str,
        *,
        instance: str | None = None,
        prefix: str | None = None,
    ) -> None:
        if not owner:
            raise UsageError("a two-phase owner needs a non-empty name")
        if instance is not None and not instance:
            raise UsageError(f"the instance of owner {owner!r} must be non-empty, or None")
        self._txns = txns
        self.owner = owner
        self.instance = instance
        self.prefix = owner + "/" if prefix is None else prefix
        if not self.prefix:
            raise UsageError(f"the prefix of owner {owner!r} must be non-empty")

    def commit(
        self, handles: Sequence[PreparedTransaction], sequence: int, *, close: bool = False
    ) -> CompletionResult:
        """Commit ``handles`` as one decision tagged ``sequence`` (>= 0, increasing) and
        abort the rest of the scope; ``close`` also closes the scope (an owner that decides
        once). A sequence already recorded aborts ``handles`` instead
        (``already_committed``)."""
        return self._txns.commit(
            handles,
            TxnCommitOwner(self.owner, sequence, self.instance),
            TxnOwnerScope(self.prefix, close),
        )

    def abort(
        self, handles: Sequence[PreparedTransaction], *, close: bool = False
    ) -> CompletionResult:
        """Abort ``handles`` and the rest of the scope as one decision; ``close`` also
        closes the scope, so that a late attempt under it can prepare nothing."""
        return self._txns.abort_transactions(
            handles, TxnAbortOwner(self.owner, self.instance), TxnOwnerScope(self.prefix, close)
        )

    def last_sequence(self) -> int:
        """The newest sequence committed for the owner (-1: none)."""
        return self._txns.last_committed_sequence(self.owner)
