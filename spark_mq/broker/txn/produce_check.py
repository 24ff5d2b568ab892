"""The transaction check of the produce path: a transactional batch may only go to a
partition its producer added to its open transaction.

Called by the Produce handler only for requests that carry a ``transactional_id`` (so the
non-transactional path pays nothing). A partition whose first batch is not transactional is
refused (INVALID_REQUEST); for the others the coordinator checks that the transactional
id's producer id and epoch are the batch's (PRODUCER_FENCED / INVALID_PRODUCER_ID_MAPPING
otherwise), that its transaction is Ongoing and that the partition was added with
AddPartitionsToTxn (INVALID_TXN_STATE otherwise). A request without ``transactional_id`` is
not checked here (a transactional producer always sets it); the partition's producer state
still refuses an epoch older than the markers'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.errors import InvalidRequestError
from spark_mq.storage.record_batch import HEADER_SIZE, BatchHeader

if TYPE_CHECKING:
    from spark_mq.broker.txn.service import TransactionService


class ProduceJob(Protocol):
    """One partition of a Produce request (the handler's job)."""

    topic: str
    partition: int
    data: memoryview
    error: tuple[int, str] | None


async def verify_transactional_jobs(
    transactions: TransactionService, transactional_id: str, jobs: Sequence[ProduceJob]
) -> None:
    """Set the error of every job the transaction coordinator refuses."""
    todo = [job for job in jobs if job.error is None and len(job.data) >= HEADER_SIZE]
    if not todo:
        return
    if not transactions.coordinates(transactional_id):
        # A cluster broker that leads data partitions but not the id's __transaction_state
        # partition cannot check (as Kafka before KIP-890): the partition's producer state
        # still refuses an epoch older than the markers'.
        return
    try:
        coordinator = await transactions.loaded()
    except TYPED_ERRORS as exc:
        failure = error_of(exc, "produce")
        for job in todo:
            job.error = failure
        return
    for job in todo:
        header = BatchHeader.unpack_from(job.data, 0)
        try:
            if not header.is_transactional:
                raise InvalidRequestError(
                    f"{job.topic}-{job.partition}: a Produce request with transactional_id "
                    f"{transactional_id!r} carries a non-transactional batch; send it without "
                    "transactional_id, or set the batch's transactional attribute"
                )
            coordinator.check_write(
                transactional_id,
                header.producer_id,
                header.producer_epoch,
                (job.topic, job.partition),
            )
        except TYPED_ERRORS as exc:
            job.error = error_of(exc, f"produce to {job.topic}-{job.partition}")
