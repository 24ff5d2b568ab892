"""The transaction index of a log segment: the aborted transactions whose markers it holds.

A ``read_committed`` reader must skip the records of aborted transactions. The log finds them
here instead of scanning for abort markers: every time an abort marker is appended to a
segment, one entry describing the aborted transaction is appended to that segment's
``<base offset, 20 digits>.txnindex`` file. Each entry is 34 bytes, big-endian::

     offset  size  field             notes
     ------  ----  ----------------  -------------------------------------------------------
          0     2  version           int16, always 0
          2     8  producerId        int64, the producer whose transaction was aborted; >= 0
         10     8  firstOffset       int64, first offset of the transaction's data in the
                                     partition (possibly in an earlier segment)
         18     8  lastOffset        int64, offset of the abort marker; in this segment, so
                                     >= base offset; strictly increasing from entry to entry
         26     8  lastStableOffset  int64, the partition's LSO right after the abort
                                     completed; <= lastOffset + 1

Entries are in append order, which is the order of the markers, so ``lastOffset`` strictly
increases. Unlike the offset and time indexes, the file is not preallocated and not
memory-mapped: it is written with plain appends (``O_APPEND``) and read whole, because it is
tiny (one entry per aborted transaction, not one per few KiB of records). The file is created
by the first append: a segment without aborted transactions has no ``.txnindex`` file, and a
missing file reads as an empty index, as in Kafka.

What a crash can leave, and the contract
----------------------------------------
Nothing is checksummed. A crash during an append can leave a torn last entry (a file size
that is not a multiple of 34); a machine crash can also lose entries that were not flushed.
Neither is repaired in place: the txn index is a cache of the abort markers in the ``.log``
file, and after an unclean shutdown the owning log rebuilds it for every recovered segment,
calling :meth:`TxnIndex.reset` (which never reads the file, so it also clears a corrupt one)
and appending an entry for each abort marker it re-reads. For the segments below the recovery
point the log runs :meth:`TxnIndex.sanity_check`, which raises
:class:`~spark_mq.errors.CorruptIndexError` when the size is not a whole number of entries, a
version is not 0, or an entry breaks one of the rules in the table above; the log then
rebuilds that index the same way. Any other method that reads the file for the first time
applies the same checks and raises the same error.

Thread contract
---------------
A :class:`TxnIndex` holds no lock. Exactly one thread uses it at a time: the owning log calls
every method under its own lock (appends, truncation, rolls and the locating phase of reads
are already serialised there). :meth:`TxnIndex.all_aborted_txns` and
:meth:`TxnIndex.collect_aborted_txns` return new lists, which callers may keep and use after
releasing the lock.
"""

from __future__ import annotations

import operator
import os
import struct
from bisect import bisect_left
from pathlib import Path
from typing import ClassVar, Final, NamedTuple, Self

from spark_mq.errors import (
    CorruptIndexError,
    InvalidRecordError,
    LogClosedError,
    LogDirectoryFullError,
    UsageError,
)
from spark_mq.storage import libc
from spark_mq.storage.checkpoint_file import fsync_directory

#: The only entry version there is (Kafka's ``AbortedTxn.CURRENT_VERSION``).
TXN_INDEX_VERSION: Final = 0

_INT64_MAX: Final = 2**63 - 1
_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset
assert _ENTRY.size == 34


class AbortedTxn(NamedTuple):
    """One aborted transaction, as stored in the transaction index (without the version)."""

    producer_id: int
    #: First offset of the transaction's data in the partition.
    first_offset: int
    #: Offset of the abort marker.
    last_offset: int
    #: The partition's last stable offset right after the abort completed.
    last_stable_offset: int


class TxnIndexSearchResult(NamedTuple):
    """What :meth:`TxnIndex.collect_aborted_txns` found in one segment.

    ``is_complete`` is True once an entry showed that no later segment can hold an aborted
    transaction overlapping the searched range: the caller stops searching there.
    """

    aborted_txns: list[AbortedTxn]
    is_complete: bool


def _broken_rule(txn: AbortedTxn, base_offset: int) -> str | None:
    """The first rule of the entry layout that ``txn`` breaks (see the module docstring)."""
    producer_id, first_offset, last_offset, last_stable_offset = txn
    if not 0 <= producer_id <= _INT64_MAX:
        return f"producer id {producer_id} is not in [0, 2^63-1]"
    if not 0 <= first_offset <= last_offset <= _INT64_MAX:
        return (
            f"offsets must satisfy 0 <= first offset <= last offset <= 2^63-1, got first offset "
            f"{first_offset} and last offset {last_offset}"
        )
    if last_offset < base_offset:
        return (
            f"last offset {last_offset} (the abort marker) is below the segment's base offset "
            f"{base_offset}"
        )
    if not 0 <= last_stable_offset <= min(last_offset + 1, _INT64_MAX):
        return (
            f"last stable offset {last_stable_offset} is not in [0, last offset + 1 = "
            f"{last_offset + 1}]"
        )
    return None


