"""`logbus dump-log FILE...`: print segment files as Kafka's kafka-dump-log.sh (DumpLogSegments) does.

Reads files only, never a broker, and never writes: the index classes of `storage/index.py`
open their files for writing (and cut torn entries), so this module reads the bytes itself and
decodes them with the same entry parsers (`offset_entries`, `time_entries`,
`aborted_txn_entries`) and the batch code of `protocol/records.py`.

Output lines match Kafka's. A `.log` file is read one batch at a time: a batch larger than
`--max-message-size` on disk ends the read (reported), and a compressed batch is decompressed
into at most that many bytes, so memory stays bounded whatever the file holds. Where Kafka's
tool stops with an exception, this one says what is wrong on stderr and goes on; the exit code
is 1 when a file is damaged, an index disagrees with its log, or a file cannot be read (Kafka's
tool exits 0 after printing mismatches).
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..protocol.records import (
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    CorruptRecordError,
    Record,
    batch_is_intact,
    control_record_type,
    decompress_bounded,
    end_txn_marker_of,
    read_header,
    records_of_body,
)
from ..storage.index import aborted_txn_entries, offset_entries, time_entries
from .common import EXIT_FAILURE, positive_int

CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
DELETE_HORIZON_BIT = 0x40
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # Kafka's --max-message-size default
MAX_SIDE_FILE_BYTES = 64 << 20  # an index or snapshot larger than this is not read (Kafka's index max is 10 MiB)
RECORD_INDENT = "|"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dump-log", help="print log segments, indexes and snapshots (kafka-dump-log.sh)",
        description="Print the batches of .log segments, or the entries of .index, .timeindex, .txnindex "
                    "and .snapshot files, in kafka-dump-log.sh's format. Reads files only.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="segment files (.log, .index, .timeindex, ...)")
    parser.add_argument("--print-data", action="store_true", help="print each record with its key and payload")
    parser.add_argument("--deep-iteration", action="store_true", help="print each record's metadata")
    parser.add_argument(
        "--verify-index", "--verify-index-only", dest="verify_index", action="store_true",
        help="check .index and .timeindex entries against the log (for a .log: its sibling indexes too); "
             "mismatches go to stderr",
    )
    parser.add_argument(
        "--max-message-size", type=positive_int, default=DEFAULT_MAX_MESSAGE_SIZE, metavar="BYTES",
        help=f"the most one batch may take, on disk and decompressed (default {DEFAULT_MAX_MESSAGE_SIZE})",
    )
    parser.set_defaults(run=run)


@dataclass
class Problems:
    """What is wrong, printed to stderr at the end as Kafka prints its mismatches; `failed`
    unless everything found is something Kafka only notes (offset gaps, as compaction leaves)."""

    lines: list[str] = field(default_factory=list)
    failed: bool = False

    def report(self, title: str, details: list[str], fatal: bool = True, indent: str = "  ") -> None:
        if details:
            self.lines.append(title)
            self.lines.extend(f"{indent}{detail}" for detail in details)
            self.failed = self.failed or fatal


def run(args: argparse.Namespace) -> int:
    problems = Problems()
    for path in args.files:
        print(f"Dumping {path}")
        try:
            _dump_file(path, args, problems)
        except OSError as exc:
            problems.report(f"Cannot read {path}", [exc.strerror or str(exc)])
    for line in problems.lines:
        print(line, file=sys.stderr)
    return EXIT_FAILURE if problems.failed else 0


def _dump_file(path: str, args: argparse.Namespace, problems: Problems) -> None:
    dumpers: dict[str, Callable[[str, argparse.Namespace, Problems], None]] = {
        ".log": _dump_log, ".index": _dump_offset_index, ".timeindex": _dump_time_index,
        ".txnindex": _dump_txn_index, ".snapshot": _dump_producer_snapshot,
    }
    dumper = dumpers.get(os.path.splitext(path)[1])
    if dumper is None:
        print(f"Ignoring unknown file {path}", file=sys.stderr)
        return
    dumper(path, args, problems)


def base_offset_of(path: str) -> int:
    """The base offset a segment file's name carries (`00000000000000000042.log` -> 42)."""
    stem = os.path.basename(path).split(".")[0]
    if not stem.isdigit():
        raise OSError(0, f"its name is not a base offset ({os.path.basename(path)})")
    return int(stem)


def _sibling(path: str, suffix: str) -> str:
    return os.path.splitext(path)[0] + suffix


def _read_side_file(path: str) -> bytes:
    """An index or snapshot file, whole; refused beyond MAX_SIDE_FILE_BYTES."""
    size = os.path.getsize(path)
    if size > MAX_SIDE_FILE_BYTES:
        raise OSError(0, f"{size} bytes, more than the {MAX_SIDE_FILE_BYTES} an index or snapshot may hold")
    with open(path, "rb") as handle:
        return handle.read(MAX_SIDE_FILE_BYTES)


