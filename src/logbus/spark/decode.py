"""Record sets (v2 batches, as Fetch returns them) to Arrow record batches, column-wise.

Python touches each batch header and, per record, only the record's length varint (to find
where the next record starts: the one step that is inherently sequential). Everything else is
numpy over all records at once: the attribute byte, timestamp and offset deltas, key and value
lengths; keys and values become Arrow binary arrays by one `take` over the body buffer (a
binary array whose offsets alternate value-start / value-end, every second element a value).
Record headers, rare in bulk data, are decoded per record, and only for records that have any.

The output schema is Spark's Kafka source schema as Arrow sees it (`to_arrow_schema`): binary
key/value, string topic, int32 partition, int64 offset, timestamp[us, UTC], int32 type, and
optionally headers list<struct<key: string, value: binary>>.

Under read_committed the broker stops at the last stable offset and lists the aborted
transactions in what it returns; their batches are skipped as Kafka's consumer skips them
(`_Aborted`). Control batches (transaction markers) never become rows.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..protocol.records import (
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    decompress,
    iter_headers,
    read_end_txn_marker,
)

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_FIELDS = [
    pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32()),
]
SCHEMA = pa.schema(_FIELDS)
SCHEMA_WITH_HEADERS = pa.schema([*_FIELDS, pa.field("headers", HEADER_TYPE)])
_PAD = 10  # a varint is at most 10 bytes: padding lets every gather read 10 bytes ahead


@dataclass(slots=True)
class _Bodies:
    """The record bodies of a record set, concatenated, with per-record batch facts."""

    data: bytearray
    starts: list[int]  # position of each record, just after its length varint
    base_offsets: list[int]  # per batch
    base_timestamps: list[int]
    log_append_times: list[int]  # per batch: its max timestamp when LogAppendTime, else -1
    counts: list[int]


class _Aborted:
    """Kafka's read_committed rule (Fetcher's abortedProducerIds): a batch of producer P is
    skipped from the first offset of one of P's aborted transactions until P's ABORT marker."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self.pending = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(self.pending)
        self.producers: set[int] = set()

    def skips(self, records: bytes, header: BatchHeader) -> bool:
        """Whether this data batch belongs to an aborted transaction; markers update the state."""
        while self.pending and self.pending[0][0] <= header.last_offset:
            self.producers.add(heapq.heappop(self.pending)[1])
        if not header.is_control:
            return header.is_transactional and header.producer_id in self.producers
        if header.producer_id in self.producers:
            marker = read_end_txn_marker(records, header)
            if marker is not None and not marker.commit:
                self.producers.discard(header.producer_id)
        return True


def decode(records: bytes, topic: str, partition: int, start: int, end: int, include_headers: bool,
           aborted: Iterable[tuple[int, int]] = ()) -> tuple[pa.RecordBatch | None, int]:
    """Decode the records with offsets in [start, end) out of a fetched record set.

    Returns (the Arrow batch or None when none qualify, the offset after the last whole batch,
    i.e. where the next fetch should begin). Control batches are skipped, and so are the batches
    of `aborted` transactions ((producer id, first offset) pairs, as read_committed Fetch names
    them).
    """
    bodies, next_offset = _collect(records, start, end, _Aborted(aborted))
    if not bodies.starts:
        return None, next_offset
    data = np.frombuffer(bodies.data, dtype=np.uint8)
    counts = np.asarray(bodies.counts, dtype=np.int64)
    position = np.asarray(bodies.starts, dtype=np.int64) + 1  # skip the attributes byte
    timestamp_delta, position = _varints(data, position)
    offset_delta, position = _varints(data, position)
    key_length, position = _varints(data, position)
    key_start = position
    position = position + np.maximum(key_length, 0)
    value_length, position = _varints(data, position)
    value_start = position
    position = position + np.maximum(value_length, 0)
    header_count, position = _varints(data, position)

    offsets = np.repeat(np.asarray(bodies.base_offsets, dtype=np.int64), counts) + offset_delta
    append_times = np.repeat(np.asarray(bodies.log_append_times, dtype=np.int64), counts)
    timestamps = np.where(
        append_times >= 0, append_times,
        np.repeat(np.asarray(bodies.base_timestamps, dtype=np.int64), counts) + timestamp_delta,
    )
    wanted = (offsets >= start) & (offsets < end)
    if not wanted.all():
        keep = np.flatnonzero(wanted)
        offsets, timestamps, append_times = offsets[keep], timestamps[keep], append_times[keep]
        key_start, key_length = key_start[keep], key_length[keep]
        value_start, value_length = value_start[keep], value_length[keep]
        header_count, position = header_count[keep], position[keep]
    count = len(offsets)
    if count == 0:
        return None, next_offset
    columns = [
        _binary(bodies.data, key_start, key_length),
        _binary(bodies.data, value_start, value_length),
        _repeated_string(topic, count),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array(offsets),
        pa.array(timestamps * 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array((append_times >= 0).astype(np.int32)),
    ]
    if include_headers:
        columns.append(_headers(bodies.data, header_count, position))
        return pa.RecordBatch.from_arrays(columns, schema=SCHEMA_WITH_HEADERS), next_offset
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA), next_offset


