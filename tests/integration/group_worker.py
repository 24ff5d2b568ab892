"""A consumer-group worker process for ``test_group_processes.py``.

``python group_worker.py SERVERS TOPIC LOG`` joins group ``workers``, and for every batch
``poll()`` returns, first appends ``P partition offset`` lines (processing), then commits the
batch and appends ``C partition next-offset`` lines once the commit succeeded: commit after
processing, so every record is processed at least once. Lines are written unbuffered, so a
SIGKILL loses nothing that was written. SIGTERM closes the consumer and exits 0.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

from spark_mq import CommitFailedError, Consumer, ConsumerRebalanceListener


def main() -> int:
    servers, topic, log_path = sys.argv[1:4]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 (open for the whole run)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, partitions: Any) -> None:
            log.write(f"A {' '.join(str(tp.partition) for tp in sorted(partitions))}\n")

        def on_partitions_revoked(self, partitions: Any) -> None:
            log.write(f"R {' '.join(str(tp.partition) for tp in sorted(partitions))}\n")

    consumer = Consumer(
        bootstrap_servers=servers,
        group_id="workers",
        client_id=log_path.rsplit("/", 1)[-1],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        max_poll_records=20,
    )
    consumer.subscribe([topic], listener=Listener())
    try:
        while not stop:
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                continue
            for records in batch.values():
                for r in records:
                    log.write(f"P {r.partition} {r.offset}\n")
            time.sleep(0.02)  # "processing": slow enough that a kill lands mid-stream
            offsets = {tp: records[-1].offset + 1 for tp, records in batch.items()}
            try:
                consumer.commit(offsets)
            except CommitFailedError as exc:
                log.write(f"F {exc.reason}\n")
                continue
            for tp, offset in sorted(offsets.items()):
                log.write(f"C {tp.partition} {offset}\n")
    finally:
        consumer.close()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