# ---------------------------------------------------------------- reading a segment


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch of a segment file: its header (`position` is the file position) and its bytes."""

    header: BatchHeader
    data: bytes

    @property
    def is_valid(self) -> bool:
        return batch_is_intact(self.data, dataclasses.replace(self.header, position=0))

    def records(self, max_decompressed: int) -> list[Record]:
        """Its records, with decompression bounded (CorruptRecordError when they do not decode)."""
        body = decompress_bounded(self.header.compression, self.data[HEADER_SIZE:], max_decompressed)
        try:
            return list(records_of_body(bytes(body), self.header))
        except (IndexError, ValueError) as exc:
            raise CorruptRecordError(f"records do not decode: {exc or 'they end early'}") from None


@dataclass(frozen=True, slots=True)
class SegmentEnd:
    """Where reading a segment stopped: after `valid_bytes`, and why if before the file's end."""

    valid_bytes: int
    reason: str | None


class SegmentFile:
    """A `.log` file opened read-only, read one batch at a time.

    A header that cannot be a batch (magic, a length below the header's or past the file's end)
    ends the readable segment, as it ends the broker's reads and recovery; so does a batch larger
    than `max_batch_bytes`, which bounds what one read allocates.
    """

    def __init__(self, path: str, max_batch_bytes: int) -> None:
        self.path = path
        self.max_batch_bytes = max_batch_bytes
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by __exit__
        self.size = os.fstat(self._file.fileno()).st_size

    def __enter__(self) -> SegmentFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._file.close()

    def batches(self, start: int = 0) -> Iterator[Batch | SegmentEnd]:
        """The batches from file position `start`, then a `SegmentEnd`."""
        fd, size, position = self._file.fileno(), self.size, start
        while position < size:
            if position + HEADER_SIZE > size:
                yield SegmentEnd(position, f"a partial batch header of {size - position} bytes at position {position}")
                return
            header = dataclasses.replace(read_header(os.pread(fd, HEADER_SIZE, position)), position=position)
            if header.magic != 2:
                yield SegmentEnd(position, f"magic {header.magic} at position {position} (only magic 2 is read)")
                return
            if header.batch_length < MIN_BATCH_LENGTH or position + header.size > size:
                yield SegmentEnd(position, f"batch length {header.batch_length} at position {position} out of bounds")
                return
            if header.size > self.max_batch_bytes:
                yield SegmentEnd(position, f"a batch of {header.size} bytes at position {position}, more than "
                                           f"--max-message-size {self.max_batch_bytes}")
                return
            yield Batch(header, os.pread(fd, header.size, position))
            position += header.size
        yield SegmentEnd(position, None)

    def batch_at(self, position: int) -> Batch | None:
        """The batch starting at file `position`, if one does."""
        item = next(self.batches(position))
        return item if isinstance(item, Batch) else None

    def batch_holding(self, offset_index: list[tuple[int, int]], offset: int) -> Batch | None:
        """The first batch whose last offset is >= `offset`, scanning from the index entry before it."""
        i = bisect.bisect_right(offset_index, (offset, self.size)) - 1
        start = offset_index[i][1] if i >= 0 and offset_index[i][1] < self.size else 0
        for item in self.batches(start):
            if isinstance(item, SegmentEnd):
                return None
            if item.header.last_offset >= offset:
                return item
        return None


# ---------------------------------------------------------------- .log


def _dump_log(path: str, args: argparse.Namespace, problems: Problems) -> None:
    base_offset = base_offset_of(path)
    print(f"Log starting offset: {base_offset}")
    deep = args.deep_iteration or args.print_data
    damaged: list[str] = []
    gaps: list[str] = []
    previous_offset = -1
    with SegmentFile(path, args.max_message_size) as segment_file:
        for item in segment_file.batches():
            if isinstance(item, SegmentEnd):
                if item.reason is not None:
                    invalid = segment_file.size - item.valid_bytes
                    print(f"Found {invalid} invalid bytes at the end of {os.path.basename(path)}")
                    damaged.append(item.reason)
                break
            valid = item.is_valid
            print(format_batch(item.header, valid))
            if not valid:
                damaged.append(f"CRC mismatch in the batch at position {item.header.position}")
            if deep:
                previous_offset = _dump_records(item, args, damaged, gaps, previous_offset)
    problems.report(f"Damaged segment {path}", damaged)
    problems.report(f"Non-consecutive offsets in {path}", gaps, fatal=False)
    if args.verify_index:
        for suffix, verify in ((".index", _verify_offset_index), (".timeindex", _verify_time_index)):
            if os.path.exists(_sibling(path, suffix)):
                verify(_sibling(path, suffix), problems, args.max_message_size)