class TxnIndex:
    """The aborted transactions of one segment (see the module docstring for the format).

    Nothing is read or created when the index is constructed. The first call that needs the
    entries reads the whole file, checks it and keeps the entries in memory, so later searches
    touch no file. After :meth:`close` or :meth:`delete`, every method except :attr:`path`,
    :attr:`base_offset` and :meth:`close` raises :class:`LogClosedError`.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "00000000000000000100.txnindex")
    >>> index = TxnIndex(path, base_offset=100)
    >>> index.append(AbortedTxn(producer_id=7, first_offset=90, last_offset=120,
    ...                         last_stable_offset=121))
    >>> index.collect_aborted_txns(fetch_offset=100, upper_bound_offset=110)
    TxnIndexSearchResult(aborted_txns=[AbortedTxn(producer_id=7, first_offset=90, \
last_offset=120, last_stable_offset=121)], is_complete=True)
    >>> index.close()
    >>> os.path.getsize(path)
    34
    """

    ENTRY_SIZE: ClassVar[int] = _ENTRY.size
    KIND: ClassVar[str] = "transaction index"
    FILE_SUFFIX: ClassVar[str] = ".txnindex"

    def __init__(self, path: str | os.PathLike[str], base_offset: int) -> None:
        if base_offset < 0:
            raise UsageError(f"base offset of a {self.KIND} must be >= 0, got {base_offset}")
        self._path = Path(path)
        self._base_offset = base_offset
        self._closed = False
        # The entries of the file, once read; every change replaces the list rather than
        # mutating it, so a list handed out by a read is never changed behind its holder.
        self._txns: list[AbortedTxn] | None = None
        # Opened (O_APPEND) by the first change, so read-only use never holds a descriptor.
        self._fd: int | None = None
        # Set when this object created the file: flush() then also makes its name durable.
        self._directory_sync_pending = False

    # -----------------------------------------------------------------------------------------
    # Properties

    @property
    def path(self) -> Path:
        """Where the index file is (follows :meth:`rename`); it may not exist yet."""
        return self._path

    @property
    def base_offset(self) -> int:
        """Base offset of the segment; every entry's last offset is at or above it."""
        return self._base_offset

    # -----------------------------------------------------------------------------------------
    # Reads

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry, in append order."""
        return list(self._entries())

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """The aborted transactions overlapping the offsets ``[fetch_offset, upper_bound_offset)``.

        An entry overlaps when its abort marker is at or after ``fetch_offset`` and its data
        starts before ``upper_bound_offset``. The scan stops, with ``is_complete`` True, at the
        first entry whose last stable offset is >= ``upper_bound_offset``: every transaction
        that touches the range was decided by then, and the ones that were aborted have their
        markers at or before that entry's, so later segments cannot add any.
        """
        found: list[AbortedTxn] = []
        for txn in self._entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """Re-read the file and raise :class:`CorruptIndexError` if it is not a valid index.

        Checks that the size is a whole number of 34-byte entries, that every version is 0,
        that every entry keeps the rules of the layout (offsets not negative, first offset <=
        last offset, last offset not below the base offset, last stable offset <= last offset
        + 1) and that last offsets strictly increase. A missing file is a valid empty index.
        """
        self._check_open()
        self._txns = self._load()

    # -----------------------------------------------------------------------------------------
    # Changes

    def append(self, txn: AbortedTxn) -> None:
        """Append the entry of an aborted transaction whose marker was added to the segment.

        Raises :class:`InvalidRecordError` if ``txn`` breaks a rule of the layout or its last
        offset is not above the previous entry's, and :class:`LogDirectoryFullError` if the
        disk is full; after an error the file and the index are as before the call.
        """
        txns = self._entries()
        txn = AbortedTxn(*(operator.index(field) for field in txn))
        problem = _broken_rule(txn, self._base_offset)
        if problem is None and txns and txn.last_offset <= txns[-1].last_offset:
            problem = (
                f"last offset {txn.last_offset} is not above the last offset "
                f"{txns[-1].last_offset} of the previous entry"
            )
        if problem is not None:
            raise InvalidRecordError(f"cannot append {txn} to {self.KIND} {self._path}: {problem}")
        fd = self._writer()
        size_before = len(txns) * self.ENTRY_SIZE
        try:
            view = memoryview(_ENTRY.pack(TXN_INDEX_VERSION, *txn))
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            self._roll_back_failed_write(fd, size_before, exc)
            if exc.errno in libc.DISK_FULL:
                raise LogDirectoryFullError(
                    f"no space left to append to {self.KIND} {self._path}; free space and retry",
                    path=str(self._path),
                ) from exc
            raise
        self._txns = [*txns, txn]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose last offset is >= ``offset``."""
        txns = self._entries()
        keep = bisect_left(txns, offset, key=operator.attrgetter("last_offset"))
        if keep == len(txns):
            return
        os.ftruncate(self._writer(), keep * self.ENTRY_SIZE)
        self._txns = txns[:keep]

    def reset(self) -> None:
        """Remove every entry; the file, if any, is kept at size 0.

        Never reads the file, so it also clears a corrupt index before a rebuild.
        """
        self._check_open()
        fd = self._fd
        if fd is None:
            try:
                fd = self._open_fd(create=False)
            except FileNotFoundError:
                fd = None
        if fd is not None:
            os.ftruncate(fd, 0)
        self._txns = []

    def flush(self) -> None:
        """fsync the changes made through this object (and the file's creation, if it made it)."""
        self._check_open()
        if self._fd is not None:
            os.fsync(self._fd)
        if self._directory_sync_pending:
            fsync_directory(self._path.parent)
            self._directory_sync_pending = False

    def rename(self, new_path: str | os.PathLike[str]) -> None:
        """Atomically move the file, if there is one, to ``new_path``; the index keeps working.

        An open descriptor refers to the file, not its name, so it stays valid.
        """
        self._check_open()
        target = Path(new_path)
        try:
            os.replace(self._path, target)
        except FileNotFoundError:
            if self._fd is not None:
                raise  # Someone else removed the file this index writes to: that is a bug.
        self._path = target

    def close(self) -> None:
        """Close the file and forget the entries. Closing twice is a no-op.

        Does not fsync: call :meth:`flush` first when the entries must survive a power loss.
        """
        if self._closed:
            return
        self._closed = True
        self._txns = None
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        # An index given up without close() must not keep its descriptor (a backstop).
        fd = getattr(self, "_fd", None)
        if fd is not None:
            self._fd = None
            os.close(fd)

    def delete(self) -> bool:
        """Close the index and delete its file; returns whether a file was there to delete."""
        self._check_open()
        self.close()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def __enter__(self) -> Self:
        self._check_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._closed:
            state = "closed"
        else:
            state = "not loaded" if self._txns is None else f"entries={len(self._txns)}"
        return f"TxnIndex({str(self._path)!r}, base_offset={self._base_offset}, {state})"

    # -----------------------------------------------------------------------------------------
    # Internals

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.KIND} {self._path} is closed")

    def _entries(self) -> list[AbortedTxn]:
        """The entries, read from the file on first use; raises once the index is closed."""
        self._check_open()
        if self._txns is None:
            self._txns = self._load()
        return self._txns

    def _corrupt(self, problem: str) -> CorruptIndexError:
        return CorruptIndexError(
            f"{self.KIND} {self._path} is corrupt: {problem}; rebuild it from the log",
            path=str(self._path),
        )

    def _load(self) -> list[AbortedTxn]:
        """Read and check the whole file (the checks of :meth:`sanity_check`)."""
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return []
        if len(data) % self.ENTRY_SIZE != 0:
            raise self._corrupt(
                f"its size {len(data)} bytes is not a multiple of the entry size "
                f"{self.ENTRY_SIZE} (a torn last entry?)"
            )
        txns: list[AbortedTxn] = []
        for slot, (version, *fields) in enumerate(_ENTRY.iter_unpack(data)):
            if version != TXN_INDEX_VERSION:
                raise self._corrupt(
                    f"entry {slot} has version {version}, expected {TXN_INDEX_VERSION}"
                )
            txn = AbortedTxn(*fields)
            problem = _broken_rule(txn, self._base_offset)
            if problem is None and txns and txn.last_offset <= txns[-1].last_offset:
                problem = f"last offset {txn.last_offset} is not above that of entry {slot - 1}"
            if problem is not None:
                raise self._corrupt(f"entry {slot}: {problem}")
            txns.append(txn)
        return txns

    def _open_fd(self, *, create: bool) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
        if not create:
            self._fd = os.open(self._path, flags)
            return self._fd
        try:
            self._fd = os.open(self._path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            self._directory_sync_pending = True
        except FileExistsError:
            self._fd = os.open(self._path, flags)
        return self._fd

    def _writer(self) -> int:
        """The append descriptor, creating the file on first use."""
        return self._fd if self._fd is not None else self._open_fd(create=True)

    def _roll_back_failed_write(self, fd: int, size_before: int, cause: OSError) -> None:
        """Cut off what a failed write left, so that no torn entry stays in the file."""
        try:
            os.ftruncate(fd, size_before)
        except OSError as exc:
            # The file may now end in a torn entry. Forget the entries so that the next read
            # loads the file again and reports it as corrupt, which makes the log rebuild it.
            # The write's error stays the one raised; this one is recorded on it.
            self._txns = None
            cause.add_note(
                f"cutting {self._path} back to {size_before} bytes also failed ({exc}); the "
                f"next read of the {self.KIND} will report it as corrupt"
            )
