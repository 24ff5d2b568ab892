"""spark_mq/storage/libc.py: the libc calls load on Linux and report errors through errno."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from pathlib import Path

import pytest

from spark_mq.storage import libc

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux libc calls")


@linux_only
def test_both_calls_load_on_linux() -> None:
    assert libc.sync_file_range is not None
    assert libc.fallocate is not None


@linux_only
def test_a_failed_call_returns_minus_one_and_sets_errno() -> None:
    assert libc.fallocate is not None
    assert libc.fallocate(-1, 0, 0, 4096) == -1
    assert ctypes.get_errno() == errno.EBADF


@linux_only
def test_fallocate_with_keep_size_leaves_the_size(tmp_path: Path) -> None:
    assert libc.fallocate is not None
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"abc")
        if libc.fallocate(fd, 1, 3, 1 << 20) != 0:
            pytest.skip(f"no fallocate here: {os.strerror(ctypes.get_errno())}")
        assert os.fstat(fd).st_size == 3
    finally:
        os.close(fd)
