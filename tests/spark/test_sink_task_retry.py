"""A write task whose first attempt fails after its records reached the log, and whose retry
succeeds: the job's read_committed output is every row exactly once, the failed attempt's
records stay in the log aborted, and no transaction of the job is left Ongoing or Prepared.

The driver (``sink_retry_driver.py``) runs in its own process: task retries need a
``local[N,F]`` master, and the tests' shared session is ``local[2]``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sink_helpers import create_topic, read_topic, run_batch_driver

from spark_mq import Admin

ROWS = 40_000
#: Past three of Spark's 10,000-row Arrow batches: the sink has sent rows by then.
FAIL_AT = 35_000


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_retried_task_commits_once_and_its_failed_attempt_stays_aborted(
    mq_dir: Path, tmp_path: Path
) -> None:
    create_topic(mq_dir, "out", 1)
    log = tmp_path / "driver.log"
    code = run_batch_driver(
        log,
        [
            *("--path", str(mq_dir), "--topic", "out"),
            *("--rows", str(ROWS), "--fail-at", str(FAIL_AT)),
        ],
    )
    assert code == 0, log.read_text()[-4000:]
    assert "injected failure at row" in log.read_text(), "the first attempt did not fail"

    committed = read_topic(mq_dir, "out").column("value").to_pylist()
    assert sorted(committed) == [f"row-{i:08d}-".encode() + b"x" * 84 for i in range(ROWS)]
    # The first attempt's records are in the log, aborted: read_uncommitted sees them too.
    everything = read_topic(mq_dir, "out", "read_uncommitted").column("value").to_pylist()
    assert len(everything) > ROWS
    assert set(everything) == set(committed)
    # A batch job's ids are {sink id}/{job's own id}/{partition}[.{attempt}].
    with Admin(path=str(mq_dir)) as admin:
        listed = admin.list_transactions(prefix="retry-job/")
    states = {t.transactional_id.rsplit("/", 1)[1]: t.state for t in listed}
    assert states == {"0": "CompleteAbort", "0.1": "CompleteCommit"}, listed
