"""The few Linux file calls Python's ``os`` module lacks, loaded once from libc with ctypes.

``sync_file_range`` (drop-behind, :mod:`spark_mq.storage.page_cache`) and ``fallocate`` with
flags (preallocation, :mod:`spark_mq.storage.preallocation`). Each is None where it cannot be
had (not Linux, or a libc without it); callers then do without, since both only help.
Errors come back as ctypes' saved ``errno`` (``use_errno=True``): read it with
:func:`ctypes.get_errno` right after a call that returned -1. The two errno families that
storage code tells apart for every file call are here too: :data:`DISK_FULL` and
:data:`FALLOCATE_UNSUPPORTED`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import sys
from collections.abc import Callable
from typing import Any, Final

#: A write, ``fallocate`` or ``posix_fallocate`` found no room (the disk or the user's quota).
DISK_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
#: ``fallocate`` / ``posix_fallocate`` errors that mean "this file system cannot preallocate",
#: as opposed to "there is no room".
FALLOCATE_UNSUPPORTED: Final = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


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
