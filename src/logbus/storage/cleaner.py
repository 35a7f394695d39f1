"""The log cleaner: compaction of `cleanup.policy=compact` logs, after Kafka's LogCleaner.

A compacted log has a clean part (already compacted, up to the first dirty offset, which the
`cleaner-offset-checkpoint` file in the data dir keeps across restarts) and a dirty part after
it. A log is cleaned when the dirty part is a large enough share of the cleanable bytes
(`min.cleanable.dirty.ratio`), when its oldest dirty record is older than
`max.compaction.lag.ms`, or when a tombstone it kept has outlived `delete.retention.ms`.
The cleanable range ends before the active segment, before the first segment holding
records younger than `min.compaction.lag.ms`, and before the segment holding the first unstable
offset (Kafka cleans nothing past the last stable offset).

One cleaning: (1) map every key of the dirty part to its latest offset; (2) rewrite the log
from its start to the end of the cleanable range into `.cleaned` segments (neighbours merged
up to `segment.bytes`), keeping a record only if it is its key's latest and is not an expired
tombstone; (3) swap them in (`PartitionLog.replace_segments`: `.cleaned` -> `.swap` -> final
name, recoverable after a crash). Steps 1 and 2 run in the cleaner's own worker thread,
reading the segment files through their own file descriptors, so produce and fetch go on;
only step 3 runs on the event loop, briefly, under the log's `io_lock`, and it gives up when
retention or a topic deletion removed a source segment meanwhile.

Records keep their offsets (gaps are fine). A batch whose records all stay is copied byte for
byte; otherwise it is rebuilt with the surviving records' original bytes, recompressed with
its codec, keeping its base offset and last offset delta. A batch left empty disappears,
unless it is the last batch of a producer the log still tracks: then it stays as an empty
batch so producer state (sequence numbers) rebuilds right, as Kafka does; a producer whose
last record is a marker (no data batch since its epoch began) keeps its markers of that epoch,
for fencing. Records without a key are dropped, as Kafka's cleaner drops them.

Transactions, as Kafka's CleanedTransactionMetadata: the aborted transactions of the cleaned
range come from the `.txnindex` entries (`PartitionLog.aborted_transactions`, which also finds
a transaction whose data is cleaned while its ABORT marker is past the range). Their batches
are removed whole, and never enter the key map, so an aborted record cannot hide the value
before it. A marker may go once its transaction's data is gone: an ABORT when no batch of its
transaction was met in this cleaning, a COMMIT when no transactional batch of its producer was
met since that producer's previous marker; so never in the cleaning that removes the data, and
then only once `delete.retention.ms` has passed since the marker's timestamp. An ABORT marker
kept with data of its transaction still in the log keeps its `.txnindex` entry, in the cleaned
segment that holds the marker; the entries of other transactions are dropped (nothing of them
is left to skip). A control batch left without records (a producer's last) is discardable.

Tombstones (null values) go once `delete.retention.ms` has passed since their timestamp (the
record's CreateTime, or the batch's LogAppendTime): a consumer that reads the log to its
end within `delete.retention.ms` of a delete sees it. (Kafka >= 3.1 counts from the first
cleaning that saw the tombstone, or the marker, instead; counting from the timestamp needs no
extra state.) The time at which the next kept tombstone or discardable marker expires is held in
memory and triggers a cleaning then; after a restart it is learnt again at the log's next
cleaning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple

from ..protocol.records import (
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    RawRecord,
    batch_body,
    iter_headers,
    iter_raw_records,
    read_end_txn_marker,
    read_header,
    rebuild_batch,
    whole_batches_length,
)
from . import checkpoints
from .index import AbortedTxn, TransactionIndex
from .log import PartitionLog, now_ms
from .segment import LogSegment, segment_name

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
READ_CHUNK = 4 << 20
WRITE_CHUNK = 1 << 20
MAX_SEGMENT_OFFSET_SPAN = (1 << 31) - 1  # index entries hold offsets relative to the base as u32
CLEANED = ".cleaned"

LogKey = tuple[str, int]


class CleanerStoppedError(Exception):
    """The broker is shutting down: the cleaning in progress is abandoned."""


class LastRecord(NamedTuple):
    """A producer's last record in the log (Kafka's LastRecord): its newest data batch's last
    offset (None when it has only markers since its epoch began) and its epoch."""

    data_offset: int | None
    epoch: int


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    """What one cleaning of one log covers, decided on the event loop."""

    key: LogKey
    log: PartitionLog
    end_offset: int  # the first uncleanable offset: the new first dirty offset
    groups: list[list[LogSegment]]  # source segments, each group becoming one cleaned segment
    sizes: dict[int, int]  # source segment base offset -> size at planning time
    dirty: list[LogSegment]
    last_records: dict[int, LastRecord]  # producer id -> its last record, for the producers the log tracks
    aborted: list[AbortedTxn]  # the transactions aborted in the cleanable range
    dirty_ratio: float
    now: int


@dataclass(slots=True)
class CleaningResult:
    replacements: list[tuple[LogSegment, list[LogSegment]]]
    delete_horizon: int | None  # when the earliest kept tombstone or discardable marker may go
    bytes_read: int
    bytes_written: int
    records_removed: int


class _AbortedData:
    """An aborted transaction met by a cleaning, and whether any of its batches were."""

    __slots__ = ("txn", "seen")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.seen = False


class _Transactions:
    """Kafka's CleanedTransactionMetadata: which batches a cleaning meets (in offset order) belong
    to aborted transactions, and which markers are discardable (their transaction's data gone)."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        self._aborting: dict[int, _AbortedData] = {}  # producer id -> its aborted transaction under way
        self._committing: set[int] = set()  # producers with transactional data met since their last marker
        self.cleaned_index: TransactionIndex | None = None  # where kept ABORT markers' entries go

    def _begin_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.popleft()
            self._aborting.setdefault(txn.producer_id, _AbortedData(txn))

    def on_data(self, header: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (it may go)."""
        self._begin_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._aborting.get(header.producer_id)
        if aborted is not None:
            aborted.seen = True
            return True
        self._committing.add(header.producer_id)
        return False

    def on_control(self, chunk: bytes, header: BatchHeader) -> bool:
        """A control batch: True when it is discardable. An ABORT marker kept for its
        transaction's data keeps its `.txnindex` entry (in `cleaned_index`)."""
        self._begin_up_to(header.last_offset)
        if header.record_count == 0:
            return True  # emptied by an earlier cleaning
        marker = read_end_txn_marker(chunk, header)
        if marker is None:
            return False  # another control type
        if marker.commit:
            if header.producer_id in self._committing:
                self._committing.discard(header.producer_id)
                return False
            return True
        aborted = self._aborting.pop(header.producer_id, None)
        if aborted is None or not aborted.seen:
            return True
        if self.cleaned_index is not None:
            self.cleaned_index.append(aborted.txn)
        return False


@dataclass(slots=True)
class _RecordFilter:
    """Decides batch by batch and record by record what a cleaning keeps."""

    latest: dict[bytes, int]
    now: int
    delete_retention_ms: int
    last_records: dict[int, LastRecord]
    transactions: _Transactions
    delete_horizon: int | None = None
    records_removed: int = 0

    def retained_batch(self, chunk: bytes, header: BatchHeader) -> bytes | None:
        """The batch as the cleaned log holds it: as is, rebuilt, or None when it goes."""
        raw = chunk[header.position : header.position + header.size]
        if header.is_control:
            return self._retained_marker(chunk, header, raw)
        if self.transactions.on_data(header):  # aborted: every record goes
            self.records_removed += header.record_count
            return rebuild_batch(header, []) if self._last_of_producer(header) else None
        records = list(iter_raw_records(batch_body(chunk, header), header.record_count))
        retained = [record for record in records if self._keep(header, record)]
        self.records_removed += len(records) - len(retained)
        if len(retained) == len(records):
            return raw
        if retained or self._last_of_producer(header):
            return rebuild_batch(header, retained)
        return None

    def _retained_marker(self, chunk: bytes, header: BatchHeader, raw: bytes) -> bytes | None:
        """A control batch stays until it is discardable and `delete.retention.ms` past its
        timestamp; then it goes, or stays empty when it is its producer's last record."""
        if not self.transactions.on_control(chunk, header):
            return raw
        expires = header.max_timestamp + self.delete_retention_ms
        if expires > self.now:
            self._note_expiry(expires)
            return raw
        self.records_removed += header.record_count
        return rebuild_batch(header, []) if self._last_of_producer(header) else None

    def _last_of_producer(self, header: BatchHeader) -> bool:
        """Kafka's isBatchLastRecordOfProducer: the batch holding the producer's last sequence,
        or, for a producer whose last record is a marker, a marker of its current epoch."""
        last = self.last_records.get(header.producer_id)
        if last is None:
            return False
        if last.data_offset is None:
            return header.is_control and header.producer_epoch == last.epoch
        return header.last_offset == last.data_offset

    def _note_expiry(self, expires: int) -> None:
        if self.delete_horizon is None or expires < self.delete_horizon:
            self.delete_horizon = expires

    def _keep(self, header: BatchHeader, record: RawRecord) -> bool:
        if record.key is None:
            return False
        offset = header.base_offset + record.offset_delta
        if offset < self.latest.get(record.key, offset):
            return False
        if not record.is_tombstone:
            return True
        if header.attributes & TIMESTAMP_TYPE_BIT:
            timestamp = header.max_timestamp
        else:
            timestamp = header.base_timestamp + record.timestamp_delta
        expires = timestamp + self.delete_retention_ms
        if expires <= self.now:
            return False
        self._note_expiry(expires)
        return True


@dataclass(slots=True)
class CleanerStats:
    """Totals since start, for logs and the benchmark."""

    cleanings: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    seconds: float = 0.0
    failed: set[LogKey] = field(default_factory=set)


class LogCleaner:
    def __init__(self, data_dir: str, logs: Mapping[LogKey, PartitionLog],
                 loading: AbstractSet[LogKey] = frozenset()) -> None:
        """`loading`: the partitions whose logs are still to load at start (their checkpoint
        entries are kept meanwhile)."""
        self._checkpoint_path = os.path.join(data_dir, CHECKPOINT_FILE)
        self._logs = logs
        self._loading = loading
        self.first_dirty: dict[LogKey, int] = checkpoints.read_offsets(self._checkpoint_path)
        self.delete_horizons: dict[LogKey, int] = {}
        self.stats = CleanerStats()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="logbus-cleaner")
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ scheduling (event loop)

    async def clean_due_logs(self) -> int:
        """One round: clean every log that is due, dirtiest first. Returns how many were cleaned."""
        now = now_ms()
        plans = [
            plan for key, log_ in list(self._logs.items())
            if key not in self.stats.failed and (plan := self.plan(key, log_, now)) is not None
        ]
        plans.sort(key=lambda plan: plan.dirty_ratio, reverse=True)
        cleaned = 0
        for plan in plans:
            if self._stopping.is_set():
                break
            cleaned += await self.clean(plan)
        return cleaned

    def plan(self, key: LogKey, log_: PartitionLog, now: int) -> CleaningPlan | None:
        """The cleaning `log_` needs now, or None when it is not due."""
        config = log_.config
        if not config.compact or log_.deleted:
            return None
        first_dirty = self.first_dirty.get(key, log_.log_start_offset)
        if not log_.log_start_offset <= first_dirty <= log_.log_end_offset:
            first_dirty = log_.log_start_offset
        cleanable, end_offset = self._cleanable_segments(log_, now)
        if not cleanable:
            return None
        dirty = [segment for segment in cleanable if segment.next_offset > first_dirty]
        dirty_bytes = sum(segment.size for segment in dirty)
        total_bytes = sum(segment.size for segment in cleanable)
        ratio = dirty_bytes / total_bytes if total_bytes else 0.0
        oldest_dirty = min((s.first_batch_timestamp for s in dirty if s.first_batch_timestamp >= 0), default=now)
        lagging = now - oldest_dirty > config.max_compaction_lag_ms
        deletions_due = self.delete_horizons.get(key, now + 1) <= now
        if not ((dirty_bytes and (ratio > config.min_cleanable_dirty_ratio or lagging)) or deletions_due):
            return None
        producers = log_.producer_state.producers
        return CleaningPlan(
            key, log_, end_offset,
            _group_by_size(cleanable, config.segment_bytes),
            {segment.base_offset: segment.size for segment in cleanable}, dirty,
            {pid: LastRecord(entry.batches[-1].last_offset if entry.batches else None, entry.epoch)
             for pid, entry in producers.items()},
            log_.aborted_transactions(cleanable[0].base_offset, end_offset),
            ratio, now,
        )

    @staticmethod
    def _cleanable_segments(log_: PartitionLog, now: int) -> tuple[list[LogSegment], int]:
        """Segments from the log start up to the active one or the first too young to clean,
        and the offset where that uncleanable part begins."""
        cleanable = []
        unstable = log_.first_unstable_offset
        for segment in log_.segments[:-1]:
            too_young = segment.largest_timestamp > now - log_.config.min_compaction_lag_ms
            if too_young or (unstable is not None and segment.next_offset > unstable):
                return cleanable, segment.base_offset
            if segment.next_offset > log_.log_start_offset:
                cleanable.append(segment)
        return cleanable, log_.active_segment.base_offset

    async def clean(self, plan: CleaningPlan) -> int:
        """Clean one log: the heavy work in the worker thread, then the swap. Returns 1 if swapped."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            result = await loop.run_in_executor(self._executor, self._clean_segments, plan)
        except CleanerStoppedError:
            return 0
        except FileNotFoundError:
            return 0  # a source segment was deleted meanwhile: the next round plans afresh
        except Exception:
            self.stats.failed.add(plan.key)
            log.exception("cleaning %s-%d failed; it is not cleaned again until restart", *plan.key)
            return 0
        async with plan.log.io_lock:
            swapped = plan.log.replace_segments(result.replacements)
        if not swapped:
            await loop.run_in_executor(self._executor, _discard, result.replacements)
            return 0
        self._record(plan, result, loop.time() - started)
        await loop.run_in_executor(self._executor, self._write_checkpoint)
        return 1

    def _record(self, plan: CleaningPlan, result: CleaningResult, seconds: float) -> None:
        self.first_dirty[plan.key] = plan.end_offset
        if result.delete_horizon is None:
            self.delete_horizons.pop(plan.key, None)
        else:
            self.delete_horizons[plan.key] = result.delete_horizon
        stats = self.stats
        stats.cleanings += 1
        stats.bytes_read += result.bytes_read
        stats.bytes_written += result.bytes_written
        stats.records_removed += result.records_removed
        stats.seconds += seconds
        log.info(
            "cleaned %s-%d up to offset %d: %d -> %d bytes, %d records removed, %.2fs",
            *plan.key, plan.end_offset, result.bytes_read, result.bytes_written, result.records_removed, seconds,
        )

    def _write_checkpoint(self) -> None:
        checkpoints.write_offsets(
            self._checkpoint_path,
            {key: offset for key, offset in self.first_dirty.items() if key in self._logs or key in self._loading},
        )

    def forget(self, key: LogKey) -> None:
        """The log was deleted."""
        self.first_dirty.pop(key, None)
        self.delete_horizons.pop(key, None)
        self.stats.failed.discard(key)

    def stop(self) -> None:
        """Abandon a cleaning in progress and wait for the worker thread to notice (one batch)."""
        self._stopping.set()
        self._executor.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ cleaning (worker thread)

    def _clean_segments(self, plan: CleaningPlan) -> CleaningResult:
        latest = self._latest_offsets(plan)
        config = plan.log.config
        keep = _RecordFilter(latest, plan.now, config.delete_retention_ms, plan.last_records,
                             _Transactions(plan.aborted))
        replacements: list[tuple[LogSegment, list[LogSegment]]] = []
        bytes_written = 0
        try:
            for group in plan.groups:
                cleaned = _new_cleaned_segment(plan.log.directory, group[0].base_offset, config.index_interval_bytes)
                replacements.append((cleaned, group))
                keep.transactions.cleaned_index = cleaned.txn_index
                for source in group:
                    self._copy_retained(source, plan.sizes[source.base_offset], cleaned, keep)
                cleaned.fsync()
                bytes_written += cleaned.size
        except BaseException:
            _discard(replacements)
            raise
        return CleaningResult(
            replacements, keep.delete_horizon, sum(plan.sizes.values()), bytes_written, keep.records_removed
        )

    def _latest_offsets(self, plan: CleaningPlan) -> dict[bytes, int]:
        """Each key of the dirty part mapped to the offset of its latest record there, aborted
        transactions' records left out."""
        latest: dict[bytes, int] = {}
        if not plan.dirty:
            return latest
        dirty_start = plan.dirty[0].base_offset
        transactions = _Transactions([txn for txn in plan.aborted if txn.last_offset >= dirty_start])
        for segment in plan.dirty:
            for chunk, header in self._batches(segment.path, plan.sizes[segment.base_offset]):
                if header.is_control:
                    transactions.on_control(chunk, header)
                    continue
                if transactions.on_data(header):
                    continue
                base = header.base_offset
                for record in iter_raw_records(batch_body(chunk, header), header.record_count):
                    if record.key is not None:
                        latest[record.key] = base + record.offset_delta
        return latest

    def _copy_retained(self, source: LogSegment, size: int, cleaned: LogSegment, keep: _RecordFilter) -> None:
        out = bytearray()
        headers: list[BatchHeader] = []
        for chunk, header in self._batches(source.path, size):
            batch = keep.retained_batch(chunk, header)
            if batch is None:
                continue
            position = len(out)
            out += batch
            headers.append(read_header(out, position))
            if len(out) >= WRITE_CHUNK:
                cleaned.append(out, headers)
                out, headers = bytearray(), []
        if out:
            cleaned.append(out, headers)

    def _batches(self, path: str, size: int) -> Iterator[tuple[bytes, BatchHeader]]:
        """The batches of a segment file, read through a descriptor of our own."""
        fd = os.open(path, os.O_RDONLY)
        try:
            position = 0
            while position < size:
                chunk = os.pread(fd, min(READ_CHUNK, size - position), position)
                whole = whole_batches_length(chunk)
                if whole == 0:  # one batch larger than the chunk
                    length = int.from_bytes(chunk[8:12], "big") if len(chunk) >= LOG_OVERHEAD else 0
                    chunk = os.pread(fd, length + LOG_OVERHEAD, position)
                    whole = whole_batches_length(chunk)
                    if whole == 0:
                        return
                for header in iter_headers(memoryview(chunk)[:whole]):
                    if self._stopping.is_set():
                        raise CleanerStoppedError
                    yield chunk, header
                position += whole
        finally:
            os.close(fd)


def _group_by_size(segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    """Runs of neighbouring segments that fit in one segment together (Kafka's grouping)."""
    groups: list[list[LogSegment]] = []
    total = 0
    for segment in segments:
        if groups and total + segment.size <= max_bytes and (
            segment.next_offset - groups[-1][0].base_offset <= MAX_SEGMENT_OFFSET_SPAN
        ):
            groups[-1].append(segment)
            total += segment.size
        else:
            groups.append([segment])
            total = segment.size
    return groups


def _new_cleaned_segment(directory: str, base_offset: int, index_interval_bytes: int) -> LogSegment:
    """An empty `.cleaned` segment, clearing leftovers of an abandoned cleaning first."""
    stem = os.path.join(directory, segment_name(base_offset))
    for extension in (".log", ".index", ".timeindex", ".txnindex"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stem + extension + CLEANED)
    return LogSegment(directory, base_offset, index_interval_bytes, suffix=CLEANED)


def _discard(replacements: list[tuple[LogSegment, list[LogSegment]]]) -> None:
    for cleaned, _ in replacements:
        with contextlib.suppress(OSError):
            cleaned.delete()
