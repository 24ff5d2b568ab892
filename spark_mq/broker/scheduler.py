"""Background jobs: retention, compaction, checkpoints, flushes, producer expiry.

Each job is an asyncio task that sleeps for its interval and then runs its storage call on a
thread (never on the event loop): retention every ``log.retention.check.interval.ms``,
recovery-point and log-start checkpoints every ``log.flush.offset.checkpoint.interval.ms``,
``flush.ms`` checks every ``log.flush.scheduler.interval.ms``, producer expiry every
``producer.id.expiration.check.interval.ms``, and, with ``log.cleaner.enable``, one
compaction pass (``LogManager.clean_logs``) after another with ``log.cleaner.backoff.ms``
between them, on a thread of its own so a long pass never delays the other jobs. A failing
job is logged and retried at its next interval; it never stops the broker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable

from spark_mq import gc_freeze
from spark_mq.broker.config import BrokerConfig
from spark_mq.errors import LogClosedError
from spark_mq.storage.log_manager import LogManager

logger = logging.getLogger("spark_mq.broker.scheduler")

#: Kafka waits 30 s after startup before the first retention check; so do we (or less, if
#: the interval is shorter).
INITIAL_DELAY_MS = 30_000


class Scheduler:
    """Runs the broker's periodic storage jobs until :meth:`stop`."""

    def __init__(
        self, config: BrokerConfig, logs: LogManager, executor: concurrent.futures.Executor
    ) -> None:
        self.config = config
        self.logs = logs
        #: The broker's storage threads, shared with the requests; the cleaner has its own.
        self.executor = executor
        self._tasks: list[asyncio.Task[None]] = []
        self._cleaner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mq-cleaner")
        self._running: set[asyncio.Future[object]] = set()
        self.runs: dict[str, int] = {}

    def start(self) -> None:
        broker = self.config
        logs = self.logs
        jobs: list[tuple[str, int, Callable[[], object], concurrent.futures.Executor]] = [
            (
                "retention",
                broker.log_retention_check_interval_ms,
                logs.apply_retention,
                self.executor,
            ),
            (
                "checkpoint",
                broker.log_flush_offset_checkpoint_interval_ms,
                logs.checkpoint,
                self.executor,
            ),
            ("flush", broker.log_flush_scheduler_interval_ms, self._flush_due, self.executor),
            # Long-lived objects made while serving join the frozen ones (gc_freeze).
            ("gc-freeze", gc_freeze.CHECK_INTERVAL_MS, gc_freeze.refreeze_if_grown, self.executor),
            (
                "producer-expiry",
                broker.producer_id_expiration_check_interval_ms,
                self._expire_producers,
                self.executor,
            ),
        ]
        if broker.log_cleaner_enable:
            jobs.append(("cleaner", broker.log_cleaner_backoff_ms, logs.clean_logs, self._cleaner))
        for name, interval_ms, fn, executor in jobs:
            self._tasks.append(
                asyncio.create_task(self._every(name, interval_ms, fn, executor), name=name)
            )

    def _flush_due(self) -> None:
        for log in self.logs.logs():
            log.flush_if_due()

    def _expire_producers(self) -> int:
        return sum(log.remove_expired_producers() for log in self.logs.logs())

    async def _every(
        self,
        name: str,
        interval_ms: int,
        fn: Callable[[], object],
        executor: concurrent.futures.Executor,
    ) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(min(interval_ms, INITIAL_DELAY_MS) / 1000)
        while True:
            future = loop.run_in_executor(executor, fn)
            self._running.add(future)
            try:
                result = await asyncio.shield(future)
                # The jobs log at INFO what they did (the segments retention deleted, the logs
                # the cleaner cleaned), naming partitions and offsets; their results say only
                # how much, which matters when debugging the scheduler itself.
                logger.debug("%s: %s", name, result)
            except LogClosedError:
                return  # the broker is closing its logs
            except Exception:
                logger.exception("background job %s failed; retrying in %d ms", name, interval_ms)
            finally:
                self._running.discard(future)
            self.runs[name] = self.runs.get(name, 0) + 1
            await asyncio.sleep(interval_ms / 1000)

    async def stop(self, timeout_s: float) -> None:
        """Cancel the timers and wait (at most ``timeout_s``) for jobs already running."""
        for task in self._tasks:
            task.cancel()
        if self._running:
            _, pending = await asyncio.wait(list(self._running), timeout=timeout_s)
            if pending:
                logger.warning("%d background jobs still running at shutdown", len(pending))
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._cleaner.shutdown(wait=False, cancel_futures=True)
