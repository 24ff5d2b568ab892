"""What a transaction coordinator of a cluster keeps in memory for two-phase decisions that
span coordinators (:mod:`~spark_mq.broker.txn.participants`), and the checks its own
timeouts and InitProducerId make against it.

- **remote deliveries**: decision ids whose participants on other coordinators have not
  all acknowledged the decision; their delivery records are kept until they have.
- **holds**: transactions that voted for a decider's commit, until when (ms): this
  coordinator does not abort them on its own meanwhile.
- **vetoes**: (transactional id, producer id, transaction number) a participant asked about
  and was told that no decision names, until when (ms): no decision written here may
  commit them.
- **terminating**: Prepared transactions whose coordinator is asking every broker whether a
  decision names them: they vote for no commit meanwhile.
- **presume_abort**: in a cluster, whether a Prepared transaction whose owner went quiet
  here may be aborted now (None: yes, as on one node, where every decision is here).

Threads: the event loop's, as the coordinator's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from spark_mq.broker.txn.state import TxnMetadata


@dataclasses.dataclass
class TwoPhaseGuards:
    """See the module docstring."""

    remote_deliveries: set[str] = dataclasses.field(default_factory=set)
    holds: dict[str, int] = dataclasses.field(default_factory=dict)
    vetoes: dict[tuple[str, int, int], int] = dataclasses.field(default_factory=dict)
    terminating: set[str] = dataclasses.field(default_factory=set)
    presume_abort: Callable[[TxnMetadata, int], bool] | None = None

    def held(self, transactional_id: str, now_ms: int) -> bool:
        """Whether the transaction voted for a commit that has not arrived yet."""
        until = self.holds.get(transactional_id)
        if until is not None and until <= now_ms:
            del self.holds[transactional_id]
            return False
        return until is not None

    def vetoed(self, transactional_id: str, producer_id: int, txn_number: int) -> bool:
        return (transactional_id, producer_id, txn_number) in self.vetoes
