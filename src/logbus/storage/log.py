"""A partition's log: its segments, offsets, appends, truncation, retention and flushing.

This is Kafka's UnifiedLog for one `<topic>-<partition>` directory; opening it from disk (crash
recovery) is `loader.py`, its leader epochs `epoch_cache.py`. It knows nothing of the network:
it appends validated batches as leader (assigning offsets) or as follower (keeping the leader's),
truncates to a follower's divergence point, hands out byte slices for fetches, and keeps log
start offset, log end offset and recovery point. The high watermark belongs to
the partition (cluster/partition.py), which bounds reads with it; the log derives the last stable
offset from it and from the open transactions (producer_state.py), and finds the aborted
transactions a read_committed reader must skip in its segments' `.txnindex` files.

File descriptors are only closed (segment deletion, close) under `io_lock`, the same lock a
background fsync holds, so an fsync running in a worker thread never sees a closed or reused fd.

Nothing here fsyncs on the event loop. A new leader epoch's checkpoint is written (not synced)
before the first record of that epoch and fsynced by the next flush, before the recovery point
passes it; after a crash the epochs past the recovery point are read back from the batches, as
Kafka's recovery assigns them. A roll's producer snapshot and the removal of deleted segments'
files (renamed to `.deleted` at once, removed after `file.delete.delay.ms`) are `FileJobs`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import functools
import glob
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kio.schema.errors import ErrorCode

from ..config import LONG_MAX, LogConfig
from ..errors import InvalidProducerEpochError, KafkaApiError, OffsetOutOfRangeError, OutOfOrderSequenceError
from ..protocol.records import (
    BatchHeader,
    EndTxnMarker,
    assign_offsets,
    build_end_txn_marker,
    decodable_records,
    read_end_txn_marker,
    read_header,
    set_log_append_time,
)
from .epoch_cache import LeaderEpochCache
from .files import fsync_file
from .index import AbortedTxn
from .jobs import FileJobs
from .producer_state import CachedBatch, ProducerStateManager, SequenceCheck
from .segment import FileRegion, LogSegment, OpenSegments, ReadSlice

SCAN_AHEAD_BYTES = 64 * 1024  # past the index interval: the batch holding a fetch offset starts in here

log = logging.getLogger(__name__)
T = TypeVar("T")


class FollowerAppendError(Exception):
    """Fetched batches that do not continue the follower's log."""


@dataclass(frozen=True, slots=True)
class AppendInfo:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime topics
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


def now_ms() -> int:
    return int(time.time() * 1000)


def _reports_io_errors(method: Callable[..., T]) -> Callable[..., T]:
    """An OSError from the disk is told to the log's `on_io_error` (the log manager takes the
    log dir offline, Kafka's LogDirFailureChannel), then raised as before."""

    @functools.wraps(method)
    def reporting(self: PartitionLog, *args: object, **kwargs: object) -> T:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            self.report_io_error(exc)
            raise

    return reporting


