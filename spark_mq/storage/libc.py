"""The few Linux file calls Python's ``os`` module lacks, loaded once from libc with ctypes.

``sync_file_range`` (drop-behind, :mod:`spark_mq.storage.page_cache`) and ``fallocate`` with
flags (preallocation, :mod:`spark_mq.storage.preallocation`). Each is None where it cannot be
had (not Linux, or a libc without it); callers then do without, since both only help.
Errors come back as ctypes' saved ``errno`` (``use_errno=True``): read it with
:func:`ctypes.get_errno` right after a call that returned -1.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable
from typing import Any


def _load(name: str, argtypes: list[Any]) -> Callable[..., int] | None:
    """libc's ``name`` returning ``int`` with these argument types, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


#: ``sync_file_range(fd, offset, nbytes, flags)``.
sync_file_range = _load(
    "sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
)
#: ``fallocate(fd, mode, offset, len)``.
fallocate = _load("fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64])