def format_batch(header: BatchHeader, is_valid: bool) -> str:
    """Kafka's batch line (DumpLogSegments.printBatchLevel) for a magic 2 batch."""
    delete_horizon = "OptionalLong.empty"
    if header.attributes & DELETE_HORIZON_BIT:
        delete_horizon = f"OptionalLong[{header.base_timestamp}]"
    codec = header.compression
    codec_name = CODEC_NAMES[codec] if codec < len(CODEC_NAMES) else f"unknown({codec})"
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.record_count} "
        f"baseSequence: {header.base_sequence} lastSequence: {header.last_sequence} "
        f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} deleteHorizonMs: {delete_horizon} position: {header.position} "
        f"{_timestamp_type(header)}: {header.max_timestamp} size: {header.size} magic: {header.magic} "
        f"compresscodec: {codec_name} crc: {header.crc} isvalid: {_bool(is_valid)}"
    )


def _dump_records(batch: Batch, args: argparse.Namespace, damaged: list[str], gaps: list[str],
                  previous_offset: int) -> int:
    """Print the batch's records; returns the last offset seen (for the gap check)."""
    try:
        records = batch.records(args.max_message_size)
    except CorruptRecordError as exc:
        damaged.append(f"batch at position {batch.header.position}: {exc}")
        return previous_offset
    for record in records:
        if previous_offset != -1 and record.offset != previous_offset + 1:
            gaps.append(f"{previous_offset} is followed by {record.offset}")
        previous_offset = record.offset
        print(format_record(batch.header, record, args.print_data))
    return previous_offset


def format_record(header: BatchHeader, record: Record, print_data: bool) -> str:
    """Kafka's record line: metadata, then a control record's marker or (with print_data) key and payload."""
    line = (
        f"{RECORD_INDENT} offset: {record.offset} {_timestamp_type(header)}: {record.timestamp} "
        f"keySize: {_size(record.key)} valueSize: {_size(record.value)} sequence: {_sequence(header, record)} "
        f"headerKeys: [{','.join(name for name, _ in record.headers)}]"
    )
    if header.is_control:
        return line + _control_text(record)
    if print_data:
        if record.key is not None:
            line += f" key: {_text(record.key)}"
        if record.value is not None:
            line += f" payload: {_text(record.value)}"
    return line


def _control_text(record: Record) -> str:
    marker = end_txn_marker_of(record)
    if marker is not None:
        return f" endTxnMarker: {'COMMIT' if marker.commit else 'ABORT'} coordinatorEpoch: {marker.coordinator_epoch}"
    type_id = control_record_type(record)
    return f" controlType: {CONTROL_TYPES.get(type_id, 'UNKNOWN') if type_id is not None else 'UNKNOWN'}({type_id})"


def _sequence(header: BatchHeader, record: Record) -> int:
    """Kafka's DefaultRecord.sequence: the base sequence plus the offset delta, wrapping at 2^31."""
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (header.base_sequence + record.offset - header.base_offset) % (1 << 31)


def _timestamp_type(header: BatchHeader) -> str:
    return "LogAppendTime" if header.attributes & TIMESTAMP_TYPE_BIT else "CreateTime"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _text(data: bytes) -> str:
    """Bytes as Kafka's StringDecoder shows them (UTF-8, undecodable bytes replaced)."""
    return data.decode("utf-8", "replace")


def _bool(value: bool) -> str:
    return "true" if value else "false"


# ---------------------------------------------------------------- .index and .timeindex


def _dump_offset_index(path: str, args: argparse.Namespace, problems: Problems) -> None:
    if args.verify_index:
        _verify_offset_index(path, problems, args.max_message_size)
        return
    entries = _offset_index_entries(path, problems)
    if not entries:
        print(f"{path} is empty.")
    for offset, position in entries:
        print(f"offset: {offset} position: {position}")


def _dump_time_index(path: str, args: argparse.Namespace, problems: Problems) -> None:
    if args.verify_index:
        _verify_time_index(path, problems, args.max_message_size)
        return
    for timestamp, offset in _time_index_entries(path, problems):
        print(f"timestamp: {timestamp} offset: {offset}")


def _offset_index_entries(path: str, problems: Problems) -> list[tuple[int, int]]:
    base_offset = base_offset_of(path)
    raw = _read_side_file(path)
    _report_torn(path, len(raw), 8, problems)
    entries = list(offset_entries(raw, base_offset))
    return entries[: _used_count([offset for offset, _ in entries], base_offset)]