class PartitionLog:
    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 clock: Callable[[], int] = now_ms) -> None:
        """`clock`: wall-clock milliseconds (tests pass their own)."""
        self.directory = directory
        self.clock = clock
        self.topic = topic
        self.partition = partition
        self.on_flush_candidate: Callable[[PartitionLog], None] | None = None  # the log manager's
        self.config = config
        self.segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.producer_state = ProducerStateManager(directory)
        self.epoch_cache = LeaderEpochCache(directory)
        self.jobs = FileJobs()  # the log manager gives it a worker thread
        self.open_segments: OpenSegments | None = None  # the log manager's descriptor budget
        self.io_lock = asyncio.Lock()
        self.unflushed_messages = 0
        self.last_flush_ms = clock()
        self.deleted = False
        self.on_io_error: Callable[[OSError], None] | None = None  # the log manager's: the dir failed

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """A new config (flush.ms, flush.messages) may make a flush due."""
        self._config = config
        self._may_need_flush()

    def _may_need_flush(self) -> None:
        """Appended to, or given a new config: the log manager looks at this log's flush again
        (`flush_due`; it stops looking once `flush_may_come_due` is False)."""
        if self.on_flush_candidate is not None:
            self.on_flush_candidate(self)

    def report_io_error(self, exc: OSError) -> None:
        if self.on_io_error is not None:
            self.on_io_error(exc)

    # ------------------------------------------------------------------ loading

    def load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> int:
        """Open the segments on disk, recovering after a crash (see loader.py); returns how many
        bytes recovery cut from torn or corrupt tails."""
        from .loader import LogLoader

        return LogLoader(self).load(recovery_point, log_start_offset, clean_shutdown)

    @property
    def epochs(self) -> list[tuple[int, int]]:
        """(leader epoch, start offset) entries, oldest first."""
        return self.epoch_cache.entries

    def _batches_from_offset(self, offset: int) -> Iterator[tuple[LogSegment, BatchHeader]]:
        """Headers of the batches that end at or after `offset`, with their segments."""
        for segment in self.segments[self._segment_for(offset) :]:
            for header in segment.headers_from(segment.offset_index.lookup(offset)):
                if header.last_offset >= offset:
                    yield segment, header

    def _delete_segments(self, doomed: list[LogSegment]) -> None:
        for segment in doomed:
            self.segments.remove(segment)
            self._base_offsets.remove(segment.base_offset)
            segment.delete()

    def replace_segments(self, replacements: list[tuple[LogSegment, list[LogSegment]]]) -> bool:
        """Swap cleaned segments in for the ones they were cleaned from; the caller holds io_lock.

        Kafka's protocol: every new segment goes `.cleaned` -> `.swap`, then the old segments
        are deleted, then `.swap` -> final name; `load` finishes the job after a crash. An empty
        cleaned segment is dropped unless it is the log's first, so the log start stays put.
        Returns False, changing nothing, when a source segment is gone (retention, deletion).
        """
        if self.deleted or any(old not in self.segments for _, olds in replacements for old in olds):
            return False
        for new, _ in replacements:
            new.rename_suffix(".swap")
        segments = list(self.segments)
        for new, olds in replacements:
            at = segments.index(olds[0])
            for old in olds:
                self._retire(old)
            new.rename_suffix("")
            new.track(self.open_segments)
            if new.size == 0 and at > 0:
                new.delete()
                segments[at : at + len(olds)] = []
            else:
                segments[at : at + len(olds)] = [new]
        self.segments = segments
        self._base_offsets = [segment.base_offset for segment in segments]
        return True

    def track_segments(self, open_segments: OpenSegments) -> None:
        """Count the segments' descriptors against the log manager's budget from now on (a log
        loaded in a worker thread joins it on the event loop)."""
        self.open_segments = open_segments
        for segment in self.segments:
            segment.track(open_segments)

    def _add_segment(self, base_offset: int, new: bool = False, names: set[str] | None = None) -> LogSegment:
        """`new`: the log's directory was just made; `names`: the files in it (see LogSegment)."""
        segment = LogSegment(self.directory, base_offset, self.config.index_interval_bytes, new=new, names=names)
        segment.clock = self.clock
        segment.created_ms = self.clock()
        segment.track(self.open_segments)
        self.segments.append(segment)
        self._base_offsets.append(base_offset)
        return segment

    # ------------------------------------------------------------------ offsets

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    def _segment_for(self, offset: int) -> int:
        return max(bisect.bisect_right(self._base_offsets, offset) - 1, 0)

    # ------------------------------------------------------------------ appends

    @_reports_io_errors
    def append(
        self, data: bytearray, headers: list[BatchHeader], leader_epoch: int
    ) -> AppendInfo:
        """Append validated batches as leader: assign offsets, check sequences, write once.

        Raises OutOfOrderSequenceError / InvalidProducerEpochError, or OSError from the disk
        (nothing is then written).
        """
        duplicate = self._check_sequences(headers)
        if duplicate is not None:
            return AppendInfo(duplicate.first_offset, duplicate.last_offset, -1, duplicate=True)
        base = self.log_end_offset
        assign_offsets(data, headers, base, leader_epoch)
        append_time = -1
        if self.config.log_append_time:
            append_time = self.clock()
            set_log_append_time(data, headers, append_time)
        headers = self._reread(data, headers)
        self._maybe_roll(len(data), max(h.max_timestamp for h in headers), headers[-1].last_offset)
        self._track_epoch(leader_epoch, base)  # before the data: a failure here must leave no records
        self.active_segment.append(data, headers)
        self._track_producers(data, headers)
        self.unflushed_messages += sum(h.last_offset_delta + 1 for h in headers)
        self._may_need_flush()
        return AppendInfo(base, self.log_end_offset - 1, append_time)

    @_reports_io_errors
    def append_as_follower(self, data: bytes | memoryview, headers: list[BatchHeader]) -> AppendInfo:
        """Append batches fetched from the leader as they are: offsets and leader epochs kept.

        The first batch may start after the log end offset (a compacted leader log has gaps, as
        Kafka allows) but never before it (FollowerAppendError: the fetcher fetched from the
        wrong place), and batches must not overlap. Producer state is updated from them without
        the leader's sequence checks, as Kafka's follower does, so that a new leader still
        deduplicates a producer's retries.
        """
        expected = self.log_end_offset
        for header in headers:
            if header.base_offset < expected:
                raise FollowerAppendError(
                    f"{self.topic}-{self.partition}: batch at offset {header.base_offset}, log end is {expected}")
            expected = header.last_offset + 1
        first = headers[0].base_offset
        if first > self.log_end_offset and not self.active_segment.can_index(headers[-1].last_offset):
            self.roll(first)  # a gap too wide for this segment's relative offsets
        self._maybe_roll(len(data), max(h.max_timestamp for h in headers), headers[-1].last_offset)
        for header in headers:
            self._track_epoch(header.partition_leader_epoch, header.base_offset)
        self.active_segment.append(data, headers)
        self._track_producers(data, headers)
        self.unflushed_messages += sum(h.last_offset_delta + 1 for h in headers)
        self._may_need_flush()
        return AppendInfo(first, headers[-1].last_offset, -1)

    def truncate_to(self, offset: int) -> list[str]:
        """Drop everything at and after `offset` (a follower whose log diverged from its leader's):
        segments, indexes, leader epochs (fsynced), producer state, recovery point. The caller
        holds `io_lock` and then fsyncs the returned paths off the event loop (the cut segment
        and the directory), so a crash cannot bring the dropped batches back."""
        if offset >= self.log_end_offset:
            return []
        if offset < self.log_start_offset:
            return self.truncate_fully_and_start_at(offset)
        doomed = [s for s in self.segments[1:] if s.base_offset >= offset]
        self._delete_segments(doomed)
        self.active_segment.truncate_to_offset(offset)
        self._after_truncation()
        return [self.active_segment.path, self.epoch_cache.path, self.directory]

    def truncate_fully_and_start_at(self, offset: int) -> list[str]:
        """Delete every segment and start the log empty at `offset` (a follower whose fetch offset
        fell below its leader's log start offset). Same contract as `truncate_to`."""
        self._delete_segments(list(self.segments))
        self._add_segment(offset).next_offset = offset
        self.log_start_offset = offset
        self.recovery_point = offset
        self.epoch_cache.replace([], sync=False)
        self.producer_state.reset()
        self.producer_state.drop_snapshots_after(-1)
        return [self.epoch_cache.path, self.directory]

    def _after_truncation(self) -> None:
        """Epochs, producer state (the last snapshot at or before the new end, plus the log after
        it, as after a restart) and recovery point follow a cut log."""
        end = self.log_end_offset
        self.recovery_point = min(self.recovery_point, end)
        self.epoch_cache.truncate_from_end(end)
        self.producer_state.drop_snapshots_after(end)
        self.rebuild_producer_state(self.producer_state.load_snapshot(end))

    def _track_producers(self, data: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        """Producer state after batches reached the active segment (`data` holds them at their
        positions). A `.txnindex` write that fails cuts the append back: the log never holds an
        abort its index lacks."""
        try:
            for header in headers:
                marker = read_end_txn_marker(data, header) if header.is_control else None
                self._apply_batch(self.active_segment, header, marker)
        except OSError:
            self.truncate_to(headers[0].base_offset)
            raise

    def rebuild_producer_state(self, start: int) -> None:
        """Replay the batches from `start` (where the loaded snapshot ends) into producer state.
        ABORT markers that their segment's `.txnindex` lacks (recovery reset it) are indexed
        again, with the LSO the replayed state gives, as when they were appended."""
        if start >= self.log_end_offset:
            return  # the snapshot is at the log end (a clean shutdown wrote it): nothing to replay
        for segment, header in self._batches_from_offset(start):
            marker = None
            if header.is_control:
                batch = segment.read_bytes(header.position, header.size)
                marker = read_end_txn_marker(batch, dataclasses.replace(header, position=0))
            self._apply_batch(segment, header, marker)

    def _apply_batch(self, segment: LogSegment, header: BatchHeader, marker: EndTxnMarker | None) -> None:
        aborted = self.producer_state.update(header, marker)
        if aborted is not None and aborted.last_offset > segment.txn_index.last_offset:
            segment.txn_index.append(aborted)

    def append_control_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                              coordinator_epoch: int, leader_epoch: int) -> AppendInfo:
        """Write a transaction's COMMIT or ABORT marker as leader (the transaction coordinator's
        WriteTxnMarkers). Refused as Kafka's ProducerAppendInfo refuses it: INVALID_PRODUCER_EPOCH
        for an epoch older than the producer's, TRANSACTION_COORDINATOR_FENCED for an older
        coordinator epoch."""
        entry = self.producer_state.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise KafkaApiError(ErrorCode.invalid_producer_epoch,
                                f"producer {producer_id}: marker epoch {producer_epoch} < {entry.epoch}")
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            raise KafkaApiError(ErrorCode.transaction_coordinator_fenced,
                                f"producer {producer_id}: coordinator epoch {coordinator_epoch} is fenced")
        marker = EndTxnMarker(commit, coordinator_epoch)
        batch = bytearray(build_end_txn_marker(producer_id, producer_epoch, marker, self.clock()))
        return self.append(batch, [read_header(batch)], leader_epoch)

    def latest_epoch(self) -> int:
        """The leader epoch of the last batch (-1 for a log without epochs)."""
        return self.epoch_cache.latest_epoch

    @staticmethod
    def _reread(data: bytearray, headers: list[BatchHeader]) -> list[BatchHeader]:
        """Headers again after patching, so they carry assigned offsets and timestamps."""
        return [read_header(data, h.position) for h in headers]

    def _check_sequences(self, headers: list[BatchHeader]) -> CachedBatch | None:
        for header in headers:
            verdict, cached = self.producer_state.check(header)
            if verdict is SequenceCheck.DUPLICATE:
                return cached
            if verdict is SequenceCheck.OUT_OF_ORDER:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id}: sequence {header.base_sequence} out of order"
                )
            if verdict is SequenceCheck.FENCED:
                raise InvalidProducerEpochError(
                    f"producer {header.producer_id}: epoch {header.producer_epoch} is fenced"
                )
        return None

    def _maybe_roll(self, incoming_bytes: int, incoming_max_ts: int, incoming_last_offset: int) -> None:
        """Roll when the segment is due (size, age, a full index), or before the incoming batches'
        offsets would overflow its indexes' relative offsets (Kafka's canConvertToRelativeOffset)."""
        segment = self.active_segment
        index_full = len(segment.offset_index) * 8 >= self.config.segment_index_bytes
        if index_full or not segment.can_index(incoming_last_offset) or segment.roll_due(
            self.config.segment_bytes, self.config.max_segment_ms, incoming_bytes, incoming_max_ts
        ):
            self.roll()

    @_reports_io_errors
    def roll(self, base: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (or at `base`, past it: a follower's
        gap)."""
        if self.active_segment.size == 0 and base is None:
            return self.active_segment
        base = self.log_end_offset if base is None else base
        self.active_segment.offset_index.flush()
        segment = self._add_segment(base)
        segment.next_offset = base
        self.jobs.submit(self.producer_state.write_snapshot_state, base, self.producer_state.snapshot_state())
        return segment

    def _track_epoch(self, leader_epoch: int, start_offset: int) -> None:
        """Record a new leader epoch starting at `start_offset` (see epoch_cache.py: written now,
        fsynced by the next flush; Kafka instead fsyncs here, holding the log's lock). Raises
        OSError (a full disk) with nothing changed, so the append is retried whole."""
        self.epoch_cache.assign(leader_epoch, start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers it (LeaderEpochCache.end_offset_for)."""
        return self.epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch under which `offset` was written (-1 when unknown)."""
        return self.epoch_cache.epoch_for(offset)

    # ------------------------------------------------------------------ transactions

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction not yet stable (None: every one is)."""
        return self.producer_state.first_unstable_offset

    def on_high_watermark(self, high_watermark: int) -> None:
        """The partition's HW moved (Kafka's onHighWatermarkUpdated): transactions whose markers
        it passed are stable now, for the cleaner as for readers."""
        self.producer_state.on_high_watermark(high_watermark)

    def last_stable_offset(self, high_watermark: int) -> int:
        """min(HW, first unstable offset), as Kafka's UnifiedLog.lastStableOffset; transactions
        whose markers are below the HW stop counting as unstable."""
        self.producer_state.on_high_watermark(high_watermark)
        first = self.first_unstable_offset
        return high_watermark if first is None else min(first, high_watermark)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the transactions aborted within [start_offset,
        upper_bound_offset), what a read_committed fetch returns (Kafka's
        collectAbortedTransactions)."""
        return [(txn.producer_id, txn.first_offset)
                for txn in self.aborted_transactions(start_offset, upper_bound_offset)]

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The `.txnindex` entries of transactions aborted within [start_offset, upper_bound_offset):
        from the segment holding `start_offset` and later ones, until an entry's LSO reaches the
        upper bound (no later transaction can start before it)."""
        found: list[AbortedTxn] = []
        for segment in itertools.islice(self.segments, self._segment_for(start_offset), None):
            index = segment.txn_index
            if not index.entries:
                continue
            entries, complete = index.collect(start_offset, upper_bound_offset)
            found.extend(entries)
            if complete:
                break
        return found

    def aborted_transactions_in(self, offset: int, found: ReadSlice | None) -> list[tuple[int, int]]:
        """What a read_committed read from `offset` that returned `found` must be told of: the
        transactions aborted from `offset` up to the bound Kafka's LocalLog.addAbortedTransactions
        puts after the data (the offset of the first indexed batch at or after its end, else the
        next segment's base offset, else the log end). An upper bound, not the exact end: an
        entry too many names a transaction the reader never meets, which it ignores."""
        if found is None:
            return []
        return self.collect_aborted_transactions(offset, self._fetch_upper_bound(found))

    def _fetch_upper_bound(self, found: ReadSlice) -> int:
        segment = found.segment
        upper = segment.offset_index.offset_at_or_after(found.position + found.size)
        if upper is not None:
            return upper
        later = bisect.bisect_right(self._base_offsets, segment.base_offset)
        return self._base_offsets[later] if later < len(self._base_offsets) else self.log_end_offset

    # ------------------------------------------------------------------ reads

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool = True) -> ReadSlice | None:
        """Bytes from the batch holding `offset`, stopping before `max_offset` (the HW).

        With `min_one_batch` the first batch is whole even past `max_bytes` (KIP-74); without it
        a first batch larger than `max_bytes` reads nothing (Kafka's minOneMessage=false).
        Raises OffsetOutOfRangeError outside [log start, log end].
        """
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        if offset >= max_offset:
            return None
        for i in range(self._segment_for(offset), len(self.segments)):
            segment = self.segments[i]
            max_position = None if max_offset >= segment.next_offset else (
                segment.position_of_offset(max_offset)
            )
            found = segment.read(offset, max_bytes, max_position)
            if found is not None:  # larger than max_bytes only when its first batch is
                return found if min_one_batch or found.size <= max_bytes else None
            if max_position is not None:
                return None
        return None

    def uncached_read_start(self, offset: int) -> FileRegion | None:
        """The bytes a read from `offset` scans for its first batch, when they are not in the page
        cache: a region on its own descriptor for a worker thread to read (loading them), so that
        the read itself does not wait for the disk on the event loop. None when cached or empty.
        """
        if not self.log_start_offset <= offset < self.log_end_offset:
            return None
        segment = self.segments[self._segment_for(offset)]
        start = segment.offset_index.lookup(offset)
        size = min(segment.size - start, self.config.index_interval_bytes + SCAN_AHEAD_BYTES)
        if size <= 0:
            return None
        scanned = ReadSlice(segment, start, size)
        return None if scanned.in_page_cache() else scanned.region()

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record with a timestamp >= `timestamp` (ListOffsets by time)."""
        for segment in self.segments[self._segment_for(self.log_start_offset) :]:
            if segment.max_timestamp < timestamp:
                continue
            header = segment.first_offset_at_time(timestamp)
            if header is None:
                continue
            batch = segment.read_bytes(header.position, header.size)
            records = decodable_records(batch, dataclasses.replace(header, position=0))
            for record in records or ():
                if record.offset >= self.log_start_offset and record.timestamp >= timestamp:
                    return TimestampOffset(record.timestamp, record.offset)
            if header.max_timestamp >= timestamp and (header.is_control or records is None):
                # no record to name: the batch's first offset still in the log, as for a control batch
                return TimestampOffset(header.max_timestamp, max(header.base_offset, self.log_start_offset))
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """The first record with the largest timestamp (ListOffsets MAX_TIMESTAMP).

        A segment knows only the last offset of the batch holding it (as its time index does);
        that batch is read to find the record itself, as Kafka does since KAFKA-16310 (with
        LogAppendTime every record has the batch's timestamp: the first one is it).
        """
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return None
        shallow = TimestampOffset(best.max_timestamp, best._offset_of_max_timestamp)
        header = best.find_position(shallow.offset)
        if header is None or header.max_timestamp != shallow.timestamp:
            return shallow
        batch = best.read_bytes(header.position, header.size)
        for record in decodable_records(batch, dataclasses.replace(header, position=0)) or ():
            if record.timestamp == shallow.timestamp:
                return TimestampOffset(record.timestamp, record.offset)
        return shallow

    # ------------------------------------------------------------------ retention

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset (DeleteRecords); returns the new log start offset."""
        if offset > self.log_start_offset:
            self.log_start_offset = min(offset, self.log_end_offset)
            self.epoch_cache.truncate_from_start(self.log_start_offset)
        return self.log_start_offset

    def segments_to_delete(self, now: int) -> list[LogSegment]:
        """Old segments that retention or the log start offset have made deletable."""
        doomed: list[LogSegment] = []
        remaining = self.size_in_bytes
        retention_bytes = self.config.retention_bytes
        for i, segment in enumerate(self.segments):
            next_base = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else None
            below_start = next_base is not None and next_base <= self.log_start_offset
            empty = segment.size == 0  # only the active segment, or the first after compaction
            expired = self.config.delete and self.config.retention_ms >= 0 and (
                (empty and next_base is not None)
                or (not empty and now - segment.largest_timestamp > self.config.retention_ms)
            )
            oversized = (
                self.config.delete and retention_bytes >= 0
                and remaining - segment.size >= retention_bytes
            )
            if not (below_start or expired or oversized) or (empty and next_base is None):
                break
            doomed.append(segment)
            remaining -= segment.size
        return doomed

    async def delete_old_segments(self, now: int | None = None) -> int:
        """Apply retention; the active segment is rolled first when it must go too.

        Planned under io_lock, as the log cleaner swaps segments under it.
        """
        async with self.io_lock:
            doomed = self.segments_to_delete(self.clock() if now is None else now)
            if not doomed:
                return 0
            if doomed[-1] is self.active_segment:
                self.roll()
            for segment in doomed:
                self.segments.remove(segment)
                self._base_offsets.remove(segment.base_offset)
                self._retire(segment)
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.epoch_cache.truncate_from_start(self.log_start_offset)
        return len(doomed)

    def _retire(self, segment: LogSegment) -> None:
        """Rename a removed segment's files to `.deleted` now, remove them after file.delete.delay.ms."""
        paths = segment.retire()
        self.jobs.submit_after(self.config.file_delete_delay_ms, self._remove_retired, paths)

    def _remove_retired(self, paths: list[str]) -> None:
        """Remove a retired segment's files (worker thread), unless the partition was deleted
        meanwhile: its directory is gone, and a new one of the same name is not ours."""
        if self.deleted:
            return
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    # ------------------------------------------------------------------ flushing

    def flush_due(self, now: int) -> bool:
        if self.log_end_offset <= self.recovery_point:
            return False
        return (
            self.unflushed_messages >= self.config.flush_messages
            or now - self.last_flush_ms >= self.config.flush_ms
        )

    def flush_may_come_due(self) -> bool:
        """Whether, with no append and no new config, time alone could make `flush_due` true:
        records past the recovery point, and a flush.ms that is not "never" (flush.messages
        counts appends)."""
        return self.log_end_offset > self.recovery_point and self.config.flush_ms < LONG_MAX

    async def flush(self, run_blocking: Callable) -> None:
        """fsync everything up to the current log end, in a worker thread."""
        target = self.log_end_offset
        if target <= self.recovery_point:
            return
        async with self.io_lock:
            if target <= self.recovery_point or self.deleted:
                return
            segments = self.segments[self._segment_for(self.recovery_point) :]
            self.unflushed_messages = 0
            files = self._unsynced_files()
            try:
                await _fsync_pinned(run_blocking, segments, files)
            except BaseException as exc:
                self.epoch_cache.unsynced = self.epoch_cache.unsynced or bool(files)
                if isinstance(exc, OSError):
                    self.report_io_error(exc)
                raise
            self.recovery_point = max(self.recovery_point, target)
            self.last_flush_ms = self.clock()

    def _unsynced_files(self) -> list[str]:
        """Files to fsync with the next flush (the leader-epoch checkpoint once a new epoch began).

        Taken before the flush runs: an epoch begun meanwhile stays marked for the next one.
        """
        if not self.epoch_cache.unsynced:
            return []
        self.epoch_cache.unsynced = False
        return [self.epoch_cache.path]

    async def close(self, run_blocking: Callable, fsync: bool) -> functools.partial[None] | None:
        """Close at shutdown, as Kafka's flush-then-close: with `fsync`, what `flush` would sync
        (the segments from the recovery point on, when the log end is past it), not every
        segment of every log: an fsync costs about a millisecond here even of a file with nothing
        to write, and the old way also opened again each segment the descriptor budget had closed.
        Returns the producer snapshot still to write (`snapshot_at_close`: a blocking call, None
        when there is none to write), which the log manager writes with the other logs' in a
        few I/O jobs: one job per log was 10,000 thread handoffs at a broker's stop (issue 25).
        Without a running job or flush, it does not wait."""
        await self.jobs.drain()
        async with self.io_lock:
            if fsync and self.unsynced:
                unsynced = self.segments[self._segment_for(self.recovery_point):]
                await _fsync_pinned(run_blocking, unsynced, self._unsynced_files())
                self.recovery_point = self.log_end_offset
            for segment in self.segments:
                segment.close()
            self.deleted = True
        if self._replay_costs_a_start_no_more_than_a_snapshot():
            return None
        return self.producer_state.snapshot_at_close(self.log_end_offset)

    def _replay_costs_a_start_no_more_than_a_snapshot(self) -> bool:
        """Is replaying the records past the newest snapshot (or the log start) as cheap for the
        next start as loading a snapshot at the end? So when the replay begins in the active
        segment and that segment is within one index interval: one read of at most that many
        bytes, which a start without the file needs instead of opening and parsing the snapshot
        (in process, 0.36 ms of CPU per log either way). Such a log gets none at close: creating
        the file costs ~0.5 ms of system time on ext4, 5-9 s at a broker's stop with 10,000
        moved logs (issue 25)."""
        newest = self.producer_state.newest_snapshot_known(self.log_end_offset)
        active = self.segments[-1]
        return newest is not None and newest >= active.base_offset and active.size <= self.config.index_interval_bytes

    @property
    def unsynced(self) -> bool:
        """Records past the recovery point, or a leader-epoch checkpoint not fsynced yet."""
        return self.recovery_point < self.log_end_offset or self.epoch_cache.unsynced

    def synced_with_its_file_system(self) -> None:
        """Its closed files were made durable by one sync of their file system (`syncfs`):
        the recovery point is the log end, as after `close` with fsync."""
        self.recovery_point = self.log_end_offset
        self.epoch_cache.unsynced = False

    async def close_offline(self) -> None:
        """Close the files of a log whose dir failed, writing nothing (Kafka closes it quietly);
        nothing of it is flushed or removed after."""
        async with self.io_lock:
            self.deleted = True
            self.close_files()

    def close_files(self) -> None:
        """Close every open segment's files, whatever state a failed `load` left them in."""
        for segment in self.segments:
            with contextlib.suppress(OSError):
                segment.close()
        self.segments = []
        self._base_offsets = []

    async def delete(self, run_blocking: Callable) -> None:
        """Remove the partition's files (DeleteTopics): descriptors closed here, files removed in a worker."""
        await self.jobs.drain()
        async with self.io_lock:
            self.deleted = True
            for segment in self.segments:
                segment.close()
            self.segments = []
            await run_blocking(_remove_directory, self.directory)


async def _fsync_pinned(run_blocking: Callable, segments: list[LogSegment], files: Sequence[str]) -> None:
    """fsync in a worker thread, the segments pinned open meanwhile (the descriptor budget
    closes segments on the event loop). A cancel (a producer's connection closed while its
    acknowledgement waits on this flush, as at a broker's stop) is raised once the thread is
    done: the thread cannot be stopped, and the pins and the caller's io_lock must outlast its
    use of the descriptors, or a close after the cancel closes them under it (issue 26)."""
    for segment in segments:
        segment.pin()
    try:
        await _to_the_end(run_blocking(_fsync_all, segments, files))
    finally:
        for segment in segments:
            segment.unpin()


async def _to_the_end(job: Awaitable[T]) -> T:
    """Await `job` to its end; a cancel of the caller meanwhile is raised after it."""
    task = asyncio.ensure_future(job)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():  # the job itself was cancelled
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


def _fsync_all(segments: list[LogSegment], files: Sequence[str] = ()) -> None:
    """fsync the segments, then the extra files (so a checkpoint never gets ahead of its data)."""
    for segment in segments:
        segment.fsync()
    for path in files:
        fsync_file(path)



def _remove_directory(directory: str) -> None:
    for leftover in glob.glob(os.path.join(directory, "*")):
        os.unlink(leftover)
    os.rmdir(directory)

