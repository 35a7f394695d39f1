"""One log segment: `<base offset>.log` with its `.index`, `.timeindex` and, once a transaction
is aborted in it, `.txnindex`.

The `.log` file holds record batches exactly as produced (base offset and leader epoch
patched). Appends are one `os.write` of a whole produce blob; reads are a byte range that the
caller sends as is: `os.pread` into memory, or a `FileRegion` the network layer hands to
`sendfile`. Index entries are added every `index_interval_bytes`.

A segment's three descriptors are a budget shared by every log (`OpenSegments`): beyond it the
least recently used segment's files are closed, and opened again on its next use, so thousands
of partitions do not exhaust the process's descriptors. A segment a worker thread uses (an
fsync) is pinned open for that time.
"""

from __future__ import annotations

import ctypes
import io
import logging
import mmap
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    batch_is_intact,
    read_header,
    whole_batches_length,
)
from .index import OffsetIndex, TimeIndex, TransactionIndex

SCAN_CHUNK = 1 << 20
MAX_RELATIVE_OFFSET = (1 << 31) - 1  # what an index entry's relative offset may hold (Kafka: an int)
RESIDENCY_CHECK_BYTES = 64 * 1024

logger = logging.getLogger(__name__)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class ReadSlice:
    """A byte range of a segment file that starts at a batch boundary."""

    segment: LogSegment
    position: int
    size: int

    def read(self) -> bytes:
        return self.segment.read_bytes(self.position, self.size)

    def whole_batches(self) -> ReadSlice:
        """This slice cut back to whole batches, reading only its tail: from the last indexed
        batch start before its end (at most an index interval and one batch away)."""
        end = self.position + self.size
        start = max(self.segment.offset_index.batch_start_at_or_before(end), self.position)
        tail = self.segment.read_bytes(start, end - start)
        return ReadSlice(self.segment, self.position, start - self.position + whole_batches_length(tail))

    def in_page_cache(self) -> bool:
        """Whether reading the slice would not wait for the disk (every page cached and read in).

        Slices under RESIDENCY_CHECK_BYTES are not checked (at most one disk read): the check
        itself (mmap, mincore, munmap: ~50 us) would cost more than their copy.
        """
        if self.size < RESIDENCY_CHECK_BYTES:
            return True
        return _pages_resident(self.segment.fileno(), self.position, self.size)

    def region(self) -> FileRegion:
        """The slice as a file region with its own descriptor (see FileRegion)."""
        return FileRegion(os.fdopen(os.dup(self.segment.fileno()), "rb", buffering=0), self.position, self.size)


class FileRegion:
    """A byte range of a segment file on a descriptor of its own, to be sent with `sendfile`.

    Its own descriptor keeps the bytes readable if retention or the cleaner deletes the segment
    before the response is out. It is closed once sent (or, if never sent, when collected).
    """

    __slots__ = ("file", "position", "size")

    def __init__(self, file: io.FileIO, position: int, size: int) -> None:
        self.file = file
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def close(self) -> None:
        self.file.close()

    def read(self) -> bytes:
        """The bytes of the region (blocking: for a worker thread when they are not cached)."""
        return os.pread(self.file.fileno(), self.size, self.position)