def _time_index_entries(path: str, problems: Problems) -> list[tuple[int, int]]:
    base_offset = base_offset_of(path)
    raw = _read_side_file(path)
    _report_torn(path, len(raw), 12, problems)
    entries = list(time_entries(raw, base_offset))
    return entries[: _used_count([offset for _, offset in entries], base_offset)]


def _used_count(offsets: list[int], base_offset: int) -> int:
    """How many entries come before the first zero one after the first (a preallocated index's
    unused tail, where Kafka's tool stops too)."""
    return next((i for i, offset in enumerate(offsets) if i > 0 and offset == base_offset), len(offsets))


def _report_torn(path: str, size: int, entry_size: int, problems: Problems) -> None:
    if size % entry_size:
        problems.report(f"Damaged index {path}", [f"{size % entry_size} bytes of a partial last entry"])


def _verify_offset_index(path: str, problems: Problems, max_batch_bytes: int) -> None:
    """Each entry must name the last offset of the batch at its position (Kafka's dumpIndex check)."""
    entries = _offset_index_entries(path, problems)
    mismatches = []
    with SegmentFile(_sibling(path, ".log"), max_batch_bytes) as segment_file:
        for offset, position in entries:
            batch = segment_file.batch_at(position)
            found = batch.header.last_offset if batch is not None else -1
            if found != offset:
                mismatches.append(f"Index offset: {offset}, log offset: {found}")
    problems.report(f"Mismatches in :{os.path.abspath(path)}", mismatches)


def _verify_time_index(path: str, problems: Problems, max_batch_bytes: int) -> None:
    """Each entry's offset must be the last offset of a batch whose max timestamp is the entry's,
    and timestamps must increase (Kafka's dumpTimeIndex checks)."""
    entries = _time_index_entries(path, problems)
    index_path = _sibling(path, ".index")
    offsets = _offset_index_entries(index_path, problems) if os.path.exists(index_path) else []
    mismatched, out_of_order, not_found = [], [], []
    previous = -1
    with SegmentFile(_sibling(path, ".log"), max_batch_bytes) as segment_file:
        for timestamp, offset in entries:
            batch = segment_file.batch_holding(offsets, offset)
            if batch is None or batch.header.last_offset != offset:
                found = -1 if batch is None else batch.header.last_offset
                not_found.append(f"Indexed offset: {offset}, found log offset: {found}")
            else:
                if batch.header.max_timestamp != timestamp:
                    mismatched.append(f"Index timestamp: {timestamp}, log timestamp: {batch.header.max_timestamp}")
                if previous >= timestamp:
                    out_of_order.append(f"Index timestamp: {timestamp}, Previously indexed timestamp: {previous}")
            previous = timestamp
    absolute = os.path.abspath(path)
    problems.report(f"Found timestamp mismatch in :{absolute}", mismatched)
    problems.report(f"Found out of order timestamp in :{absolute}", out_of_order)
    problems.report("The following indexed offsets are not found in the log.", not_found, indent="")


# ---------------------------------------------------------------- .txnindex and .snapshot


def _dump_txn_index(path: str, args: argparse.Namespace, problems: Problems) -> None:
    raw = _read_side_file(path)
    _report_torn(path, len(raw), 34, problems)
    for version, txn in aborted_txn_entries(raw):
        print(f"version: {version} producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
              f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}")


def _dump_producer_snapshot(path: str, args: argparse.Namespace, problems: Problems) -> None:
    """A producer state snapshot (logbus writes JSON, see storage/producer_state.py) in Kafka's lines;
    as in Kafka's snapshot, a producer's batch shown is its last one."""
    try:
        state = json.loads(_read_side_file(path))
        lines = [_producer_line(int(pid), entry) for pid, entry in state.items()]
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        problems.report(f"Damaged snapshot {path}", [f"not a producer state snapshot: {exc}"])
        return
    for line in lines:
        print(line)


def _producer_line(producer_id: int, entry: dict) -> str:
    txn_first = entry.get("txn_first_offset")
    line = (
        f"producerId: {producer_id} producerEpoch: {int(entry['epoch'])} "
        f"coordinatorEpoch: {int(entry.get('coordinator_epoch', -1))} "
        f"currentTxnFirstOffset: {'OptionalLong.empty' if txn_first is None else f'OptionalLong[{int(txn_first)}]'} "
        f"lastTimestamp: {int(entry['last_timestamp'])} "
    )
    if entry["batches"]:
        first_seq, last_seq, first_offset, last_offset, timestamp = (int(v) for v in entry["batches"][-1])
        line += (f"firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: {last_offset} "
                 f"offsetDelta: {last_offset - first_offset} timestamp: {timestamp}")
    return line
