"""Sparse offset and time indexes, in Kafka's on-disk entry formats.

`.index` entries: relative offset u32 | file position u32 (8 bytes), keyed by the last offset
of the batch that starts at that position. `.timeindex` entries: timestamp i64 | relative
offset u32 (12 bytes), the largest timestamp seen so far in the segment and its offset.
Entries are appended as batches arrive and kept in memory for bisecting; a segment's index
is rebuilt from its log after an unclean shutdown. `.txnindex` (`TransactionIndex`) lists the
transactions aborted in the segment, for read_committed fetches.

The buffer of entries not yet written is shared by the event loop (appends, and the flush after
each log write) and the fsync worker thread (`fsync` flushes first): one `threading.Lock` per
file guards buffering, writing and truncating, so no entry is written twice or lost, and the
buffer is never resized while a thread's `os.write` holds it.

The descriptor can be closed (`close`) while the index stays usable: the entries are in memory,
and the file is opened again, at its end, the next time an entry is written (a segment whose
files the log manager's descriptor budget closed; see segment.OpenSegments).

An index file that is not there is created by its first write (as Kafka's LazyIndex creates a
rolled segment's on first use), not with its segment: a CreateTopics of 10,000 partitions makes
30,000 logs that mostly stay empty for a while, and on a busy ext4 file system allocating each
inode was most of a broker's CPU in that create (its `.log` and directory remain). An index
file that is there is read on its first use (Kafka's LazyIndex), not when its segment is
opened: a restart of 10,000 logs spent most of its time loading them (issue 25).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import operator
import os
import struct
import sys
import threading
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

from .files import fsync_path, read_small_file

_OFFSET_ENTRY = struct.Struct(">II")
_U32 = "I" if array("I").itemsize == 4 else "L"  # the array type code of a 4-byte unsigned int
_TIME_ENTRY = struct.Struct(">qI")


def offset_entries(raw: bytes, base_offset: int) -> Iterator[tuple[int, int]]:
    """(offset, file position) of each whole `.index` entry in `raw` (a partial last one is left out)."""
    whole = len(raw) - len(raw) % _OFFSET_ENTRY.size
    for relative, position in _OFFSET_ENTRY.iter_unpack(raw[:whole]):
        yield base_offset + relative, position


def time_entries(raw: bytes, base_offset: int) -> Iterator[tuple[int, int]]:
    """(timestamp, offset) of each whole `.timeindex` entry in `raw` (a partial last one is left out)."""
    whole = len(raw) - len(raw) % _TIME_ENTRY.size
    for timestamp, relative in _TIME_ENTRY.iter_unpack(raw[:whole]):
        yield timestamp, base_offset + relative


class _IndexFile:
    """An append-only file of fixed-size entries, read on first use (Kafka's LazyIndex).

    The entries (the attributes named in `_LAZY`, and `torn`) are not set by the constructor:
    the first access to one reads the file (`__getattr__`, which Python calls only for an
    attribute not set yet, so later accesses cost nothing). A segment loaded after a clean
    shutdown that is never read or appended to never opens its index files, and a rebuild
    (`start_rebuild`) does not read what it replaces.
    """

    entry: struct.Struct
    _LAZY: tuple[str, ...] = ()

    def __init__(self, path: str, new: bool = False, present: bool | None = None) -> None:
        """`new`: its segment was just made in a new log directory, so there is no file to open.
        `present`: whether the file is there, when a listing of the directory told (otherwise an
        open finds out, and the descriptor is kept)."""
        self.path = path
        self._open_fd: int | None = None
        if present is None and not new:
            self._open_fd = _open_existing(path)
            present = self._open_fd is not None
        self.existed = bool(present) and not new
        self._on_disk = self.existed  # the file exists (it is created by the first write)
        self._pending = bytearray()
        self._lock = threading.Lock()  # guards _pending and the file's write position
        self._rebuilding = False  # between start_rebuild and finish_rebuild: nothing is written
        if new:
            self.torn = False
            self._set_entries(b"")

    def __getattr__(self, name: str) -> object:
        """The entries, read from the file on their first use (see the class docstring)."""
        if name not in self._LAZY and name != "torn":
            raise AttributeError(name)
        self._set_entries(self._load_raw())
        return object.__getattribute__(self, name)

    def _set_entries(self, raw: bytes) -> None:
        raise NotImplementedError

    @property
    def _fd(self) -> int:
        """The descriptor, opened again (appending at the end) after `close`, or the file
        created by its first write."""
        if self._open_fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            os.lseek(fd, 0, os.SEEK_END)
            self._open_fd = fd
            self._on_disk = True
        return self._open_fd

    def _load_raw(self) -> bytes:
        """The whole entries on disk; a partial last entry is cut off (`torn`), and appends go
        after them."""
        self.torn = False  # the file ended in a partial entry (cut off when loading)
        if not self._on_disk:
            return b""
        with self._lock:
            fd = self._open_fd
        if fd is not None:
            return self._read_whole(fd)
        try:  # a descriptor of its own, closed again: the segment's may be closed (OpenSegments)
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            self._on_disk = False
            return b""
        try:
            return self._read_whole(fd)
        finally:
            os.close(fd)

    def _read_whole(self, fd: int) -> bytes:
        size = os.fstat(fd).st_size
        whole = size - size % self.entry.size
        if whole != size:
            self.torn = True
            os.ftruncate(fd, whole)
        os.lseek(fd, whole, os.SEEK_SET)
        return os.pread(fd, whole, 0) if whole else b""

    def _buffer(self, *values: int) -> None:
        entry = self.entry.pack(*values)
        with self._lock:
            self._pending += entry

    def flush(self) -> None:
        """Write buffered entries (called when the log segment is written).

        A failed write (a full disk) keeps the entries buffered for the next try: indexes are
        sparse and rebuildable, so their trouble must not fail an append that reached the log.
        """
        if not self._pending:
            return
        with self._lock:
            if self._rebuilding:
                return
            try:
                written = os.write(self._fd, self._pending)
            except OSError:
                return
            del self._pending[:written]

    def fsync(self) -> None:
        self.flush()
        with self._lock:
            if not self._on_disk:
                return  # never written: no file to make durable
            fd = self._fd
        os.fsync(fd)

    def start_rebuild(self) -> None:
        """Forget the entries (recovery adds them again from the log; the file is not read for
        them); the file keeps its bytes until `finish_rebuild`."""
        with self._lock:
            self._rebuilding = True
            self._pending.clear()
        self.torn = False
        self._set_entries(b"")

    def finish_rebuild(self) -> None:
        """Write the rebuilt entries, unless the file already holds exactly them: recovery after
        a crash mostly finds the indexes right, and rewriting thousands of them (an ftruncate
        each, milliseconds on a journaled file system) made most of a broker's restart."""
        with self._lock:
            self._rebuilding = False
            if not self._on_disk and not self._pending:
                return
            fd = self._fd
            size = os.fstat(fd).st_size
            if size == len(self._pending) and os.pread(fd, size, 0) == self._pending:
                self._pending.clear()
                os.lseek(fd, size, os.SEEK_SET)
                return
            rebuilt = bytes(self._pending)
        self._rewrite(rebuilt)

    def _rewrite(self, raw: bytes) -> None:
        with self._lock:
            self._pending.clear()
            if not self._on_disk and not raw:
                return
            os.ftruncate(self._fd, 0)
            os.lseek(self._fd, 0, os.SEEK_SET)
            if raw:
                os.write(self._fd, raw)

    def close(self) -> None:
        """Write what is buffered and close the descriptor (the index stays usable)."""
        self.flush()
        self._close_fd()

    def _close_fd(self) -> None:
        with self._lock:
            if self._open_fd is not None:
                os.close(self._open_fd)
                self._open_fd = None

    def delete(self) -> None:
        self._close_fd()
        if self._on_disk:
            os.unlink(self.path)

    def rename(self, path: str) -> None:
        if self._on_disk:
            os.rename(self.path, path)
        self.path = path


def _open_existing(path: str) -> int | None:
    """A descriptor of the index file at `path`, None when there is none (yet)."""
    try:
        return os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None


class OffsetIndex(_IndexFile):
    """Maps an offset to the file position of the batch holding it (or an earlier one)."""

    entry = _OFFSET_ENTRY
    _LAZY = ("_offsets", "_positions")

    def __init__(self, path: str, base_offset: int, new: bool = False, present: bool | None = None) -> None:
        self.base_offset = base_offset
        super().__init__(path, new, present)

    def _set_entries(self, raw: bytes) -> None:
        """The entries of `raw` (whole ones), decoded at once: an active segment's index holds
        up to `segment.index.bytes` / 8 entries, loaded one by one in Python they cost ~0.5 us each."""
        fields = array(_U32, raw[: len(raw) - len(raw) % _OFFSET_ENTRY.size])
        if sys.byteorder == "little":
            fields.byteswap()  # big-endian on disk
        base = self.base_offset
        self._offsets = array("q", [base + relative for relative in fields[0::2]])
        self._positions = array("q", fields[1::2])

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def last_offset(self) -> int:
        return self._offsets[-1] if self._offsets else -1

    def append(self, offset: int, position: int) -> None:
        self._offsets.append(offset)
        self._positions.append(position)
        self._buffer(offset - self.base_offset, position)

    def is_consistent(self, log_size: int) -> bool:
        """Whole entries, offsets and positions strictly increasing, positions inside the log.

        A cheap load-time check, as Kafka's sanity check is; a failing index gets rebuilt.
        """
        return (
            not self.torn
            and (not self._offsets or (self._offsets[0] >= self.base_offset and self._positions[-1] < log_size))
            and _strictly_increasing(self._offsets)
            and _strictly_increasing(self._positions)
        )

    def lookup(self, offset: int) -> int:
        """Position of the batch to start scanning from to find `offset`."""
        i = bisect.bisect_right(self._offsets, offset) - 1
        return self._positions[i] if i >= 0 else 0

    def offset_at_or_after(self, position: int) -> int | None:
        """The offset of the first entry at or after file `position` (None when there is none):
        Kafka's fetchUpperBoundOffset, an upper bound of the offsets before that position."""
        i = bisect.bisect_left(self._positions, position)
        return self._offsets[i] if i < len(self._offsets) else None

    def batch_start_at_or_before(self, position: int) -> int:
        """The last indexed batch start at or before file `position` (0 when none is)."""
        i = bisect.bisect_right(self._positions, position) - 1
        return self._positions[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond `position` (the log was truncated there)."""
        keep = bisect.bisect_left(self._positions, position)
        del self._offsets[keep:]
        del self._positions[keep:]
        self._rewrite(
            b"".join(
                _OFFSET_ENTRY.pack(o - self.base_offset, p)
                for o, p in zip(self._offsets, self._positions, strict=True)
            )
        )


class TimeIndex(_IndexFile):
    """Maps a timestamp to the offset from which to search for records at or after it."""

    entry = _TIME_ENTRY
    _LAZY = ("_timestamps", "_offsets")

    def __init__(self, path: str, base_offset: int, new: bool = False, present: bool | None = None) -> None:
        self.base_offset = base_offset
        super().__init__(path, new, present)

    def _set_entries(self, raw: bytes) -> None:
        self._timestamps = array("q")
        self._offsets = array("q")
        for timestamp, offset in time_entries(raw, self.base_offset):
            self._timestamps.append(timestamp)
            self._offsets.append(offset)

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def last_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else -1

    @property
    def last_offset(self) -> int:
        """The offset of the record with the largest timestamp indexed (-1 when empty)."""
        return self._offsets[-1] if self._offsets else -1

    def append(self, timestamp: int, offset: int) -> None:
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        self._timestamps.append(timestamp)
        self._offsets.append(offset)
        self._buffer(timestamp, offset - self.base_offset)

    def is_consistent(self, next_offset: int) -> bool:
        """Whole entries, timestamps strictly and offsets weakly increasing, offsets inside the segment."""
        return (
            not self.torn
            and (not self._offsets or (self._offsets[0] >= self.base_offset and self._offsets[-1] < next_offset))
            and _strictly_increasing(self._timestamps)
            and _increasing(self._offsets)
        )

    def lookup(self, timestamp: int) -> int:
        """An offset at or before the first record with a timestamp >= `timestamp`."""
        i = bisect.bisect_left(self._timestamps, timestamp) - 1
        return self._offsets[i] if i >= 0 else self.base_offset

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        keep = bisect.bisect_left(self._offsets, offset)
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self._rewrite(
            b"".join(
                _TIME_ENTRY.pack(t, o - self.base_offset)
                for t, o in zip(self._timestamps, self._offsets, strict=True)
            )
        )


def _strictly_increasing(values: array) -> bool:
    return all(map(operator.lt, values, itertools.islice(values, 1, None)))


def _increasing(values: array) -> bool:
    return all(map(operator.le, values, itertools.islice(values, 1, None)))


_ABORTED_TXN_ENTRY = struct.Struct(">hqqqq")
ABORTED_TXN_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One `.txnindex` entry: a transaction aborted by the marker at `last_offset`.

    `last_stable_offset` is the log's LSO when the marker was written, ignoring the high
    watermark (Kafka's ProducerStateManager.lastStableOffset): a reader stops scanning indexes
    at the first entry whose LSO reaches its upper bound, as no later entry can start before it.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def aborted_txn_entries(raw: bytes) -> Iterator[tuple[int, AbortedTxn]]:
    """(version, entry) of each whole `.txnindex` entry in `raw` (a partial last one is left out)."""
    whole = len(raw) - len(raw) % _ABORTED_TXN_ENTRY.size
    for version, *fields in _ABORTED_TXN_ENTRY.iter_unpack(raw[:whole]):
        yield version, AbortedTxn(*fields)


class TransactionIndex:
    """A segment's `.txnindex`: the transactions aborted by markers in the segment, in Kafka's
    format (34-byte entries: version i16 = 0 | producer id i64 | first offset i64 | last offset
    i64 | last stable offset i64), in marker order.

    Aborts are rare, so the file is created by its first entry, holds no descriptor between
    writes (none counts against the segment descriptor budget), and its entries stay in memory.
    """

    def __init__(self, path: str, new: bool = False, present: bool | None = None) -> None:
        """`new`: its segment was just made in a new log directory (no file to read). `present`:
        whether the file is there, when a listing of the directory told."""
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._maybe_on_disk = False  # the file may exist (False: it is known not to)
        if new or present is False:
            return
        try:
            raw = read_small_file(path)
        except FileNotFoundError:
            return
        self._maybe_on_disk = True
        whole = len(raw) - len(raw) % _ABORTED_TXN_ENTRY.size
        if whole != len(raw):
            os.truncate(path, whole)  # a torn last entry: appends must go after the whole ones
        self.entries = [txn for _version, txn in aborted_txn_entries(raw)]

    @property
    def last_offset(self) -> int:
        """The offset of the last marker indexed (-1 when none is)."""
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; markers come in offset order (ValueError otherwise, as Kafka refuses)."""
        if txn.last_offset <= self.last_offset:
            raise ValueError(f"{self.path}: aborted txn at {txn.last_offset} after one at {self.last_offset}")
        self._maybe_on_disk = True
        with open(self.path, "ab") as handle:
            handle.write(_ABORTED_TXN_ENTRY.pack(
                ABORTED_TXN_VERSION, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset
            ))
        self.entries.append(txn)

    def collect(self, start_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [start_offset, upper_bound_offset), and whether the search is
        complete: an entry's LSO reaches the upper bound, so later segments add nothing
        (Kafka's TransactionIndex.collectAbortedTxns)."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= start_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or after `offset` (the segment was cut there)."""
        keep = bisect.bisect_left([txn.last_offset for txn in self.entries], offset)
        if keep < len(self.entries):
            del self.entries[keep:]
            os.truncate(self.path, keep * _ABORTED_TXN_ENTRY.size)

    def reset(self) -> None:
        """Forget every entry and the file (recovery rebuilds them from the log); a file known
        not to be there is not removed again (recovering thousands of logs after a crash)."""
        self.entries = []
        if self._maybe_on_disk:
            self.delete()

    def fsync(self) -> None:
        if self.entries:
            fsync_path(self.path)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def rename(self, path: str) -> None:
        if self.exists():
            os.rename(self.path, path)
        self.path = path
        self._maybe_on_disk = True  # a file of that name may be there already (a swap cut short)

    def delete(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