class OpenSegments:
    """The segments whose files are open, least recently used first (event loop only).

    Beyond `limit` the least recently used segment that is not pinned is closed (`release`);
    it opens again when next used. Each open segment holds three descriptors.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: OrderedDict[LogSegment, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def touch(self, segment: LogSegment) -> None:
        """`segment` is used now (its files are open)."""
        if segment in self._open:
            self._open.move_to_end(segment)
            return
        self._open[segment] = None
        for _ in range(len(self._open)):
            if len(self._open) <= self.limit:
                return
            oldest = next(iter(self._open))
            if oldest.pinned:
                self._open.move_to_end(oldest)
                continue
            del self._open[oldest]
            oldest.release()

    def forget(self, segment: LogSegment) -> None:
        self._open.pop(segment, None)


class LogSegment:
    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int, suffix: str = "",
                 new: bool = False, names: set[str] | None = None) -> None:
        """`suffix` (".cleaned", ".swap") names the files of a segment the log cleaner is writing.
        `new`: the first segment of a log whose directory was just made: its `.log` file is
        created, and nothing else is looked for (the index files come with the first write).
        `names`: the directory's file names, when the loader listed it: an index file not among
        them is not looked for (mostly the `.txnindex`, which only an abort makes)."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.suffix = suffix
        name = segment_name(base_offset)
        stem = os.path.join(directory, name)
        self.path = stem + ".log" + suffix
        self._open_fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.open_segments: OpenSegments | None = None  # the descriptor budget, once the log tracks it
        self.pinned = 0  # > 0 while a worker thread uses the descriptors: never released then
        self.size = 0 if new else os.fstat(self._open_fd).st_size
        self.offset_index = OffsetIndex(stem + ".index" + suffix, base_offset, new,
                                        _listed(names, name + ".index" + suffix))
        self.time_index = TimeIndex(stem + ".timeindex" + suffix, base_offset, new,
                                    _listed(names, name + ".timeindex" + suffix))
        self.txn_index = TransactionIndex(stem + ".txnindex" + suffix, new, _listed(names, name + ".txnindex" + suffix))
        self.next_offset = base_offset
        self._max_timestamp = -1
        self._max_timestamp_offset = -1
        self._time_index_checked = True  # False from a load until the time index's first use
        self.clock: Callable[[], int] = _wall_clock_ms  # the log's clock, once it owns the segment
        self.created_ms = self.clock()
        self.first_batch_timestamp = -1
        self._bytes_since_index = 0
        self.last_loaded_batch: BatchHeader | None = None  # the last batch `load_state` or `recover` found

    @property
    def max_timestamp(self) -> int:
        """The largest record timestamp in the segment (-1 when none), as far as its time index
        and the tail a load read tell (the index read and checked on this first use)."""
        if not self._time_index_checked:
            self._check_time_index()
        return self._max_timestamp

    @max_timestamp.setter
    def max_timestamp(self, value: int) -> None:
        self._max_timestamp = value

    @property
    def _offset_of_max_timestamp(self) -> int:
        """The last offset of the batch holding `max_timestamp`."""
        if not self._time_index_checked:
            self._check_time_index()
        return self._max_timestamp_offset

    @_offset_of_max_timestamp.setter
    def _offset_of_max_timestamp(self, value: int) -> None:
        self._max_timestamp_offset = value

    def _checked_time_index(self) -> TimeIndex:
        if not self._time_index_checked:
            self._check_time_index()
        return self.time_index

    def _check_time_index(self) -> None:
        """The time index's first use after `load_state`: read it, rebuild it from the log when
        it does not fit the segment (an entry torn, out of order or past its offsets), and take
        the largest timestamp from it unless the tail that the load read holds a larger one."""
        self._time_index_checked = True
        index = self.time_index
        if not index.is_consistent(self.next_offset):
            logger.warning("%s: rebuilding its time index", self.path)
            self._rebuild_time_index()
        if index.last_timestamp >= self._max_timestamp:
            self._max_timestamp, self._max_timestamp_offset = index.last_timestamp, index.last_offset

    def _rebuild_time_index(self) -> None:
        """The time index's entries again from the batches, where `_index_batch` put them."""
        index = self.time_index
        index.start_rebuild()
        max_timestamp = offset = -1
        since_entry = 0
        first = True
        for _, _, headers in self._scan_chunks():
            for header in headers:
                if header.max_timestamp > max_timestamp:
                    max_timestamp, offset = header.max_timestamp, header.last_offset
                since_entry += header.size
                if since_entry > self.index_interval_bytes or first:
                    if max_timestamp >= 0:
                        index.append(max_timestamp, offset)
                    since_entry = 0
                    first = False
        index.finish_rebuild()

    @property
    def _fd(self) -> int:
        """The log file's descriptor, opened again if the budget closed it; marks the segment used."""
        fd = self._open_fd
        if fd is None:
            fd = self._open_fd = os.open(self.path, os.O_RDWR)
        if self.open_segments is not None:
            self.open_segments.touch(self)
        return fd

    def track(self, open_segments: OpenSegments | None) -> None:
        """Count this segment's descriptors against `open_segments` from now on."""
        self.open_segments = open_segments
        if open_segments is not None and self._open_fd is not None:
            open_segments.touch(self)

    def pin(self) -> None:
        """Keep the files open (opening them) until `unpin`: a worker thread is to use them."""
        self.pinned += 1
        _ = self._fd

    def unpin(self) -> None:
        self.pinned -= 1

    def release(self) -> None:
        """Close the three descriptors; the segment opens them again when next used."""
        self.offset_index.close()
        self.time_index.close()
        if self._open_fd is not None:
            os.close(self._open_fd)
            self._open_fd = None

    # ------------------------------------------------------------------ writes

    def append(self, data: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        """Append whole batches (already validated and offset-patched) in one write.

        On failure (e.g. ENOSPC) the file is cut back to its previous size and the error
        propagates: nothing half-written stays in the log.
        """
        start = self.size
        state = self._append_state()
        try:
            written = os.pwrite(self._fd, data, start)
            if written != len(data):
                raise OSError(28, "short write (disk full?)")
            self.size = start + len(data)
            for header in headers:
                self._index_batch(header, start + header.position)
        except BaseException:
            self._cut_back(start, state)
            raise
        self.offset_index.flush()
        self.time_index.flush()

    def _append_state(self) -> tuple[int, int, int, int, int]:
        return (self.next_offset, self.max_timestamp, self._offset_of_max_timestamp,
                self.first_batch_timestamp, self._bytes_since_index)

    def _cut_back(self, position: int, state: tuple[int, int, int, int, int]) -> None:
        """Undo a failed append: the file, the index entries and the counters as they were."""
        os.ftruncate(self._fd, position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(state[0])
        (self.next_offset, self.max_timestamp, self._offset_of_max_timestamp,
         self.first_batch_timestamp, self._bytes_since_index) = state

    def can_index(self, last_offset: int) -> bool:
        """Kafka's canConvertToRelativeOffset: `last_offset` fits the indexes' relative offsets."""
        return 0 <= last_offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def _index_batch(self, header: BatchHeader, file_position: int) -> None:
        """Account for one batch now at `file_position`: next offset, timestamps, indexes."""
        last_offset = header.base_offset + header.last_offset_delta
        self.next_offset = last_offset + 1
        if self.first_batch_timestamp < 0:
            self.first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = last_offset
        self._bytes_since_index += header.size
        if self._bytes_since_index > self.index_interval_bytes or not len(self.offset_index):
            self.offset_index.append(last_offset, file_position)
            if self.max_timestamp >= 0:
                self.time_index.append(self.max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_index = 0

    def fsync(self) -> None:
        """(Worker thread, on a pinned segment: the descriptor is open and the budget not touched.)"""
        os.fsync(self._open_fd)  # type: ignore[arg-type]
        self.offset_index.fsync()
        self.time_index.fsync()
        self.txn_index.fsync()

    def truncate_to(self, position: int) -> None:
        """Cut the log at a batch boundary and drop index entries beyond it."""
        os.ftruncate(self._fd, position)
        self.size = position
        self.offset_index.truncate_to_position(position)

    def truncate_to_offset(self, offset: int) -> None:
        """Drop the batch holding `offset` and everything after it (Kafka's LogSegment.truncateTo):
        the file, the indexes, and the next offset and timestamps, which are read back from what is
        left (the tail after the last index entry; the whole segment when no index entry is left)."""
        self.txn_index.truncate_to(offset)
        header = self.find_position(offset)
        if header is None:
            return
        self.truncate_to(header.position)
        self._checked_time_index().truncate_to_offset(header.base_offset)
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self._offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        if not self.load_state():
            self.recover()
        self.offset_index.flush()
        self.time_index.flush()

    # ------------------------------------------------------------------ reads

    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def fileno(self) -> int:
        return self._fd

    def headers_from(self, position: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """Batch headers from `position` on (positions are file positions); one pread each."""
        end = self.size if end is None else end
        while position + HEADER_SIZE <= end:
            raw = os.pread(self._fd, HEADER_SIZE, position)
            if len(raw) < HEADER_SIZE:
                return
            header = read_header(raw, located_at=position)
            if header.batch_length < MIN_BATCH_LENGTH or position + header.size > end or header.magic != 2:
                return  # an impossible header ends the readable log: it is never served
            yield header
            position += header.size

    def find_position(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= `offset`, or None past the end."""
        for header in self.headers_from(self.offset_index.lookup(offset)):
            if header.last_offset >= offset:
                return header
        return None

    def read(self, offset: int, max_bytes: int, max_position: int | None) -> ReadSlice | None:
        """A slice from the batch holding `offset`, of at most `max_bytes`.

        `max_position` bounds it (the high watermark's position, when in this segment).
        The first batch is always whole even past `max_bytes` (KIP-74); later ones are cut
        at batch boundaries by the caller's reader.
        """
        header = self.find_position(offset)
        limit = self.size if max_position is None else max_position
        if header is None or header.position >= limit:
            return None
        size = min(max(max_bytes, header.size), limit - header.position)
        return ReadSlice(self, header.position, size)

    def position_of_offset(self, offset: int) -> int:
        """File position where batches at or after `offset` begin (size when past the end)."""
        header = self.find_position(offset)
        return self.size if header is None else header.position

    def first_offset_at_time(self, timestamp: int) -> BatchHeader | None:
        """The first batch whose max timestamp is >= `timestamp`."""
        start = self.offset_index.lookup(self._checked_time_index().lookup(timestamp))
        for header in self.headers_from(start):
            if header.max_timestamp >= timestamp:
                return header
        return None

    # ------------------------------------------------------------------ recovery

    def load_state(self) -> bool:
        """Set next offset and timestamps from the log tail, trusting the file up to the last
        index entry (clean start) and checking the batches after it (framing, CRC, offsets).

        Returns False when the indexes cannot be trusted (a file missing, a torn entry, entries
        out of order or pointing outside the log or at no batch), or when the tail holds damage
        (bytes written while the broker was stopped): the caller then runs `recover`, which cuts
        the log at the first bad batch and rebuilds the indexes, as Kafka does after its index
        sanity check fails. Damage before the last index entry is not looked for (nor by Kafka).
        The tail's last batch is kept as `last_loaded_batch` (the loader's next steps need it).
        The time index is not read here but on its first use (`_check_time_index`), as Kafka's
        lazy indexes: a log loaded after a clean shutdown and only appended to reads it at its
        first append.
        """
        index = self.offset_index
        indexed = index.last_offset
        if self.size and not (index.existed and self.time_index.existed and indexed >= 0
                              and index.is_consistent(self.size)):
            return False
        start = index.lookup(indexed) if indexed >= 0 else 0
        max_timestamp = max_timestamp_offset = -1  # of the tail
        first = last = None
        end = start
        for chunk_start, chunk, headers in self._scan_chunks(start):  # one read: an index interval, a batch
            if first is None:
                first = headers[0]
                if indexed >= 0 and not first.base_offset <= indexed <= first.last_offset:
                    return False  # the last index entry names no batch's offsets
            for header in headers:
                if not self._recoverable(chunk, header):
                    return False
                self.next_offset = header.last_offset + 1
                if header.max_timestamp > max_timestamp:
                    max_timestamp, max_timestamp_offset = header.max_timestamp, header.last_offset
            last = read_header(chunk, headers[-1].position, located_at=chunk_start + headers[-1].position)
            end = last.position + last.size
        if end != self.size:
            return False  # damage after the last good batch: recover cuts it off
        self.last_loaded_batch = last
        if start == 0:
            self.first_batch_timestamp = -1 if first is None else first.max_timestamp
        else:
            self.first_batch_timestamp = self._first_timestamp()
        self._max_timestamp, self._max_timestamp_offset = max_timestamp, max_timestamp_offset
        self._time_index_checked = False
        return True

    def _first_timestamp(self) -> int:
        first = next(self.headers_from(0), None)
        return -1 if first is None else first.max_timestamp

    def recover(self) -> int:
        """Validate every batch (framing, CRC), truncate a torn or corrupt tail, rebuild indexes.

        Returns how many bytes were cut off.
        """
        self.offset_index.start_rebuild()
        self.time_index.start_rebuild()
        self._time_index_checked = True
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp = -1
        self._bytes_since_index = 0
        valid_end = 0
        self.last_loaded_batch = None
        for chunk_start, chunk, headers in self._scan_chunks():
            good = 0
            for header in headers:
                if not self._recoverable(chunk, header):
                    break
                self._index_batch(header, chunk_start + header.position)
                good += 1
            if good:
                last = headers[good - 1]
                valid_end = chunk_start + last.position + last.size
                self.last_loaded_batch = read_header(chunk, last.position, located_at=chunk_start + last.position)
            if good < len(headers):
                break
        self.offset_index.finish_rebuild()
        self.time_index.finish_rebuild()
        cut = self.size - valid_end
        if cut:
            os.ftruncate(self._fd, valid_end)
            self.size = valid_end
        return cut

    def _recoverable(self, buf: bytes, header: BatchHeader) -> bool:
        """A batch recovery keeps: intact, after the previous one, its offsets indexable here."""
        return (
            header.base_offset >= self.next_offset
            and header.last_offset_delta >= 0
            and self.can_index(header.last_offset)
            and batch_is_intact(buf, header)
        )

    def _scan_chunks(self, position: int = 0) -> Iterator[tuple[int, bytes, list[BatchHeader]]]:
        """Read the file from `position` in large chunks of whole batches, yielding their headers
        (positions in the chunk)."""
        while position < self.size:
            size = self.size - position  # the rest, unless over a chunk: then a chunk or one batch
            if size > SCAN_CHUNK:
                size = min(max(SCAN_CHUNK, self._batch_size_at(position)), size)
            chunk = os.pread(self._fd, size, position)
            headers = []
            offset = 0
            while offset + HEADER_SIZE <= len(chunk):
                header = read_header(chunk, offset)
                if header.batch_length < MIN_BATCH_LENGTH or offset + header.size > len(chunk):
                    break
                headers.append(header)
                offset += header.size
            if not headers:
                return
            yield position, chunk, headers
            position += offset

    def _batch_size_at(self, position: int) -> int:
        raw = os.pread(self._fd, LOG_OVERHEAD, position)
        if len(raw) < LOG_OVERHEAD:
            return 0
        length = int.from_bytes(raw[8:12], "big", signed=True)
        return max(0, min(length + LOG_OVERHEAD, self.size - position))

    @property
    def largest_timestamp(self) -> int:
        """What retention.ms measures: the largest record timestamp, else the file's mtime (as Kafka)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self._fd).st_mtime * 1000)

    # ------------------------------------------------------------------ lifecycle

    def roll_due(
        self, segment_bytes: int, segment_ms: int, incoming_bytes: int, incoming_max_ts: int
    ) -> bool:
        """Kafka's roll rule: the segment would overflow, or it spans more than segment.ms.

        The time span is the incoming batch's timestamp minus the segment's first one (the
        creation wall-clock time when the segment has no timestamps yet).
        """
        if self.size == 0:
            return False
        if self.size + incoming_bytes > segment_bytes:
            return True
        if self.first_batch_timestamp >= 0:
            return incoming_max_ts - self.first_batch_timestamp > segment_ms
        return self.clock() - self.created_ms > segment_ms

    def rename_suffix(self, suffix: str) -> None:
        """Rename the files to carry `suffix` instead (indexes first, the log last: a `.log.swap`
        left by a crash means the swap is unfinished, see loader.py)."""
        stem = os.path.join(self.directory, segment_name(self.base_offset))
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.rename(stem + ".txnindex" + suffix)
        self.offset_index.rename(stem + ".index" + suffix)
        self.time_index.rename(stem + ".timeindex" + suffix)
        os.rename(self.path, stem + ".log" + suffix)
        self.path = stem + ".log" + suffix
        self.suffix = suffix

    def close(self) -> None:
        if self.open_segments is not None:
            self.open_segments.forget(self)
            self.open_segments = None
        self.release()

    def retire(self) -> list[str]:
        """Rename the files to `.deleted` and close them (Kafka's asynchronous segment delete).

        Readers no longer find the segment; a FileRegion already handed out keeps its own
        descriptor. Returns the paths, which the caller removes after `file.delete.delay.ms`
        (a start-up removes any `.deleted` files left).
        """
        self.rename_suffix(".deleted")
        self.close()
        return [self.offset_index.path, self.time_index.path, self.txn_index.path, self.path]

    def delete(self) -> None:
        self.close()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        os.unlink(self.path)


def _listed(names: set[str] | None, name: str) -> bool | None:
    """Whether `name` is among the listed `names` (None: not listed, an open finds out)."""
    return None if names is None else name in names


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _load_libc()
_MAP_FAILED = ctypes.c_void_p(-1).value


def _pages_resident(fd: int, position: int, size: int) -> bool:
    """mincore(2) over a throwaway mapping of the range: True when every page is cached and up to
    date (a read of it waits for no disk). It starts no I/O, unlike a RWF_NOWAIT read, whose
    readahead submission can block. True when it cannot tell (no mincore)."""
    if _LIBC is None:
        return True
    start = position - position % mmap.PAGESIZE
    length = position + size - start
    address = _LIBC.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if address is None or address == _MAP_FAILED:
        return True
    try:
        pages = ctypes.create_string_buffer((length + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
        if _LIBC.mincore(address, length, pages) != 0:
            return True
        return b"\x00" not in pages.raw
    finally:
        _LIBC.munmap(address, length)
