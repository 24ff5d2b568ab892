"""The queue checks of the fault tests (``queue_workload.check``) see each kind of failure:
a lost acknowledged record, one read at another offset, one read at two offsets, an offset
read with two records; and they pass a clean history with re-reads and unacknowledged
records in it."""

from __future__ import annotations

from queue_workload import check


def test_a_clean_history_passes() -> None:
    acked = [(0, 0, 0), (1, 0, 1), (0, 1, 2)]
    # Re-reads of the same offset (a consumer that fetched again) and a record whose
    # acknowledgement was lost (3) are fine.
    reads = [(0, 0, 0), (1, 0, 1), (0, 1, 2), (0, 1, 2), (1, 1, 3)]
    verdict = check(acked, reads)
    assert verdict.ok, str(verdict)
    assert (verdict.acknowledged, verdict.read) == (3, 5)


def test_a_lost_record_fails() -> None:
    verdict = check([(0, 0, 0), (0, 1, 1)], [(0, 0, 0)])
    assert not verdict.ok
    assert verdict.lost == [(0, 1, 1)]


def test_a_record_read_elsewhere_than_acknowledged_fails() -> None:
    verdict = check([(0, 5, 7)], [(0, 6, 7)])
    assert verdict.moved == [((0, 5, 7), [(0, 6)])]
    assert not verdict.ok


def test_a_record_read_twice_fails() -> None:
    verdict = check([(0, 0, 0)], [(0, 0, 0), (0, 1, 0)])
    assert verdict.duplicated == {0: [(0, 0), (0, 1)]}
    assert not verdict.ok


def test_an_offset_with_two_records_fails() -> None:
    verdict = check([], [(1, 4, 8), (1, 4, 9)])
    assert verdict.divergent == {(1, 4): {8, 9}}
    assert not verdict.ok
    assert "offsets with two records" in str(verdict)