def _collect(records: bytes, start: int, end: int, aborted: _Aborted) -> tuple[_Bodies, int]:
    """Concatenate the bodies of data batches holding offsets in [start, end); find record starts.

    Batches at or after `end` are not looked into: a fetch sized in bytes usually returns more
    than a short range needs, and finding record starts is the per-record Python loop."""
    bodies = _Bodies(bytearray(), [], [], [], [], [])
    next_offset = start
    view = memoryview(records)
    for header in iter_headers(records):
        if header.base_offset >= end:  # offsets below it and not seen so far are gone (compaction)
            next_offset = max(next_offset, end)
            break
        next_offset = max(next_offset, header.next_offset)
        if aborted.skips(records, header) or header.next_offset <= start or header.record_count == 0:
            continue
        body_start = header.position + HEADER_SIZE
        raw = view[body_start : header.position + header.size]
        body = decompress(header.compression, bytes(raw)) if header.compression else raw
        base = len(bodies.data)
        bodies.data += body
        _record_starts(bodies.data, base, header.record_count, bodies.starts)
        bodies.base_offsets.append(header.base_offset)
        bodies.base_timestamps.append(header.base_timestamp)
        bodies.log_append_times.append(
            header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT else -1
        )
        bodies.counts.append(header.record_count)
    bodies.data += bytes(_PAD)
    return bodies, next_offset


def _record_starts(data: bytearray, position: int, count: int, starts: list[int]) -> None:
    """Append where each of `count` records begins (after its zigzag length varint)."""
    append = starts.append
    for _ in range(count):
        byte = data[position]
        if byte < 0x80:
            length = byte >> 1
            position += 1
        else:
            second = data[position + 1]
            if second < 0x80:
                length = ((byte & 0x7F) | (second << 7)) >> 1
                position += 2
            else:
                length, position = _slow_varint(data, position)
        append(position)
        position += length


def _slow_varint(data: bytearray, position: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7


def _varints(data: np.ndarray, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at every `position` at once: (values, positions after them)."""
    first = data[position].astype(np.uint64)
    result = first & 0x7F
    going = first >= 0x80
    size = np.ones(len(position), dtype=np.int64)
    shift = 7
    while going.any():
        byte = data[position + size].astype(np.uint64)
        result |= np.where(going, (byte & 0x7F) << np.uint64(shift), 0).astype(np.uint64)
        size += going
        going &= byte >= 0x80
        shift += 7
    values = (result >> np.uint64(1)).astype(np.int64) ^ -(result & 1).astype(np.int64)
    return values, position + size


def _binary(data: bytearray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of data[start:start+length] (length -1: null), copied by one take."""
    count = len(starts)
    sizes = np.maximum(lengths, 0)
    bounds = np.empty(2 * count, dtype=np.int64)
    bounds[0::2] = starts
    bounds[1::2] = starts + sizes
    if len(data) >= 1 << 31:
        spans = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), 2 * count - 1, [None, pa.py_buffer(bounds), pa.py_buffer(data)]
        )
    else:
        spans = pa.BinaryArray.from_buffers(
            pa.binary(), 2 * count - 1, [None, pa.py_buffer(bounds.astype(np.int32)), pa.py_buffer(data)]
        )
    picked = pc.take(spans, pa.array(np.arange(0, 2 * count, 2, dtype=np.int64))).cast(pa.binary())
    nulls = lengths < 0
    if not nulls.any():
        return picked
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), count, [validity, *picked.buffers()[1:]], offset=0)


def _repeated_string(text: str, count: int) -> pa.Array:
    encoded = text.encode()
    offsets = np.arange(count + 1, dtype=np.int32) * len(encoded)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * count)])


def _headers(data: bytearray, header_count: np.ndarray, positions: np.ndarray) -> pa.Array:
    """The headers column; records without headers cost nothing beyond an empty list."""
    if not header_count.any():
        return pa.ListArray.from_arrays(
            pa.array(np.zeros(len(header_count) + 1, dtype=np.int32)), pa.array([], HEADER_TYPE.value_type)
        )
    rows = []
    for count, position in zip(header_count.tolist(), positions.tolist(), strict=True):
        pairs = []
        for _ in range(count):
            name_length, position = _slow_varint(data, position)
            name = bytes(data[position : position + name_length]).decode("utf-8", "replace")
            position += name_length
            value_length, position = _slow_varint(data, position)
            value = None if value_length < 0 else bytes(data[position : position + value_length])
            position += max(value_length, 0)
            pairs.append({"key": name, "value": value})
        rows.append(pairs)
    return pa.array(rows, type=HEADER_TYPE)
