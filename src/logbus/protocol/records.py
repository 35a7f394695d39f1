"""Record batches, magic v2, as they travel and as they are stored.

On the produce path the broker reads the 61-byte header with `struct`, verifies the CRC32C
and the header's own rules (`validate_batches`, `check_client_batch`), then walks the records
once without building objects (`check_records`: framing, offset deltas, keys, timestamps; a
compressed batch is decompressed into a bounded buffer first), and patches the base offset and
partition leader epoch in place (neither is covered by the CRC). Per-record decoding
(`iter_records`) is for the few paths that need it: timestamp lookups and compaction.

Layout of the header (big-endian):
    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
    attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import cramjam
import crc32c
from kio.schema.errors import ErrorCode

from ..errors import CorruptRecordError, KafkaApiError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted in batchLength
CRC_START = 21  # the CRC covers attributes to the end of the batch
MAGIC_OFFSET = 16
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_ATTRS_TO_MAXTS = struct.Struct(">hiqq")
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed header of one v2 record batch, at `position` within some buffer."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def read_header(buf: bytes | bytearray | memoryview, position: int = 0, located_at: int | None = None) -> BatchHeader:
    """Parse the batch header at `position`; the caller ensures 61 bytes are there. `located_at`:
    the position the header records, when not `position` (a header read alone from a file)."""
    return BatchHeader(position if located_at is None else located_at, *_HEADER.unpack_from(buf, position))


def iter_headers(buf: bytes | bytearray | memoryview) -> Iterator[BatchHeader]:
    """Yield the headers of the whole batches in `buf`, stopping before a partial one."""
    position = 0
    end = len(buf)
    while position + HEADER_SIZE <= end:
        header = read_header(buf, position)
        if header.batch_length < MIN_BATCH_LENGTH or position + header.size > end or header.magic != 2:
            return
        yield header
        position += header.size


def whole_batches_length(buf: bytes | bytearray | memoryview) -> int:
    """How many leading bytes of `buf` are whole batches (per batch: one 12-byte read and the
    magic byte); a batch whose header is impossible ends them, so it is never served."""
    position = 0
    end = len(buf)
    while position + LOG_OVERHEAD <= end:
        _, length = _OFFSET_AND_LENGTH.unpack_from(buf, position)
        if length < MIN_BATCH_LENGTH or position + LOG_OVERHEAD + length > end or buf[position + MAGIC_OFFSET] != 2:
            break
        position += LOG_OVERHEAD + length
    return position


def validate_batches(buf: bytes | bytearray | memoryview, cleaned: bool = False) -> list[BatchHeader]:
    """Check every batch of a blob: framing and CRC32C (CorruptRecordError), magic 2 and an offset
    range that matches the record count (KafkaApiError INVALID_RECORD). Returns the headers.

    The count rule protects storage: the log trusts `last_offset_delta` for every offset it
    assigns and indexes, so a batch claiming 2^31 offsets for one record would overflow them.
    `cleaned`: batches from a leader's log, which compaction may have thinned (records removed,
    offsets kept, even none left: a producer's last batch stays for its state) hold at most as
    many records as their offset range.
    """
    headers: list[BatchHeader] = []
    position = 0
    end = len(buf)
    view = memoryview(buf)
    if end == 0:
        raise CorruptRecordError("empty record set")
    while position < end:
        if position + HEADER_SIZE > end:
            raise CorruptRecordError(f"truncated batch header at byte {position}")
        header = read_header(buf, position)
        if header.magic != 2:
            raise KafkaApiError(
                ErrorCode.invalid_record, f"record batch magic {header.magic}: only magic 2 is accepted"
            )
        if header.batch_length < MIN_BATCH_LENGTH or position + header.size > end:
            raise CorruptRecordError(f"batch length {header.batch_length} out of bounds")
        actual = crc32c.crc32c(view[position + CRC_START : position + header.size])
        if actual != header.crc:
            raise CorruptRecordError(
                f"CRC mismatch at batch {len(headers)}: stored {header.crc:#x}, computed {actual:#x}"
            )
        if not _count_fits(header, cleaned):
            raise KafkaApiError(
                ErrorCode.invalid_record,
                f"record count {header.record_count} does not match the offset range "
                f"[0, {header.last_offset_delta}] of batch {len(headers)}",
            )
        headers.append(header)
        position += header.size
    return headers


def _count_fits(header: BatchHeader, cleaned: bool) -> bool:
    if cleaned:
        return header.last_offset_delta >= 0 and 0 <= header.record_count <= header.last_offset_delta + 1
    return header.record_count >= 1 and header.record_count == header.last_offset_delta + 1


def check_client_batch(header: BatchHeader) -> None:
    """What Kafka's LogValidator.validateBatch asks of a batch a client produced (INVALID_RECORD):
    no control batch, and a sequence whenever there is a producer id. A sequence without a
    producer id is accepted and ignored, as Kafka does: aiokafka sends base sequence 0 there."""
    if header.is_control:
        raise KafkaApiError(ErrorCode.invalid_record, "clients are not allowed to write control records")
    if header.producer_id < NO_PRODUCER_ID:
        raise KafkaApiError(ErrorCode.invalid_record, f"invalid producer id {header.producer_id}")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise KafkaApiError(
            ErrorCode.invalid_record,
            f"invalid sequence number {header.base_sequence} in a batch of producer {header.producer_id}",
        )


def batch_is_intact(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    """True when the batch at header.position has magic 2 and a matching CRC."""
    if header.magic != 2:
        return False
    start = header.position + CRC_START
    return crc32c.crc32c(memoryview(buf)[start : header.position + header.size]) == header.crc


def assign_offsets(
    buf: bytearray, headers: list[BatchHeader], first_offset: int, leader_epoch: int
) -> int:
    """Patch base offsets (consecutive from `first_offset`) and leader epochs in place.

    Returns the next offset after the last batch.
    """
    offset = first_offset
    for header in headers:
        _BASE_OFFSET.pack_into(buf, header.position, offset)
        _LEADER_EPOCH.pack_into(buf, header.position + 12, leader_epoch)
        offset += header.last_offset_delta + 1
    return offset


def set_log_append_time(buf: bytearray, headers: list[BatchHeader], now_ms: int) -> None:
    """Mark batches LogAppendTime with `now_ms` as max timestamp; the CRC is recomputed."""
    for header in headers:
        attributes = header.attributes | TIMESTAMP_TYPE_BIT
        _ATTRS_TO_MAXTS.pack_into(
            buf, header.position + CRC_START, attributes, header.last_offset_delta,
            header.base_timestamp, now_ms,
        )
        start = header.position + CRC_START
        crc = crc32c.crc32c(memoryview(buf)[start : header.position + header.size])
        _CRC.pack_into(buf, header.position + 17, crc)


# ---------------------------------------------------------------- per-record decoding

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def decompress(codec: int, data: bytes) -> bytes:
    """Undo a batch's compression with cramjam (xerial-framed snappy as the Java client writes)."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == COMPRESSION_SNAPPY:
        return _snappy_decompress(data)
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    position = 16  # magic (8) + version (4) + compatible version (4)
    while position < len(data):
        (length,) = struct.unpack_from(">i", data, position)
        position += 4
        out += cramjam.snappy.decompress_raw(data[position : position + length])
        position += length
    return bytes(out)


class DecompressionLimitError(CorruptRecordError):
    """A compressed body that decodes to more bytes than it may (a decompression bomb)."""


_DECOMPRESS_INTO = {
    COMPRESSION_GZIP: cramjam.gzip.decompress_into,
    COMPRESSION_LZ4: cramjam.lz4.decompress_into,
    COMPRESSION_ZSTD: cramjam.zstd.decompress_into,
}
_DECOMPRESS = {COMPRESSION_GZIP: cramjam.gzip.decompress, COMPRESSION_LZ4: cramjam.lz4.decompress}
# The most a byte of input can expand to: deflate 1032:1, LZ4 255:1 (zstd has no useful bound).
_MAX_RATIO = {COMPRESSION_GZIP: 1032, COMPRESSION_LZ4: 255}
_FIRST_GUESS = 1 << 16  # bytes; then 4x the compressed size, growing 4x up to the limit
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def decompress_bounded(codec: int, data: bytes | memoryview, limit: int) -> bytes | bytearray:
    """A batch body decompressed, or CorruptRecordError when it does not decode or would exceed
    `limit` bytes.

    Input too small to reach the limit at its codec's largest ratio is decompressed directly.
    Otherwise cramjam writes into a buffer of bounded size and stops when it is full, so a bomb
    costs at most `limit` bytes and as much work: the buffer is sized from the zstd frame's content
    size when it has one, else 4x the input, and grows 4x at a time (a retry redoes the work).
    """
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_SNAPPY:
        return _snappy_decompress_bounded(bytes(data), limit)
    decompress_into = _DECOMPRESS_INTO.get(codec)
    if decompress_into is None:
        raise CorruptRecordError(f"unknown compression codec {codec}")
    try:
        if len(data) * _MAX_RATIO.get(codec, limit + 1) <= limit:
            return bytes(_DECOMPRESS[codec](data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"compressed records do not decode: {exc}") from None
    announced = _zstd_content_size(data) if codec == COMPRESSION_ZSTD else None
    size = min(limit, announced if announced is not None else max(4 * len(data), _FIRST_GUESS))
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise CorruptRecordError(f"compressed records do not decode: {exc}") from None
            if size >= limit:
                raise DecompressionLimitError(f"compressed records decode to more than {limit} bytes") from None
            size = min(limit, max(size, len(data)) * 4)
            continue
        del out[written:]
        return out


def _zstd_content_size(data: bytes | memoryview) -> int | None:
    """The decompressed size a zstd frame header announces (RFC 8878 3.1.1.1), if it does."""
    if len(data) < 6 or bytes(data[:4]) != _ZSTD_MAGIC:
        return None
    descriptor = data[4]
    single_segment = descriptor & 0x20
    size_flag = descriptor >> 6
    field_size = (1 if single_segment else 0, 2, 4, 8)[size_flag]
    if not field_size:
        return None
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
    if start + field_size > len(data):
        return None
    size = int.from_bytes(bytes(data[start : start + field_size]), "little")
    return size + 256 if field_size == 2 else size


def _snappy_decompress_bounded(data: bytes, limit: int) -> bytes:
    try:
        if not data.startswith(_XERIAL_MAGIC):
            _check_snappy_length(cramjam.snappy.decompress_raw_len(data), limit)
            return bytes(cramjam.snappy.decompress_raw(data))
        out = bytearray()
        position = 16  # magic (8) + version (4) + compatible version (4)
        while position < len(data):
            if position + 4 > len(data):
                raise CorruptRecordError("truncated xerial snappy block length")
            (length,) = struct.unpack_from(">i", data, position)
            position += 4
            if length < 0 or position + length > len(data):
                raise CorruptRecordError(f"xerial snappy block of {length} bytes out of bounds")
            block = data[position : position + length]
            _check_snappy_length(len(out) + cramjam.snappy.decompress_raw_len(block), limit)
            out += cramjam.snappy.decompress_raw(block)
            position += length
        return bytes(out)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"compressed records do not decode: {exc}") from None


def _check_snappy_length(length: int, limit: int) -> None:
    if length > limit:
        raise DecompressionLimitError(f"compressed records decode to more than {limit} bytes")


@dataclass(frozen=True, slots=True)
class RecordRules:
    """What a topic asks of every record of a produced batch (Kafka's LogValidator settings).

    `min_timestamp`/`max_timestamp` bound CreateTime record timestamps (now minus
    message.timestamp.before.max.ms, now plus message.timestamp.after.max.ms); a LogAppendTime
    topic checks none (the broker's clock replaces them).
    """

    check_timestamps: bool
    min_timestamp: int
    max_timestamp: int
    require_keys: bool


class RecordError(NamedTuple):
    """One rejected record: its index in the batch, why, and the code (Kafka's RecordError)."""

    batch_index: int
    message: str
    code: ErrorCode


NO_TIMESTAMP = -1
_MAX_VARINT_BYTES = 10


def _invalid(message: str) -> KafkaApiError:
    return KafkaApiError(ErrorCode.invalid_record, message)


def check_records(body: bytes | bytearray | memoryview, header: BatchHeader, rules: RecordRules
                  ) -> tuple[int, list[RecordError]]:
    """Walk the `record_count` records of a (decompressed) batch body once, as Kafka's record
    reader and LogValidator.validateRecord do, without building objects.

    Framing that does not hold (a length or varint running past its record or the body, offset
    deltas that are not 0, 1, 2, ..., a negative header count or header key length, bytes left
    over) raises KafkaApiError INVALID_RECORD. Records that are well formed but break a topic
    rule (no key on a compacted topic, a timestamp out of range) are returned as RecordErrors.
    Also returns the largest record timestamp (-1 when none).
    """
    errors: list[RecordError] = []
    base_timestamp = header.base_timestamp
    max_timestamp = NO_TIMESTAMP
    end = len(body)
    position = 0
    varint = _varint
    try:
        for index in range(header.record_count):
            length, position = varint(body, position)
            record_end = position + length
            if length < 6 or record_end > end:  # attributes, 4 one-byte varints, a header count
                raise _invalid(f"record {index}: length {length} out of bounds")
            timestamp_delta, position = varint(body, position + 1)
            offset_delta, position = varint(body, position)
            if offset_delta != index:
                raise _invalid(f"record {index}: offset delta {offset_delta}, expected {index}")
            key_length, position = varint(body, position)
            if key_length > 0:
                position += key_length
            value_length, position = varint(body, position)
            if value_length > 0:
                position += value_length
            header_count, position = varint(body, position)
            if header_count < 0:
                raise _invalid(f"record {index}: invalid number of record headers {header_count}")
            for _ in range(header_count):
                name_length, position = varint(body, position)
                if name_length < 0:
                    raise _invalid(f"record {index}: negative header key size {name_length}")
                header_value_length, position = varint(body, position + name_length)
                if header_value_length > 0:
                    position += header_value_length
                if position > record_end:
                    break
            if position != record_end:
                raise _invalid(f"record {index}: its fields do not fill its {length} bytes")
            if rules.require_keys and key_length < 0:
                errors.append(RecordError(index, "Compacted topic cannot accept message without key.",
                                          ErrorCode.invalid_record))
            timestamp = base_timestamp + timestamp_delta
            if timestamp > max_timestamp:
                max_timestamp = timestamp
            if rules.check_timestamps and timestamp != NO_TIMESTAMP and not (
                rules.min_timestamp <= timestamp <= rules.max_timestamp
            ):
                errors.append(RecordError(
                    index, f"Timestamp {timestamp} of message with offset {index} is out of range. The timestamp "
                    f"should be within [{rules.min_timestamp}, {rules.max_timestamp}]", ErrorCode.invalid_timestamp,
                ))
    except IndexError:
        raise _invalid(f"records end before the {header.record_count} the batch holds") from None
    except CorruptRecordError as exc:
        raise _invalid(str(exc)) from None
    if position != end:
        raise _invalid(f"{end - position} bytes after the last of {header.record_count} records")
    return max_timestamp, errors


def check_record_lengths(body: bytes | bytearray | memoryview, count: int) -> None:
    """The cheap framing check: `count` length-prefixed records tile the body exactly (else
    INVALID_RECORD). One varint per record, decoded inline for the 1- and 2-byte lengths of
    records under 8 KiB (a function call per record would double the cost)."""
    position = 0
    try:
        for index in range(count):
            byte = body[position]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                position += 1
            elif body[position + 1] < 0x80:
                zigzag = (byte & 0x7F) | (body[position + 1] << 7)
                length = (zigzag >> 1) ^ -(zigzag & 1)
                position += 2
            else:
                length, position = _varint(body, position)
            if length < 6:
                raise _invalid(f"record {index}: length {length} out of bounds")
            position += length
    except IndexError:
        raise _invalid(f"records end before the {count} the batch holds") from None
    except CorruptRecordError as exc:
        raise _invalid(str(exc)) from None
    if position != len(body):
        raise _invalid(f"the {count} records take {position} bytes of a {len(body)}-byte body")


def _varint(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """A zigzag varint: (value, position after it). IndexError past the end of `buf`;
    CorruptRecordError when longer than 10 bytes (no 64-bit value needs more)."""
    byte = buf[position]
    if byte < 0x80:  # most varints in a batch (deltas, short keys) are one byte
        return (byte >> 1) ^ -(byte & 1), position + 1
    shift = 0
    result = 0
    limit = position + _MAX_VARINT_BYTES
    while True:
        byte = buf[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if position >= limit:
            raise CorruptRecordError("varint longer than 10 bytes")


def _varbytes(buf: bytes, position: int) -> tuple[bytes | None, int]:
    length, position = _varint(buf, position)
    if length < 0:
        return None, position
    return buf[position : position + length], position + length


def iter_records(buf: bytes | bytearray | memoryview, header: BatchHeader) -> Iterator[Record]:
    """Decode the records of one batch (decompressing when needed). Not for the hot path.

    In a LogAppendTime batch every record's timestamp is the batch's max timestamp (the
    broker's append time), as clients read it; the deltas keep what the producer sent.
    """
    start = header.position + HEADER_SIZE
    body = decompress(header.compression, bytes(buf[start : header.position + header.size]))
    yield from records_of_body(body, header)


def records_of_body(body: bytes | bytearray, header: BatchHeader) -> Iterator[Record]:
    """Decode the records of a batch from its decompressed `body` (see `iter_records`); for
    callers that bound decompression themselves (`decompress_bounded`)."""
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_BIT)
    position = 0
    for _ in range(header.record_count):
        _length, position = _varint(body, position)
        position += 1  # attributes
        timestamp_delta, position = _varint(body, position)
        offset_delta, position = _varint(body, position)
        key, position = _varbytes(body, position)
        value, position = _varbytes(body, position)
        header_count, position = _varint(body, position)
        headers = []
        for _ in range(header_count):
            name, position = _varbytes(body, position)
            header_value, position = _varbytes(body, position)
            headers.append(((name or b"").decode("utf-8", "replace"), header_value))
        yield Record(
            header.base_offset + offset_delta,
            header.max_timestamp if log_append_time else header.base_timestamp + timestamp_delta,
            key,
            value,
            tuple(headers),
        )


def _encode_varint(value: int) -> bytes:
    if 0 <= value < _SMALL_VARINTS_COUNT:
        return _SMALL_VARINTS[value]
    return _compute_varint(value)


def _compute_varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_SMALL_VARINTS_COUNT = 1 << 14  # lengths and offset deltas of most records: looked up, not computed
_SMALL_VARINTS = [_compute_varint(value) for value in range(_SMALL_VARINTS_COUNT)]
_NULL_VARBYTES = _compute_varint(-1)


def _encode_varbytes(data: bytes | None) -> bytes:
    if data is None:
        return _NULL_VARBYTES
    return _encode_varint(len(data)) + data


def _encode_headers(headers: Sequence[tuple[str, bytes | None]] | None) -> bytes:
    if not headers:
        return _SMALL_VARINTS[0]
    encoded = [_encode_varbytes(name.encode()) + _encode_varbytes(value) for name, value in headers]
    return _encode_varint(len(headers)) + b"".join(encoded)


def build_batch(
    records: list[tuple[bytes | None, bytes | None]],
    timestamp_ms: int,
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    attributes: int = 0,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
) -> bytes:
    """Encode (key, value) pairs as one uncompressed v2 batch, all at `timestamp_ms`; `headers`,
    when given, holds each record's (name, value) headers.

    For the broker's own writes (group metadata, offsets), tools, and the Spark sink's
    transactional producer.
    """
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        record = b"\x00\x00" + _encode_varint(delta) + _encode_varbytes(key) + _encode_varbytes(value)
        record += _encode_headers(headers[delta] if headers else None)
        body += _encode_varint(len(record)) + record
    count = len(records)
    batch = bytearray(HEADER_SIZE) + body
    _HEADER.pack_into(
        batch, 0, base_offset, len(batch) - LOG_OVERHEAD, -1, 2, 0, attributes,
        max(count - 1, 0), timestamp_ms, timestamp_ms, producer_id, producer_epoch,
        base_sequence, count,
    )
    _CRC.pack_into(batch, 17, crc32c.crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version, type: Kafka's ControlRecordType key
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinator epoch: Kafka's EndTransactionMarker


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """What a transaction's COMMIT or ABORT control record says."""

    commit: bool
    coordinator_epoch: int


def build_end_txn_marker(producer_id: int, producer_epoch: int, marker: EndTxnMarker, timestamp_ms: int) -> bytes:
    """A transaction marker batch as Kafka's MemoryRecords.withEndTransactionMarker builds it:
    transactional and control bits, no sequence, one record (key version 0 and type, value
    version 0 and coordinator epoch)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if marker.commit else CONTROL_ABORT)
    return build_batch(
        [(key, _END_TXN_VALUE.pack(0, marker.coordinator_epoch))], timestamp_ms,
        producer_id=producer_id, producer_epoch=producer_epoch, attributes=TRANSACTIONAL_BIT | CONTROL_BIT,
    )


def read_end_txn_marker(buf: bytes | bytearray | memoryview, header: BatchHeader) -> EndTxnMarker | None:
    """The marker in the control batch at header.position; None when its record is no COMMIT or
    ABORT (another control type, or records that do not decode)."""
    records = decodable_records(buf, header)
    if not records:
        return None
    return end_txn_marker_of(records[0])


def control_record_type(record: Record) -> int | None:
    """The type of a control record (Kafka's ControlRecordType id); None when its key is too short."""
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        return None
    return _CONTROL_KEY.unpack_from(record.key)[1]


def end_txn_marker_of(record: Record) -> EndTxnMarker | None:
    """What a control record says when it is a COMMIT or ABORT marker; None otherwise."""
    control_type = control_record_type(record)
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT) or record.value is None:
        return None
    if len(record.value) < _END_TXN_VALUE.size:
        return None
    return EndTxnMarker(control_type == CONTROL_COMMIT, _END_TXN_VALUE.unpack_from(record.value)[1])


# ---------------------------------------------------------------- compaction: rebuilding batches

_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # what the Java client's SnappyOutputStream writes


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """The counterpart of `decompress`: frames every client reads (Java included).

    Snappy is xerial-framed as the Java client writes it; LZ4 is the LZ4 frame format with
    independent blocks, which Kafka's own LZ4 stream reader requires. `level` is the codec's
    level (a topic's compression.<codec>.level, KIP-390); None, or gzip's -1, is the library's
    default, and snappy has none.
    """
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data, level=None if level == -1 else level))
    if codec == COMPRESSION_SNAPPY:
        return _snappy_compress(data)
    if codec == COMPRESSION_LZ4:
        return _lz4_compress(data, level)
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _lz4_compress(data: bytes, level: int | None) -> bytes:
    # cramjam.lz4.compress links blocks, which the Java client refuses ("Dependent block stream is unsupported")
    compressor = cramjam.lz4.Compressor(level=level, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def _snappy_compress(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


class RawRecord(NamedTuple):  # a tuple: the cleaner makes one per record, twice
    """One record of a decompressed batch body, with its encoded bytes kept as they are.

    The cleaner decides per record from the key, offset delta and tombstone flag, and writes
    retained records back byte for byte, so timestamps, headers and deltas never change.
    """

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    is_tombstone: bool
    encoded: bytes


def batch_body(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bytes:
    """The records section of the batch at header.position, decompressed."""
    start = header.position + HEADER_SIZE
    return decompress(header.compression, bytes(buf[start : header.position + header.size]))


def decodable_records(buf: bytes | bytearray | memoryview, header: BatchHeader) -> list[Record] | None:
    """The records of a stored batch, or None when they do not decode.

    Produce checks the records of compressed batches and of compacted topics, but trusts an
    uncompressed batch's records past its CRC and header (docs/architecture.md, "Produce
    validation"), so a reader of stored records must expect a batch whose records are garbage.
    """
    try:
        return list(iter_records(buf, header))
    except (IndexError, ValueError, cramjam.DecompressionError):
        return None


def iter_raw_records(body: bytes, count: int) -> Iterator[RawRecord]:
    """Split a decompressed batch body into its `count` records."""
    record_start = 0
    for _ in range(count):
        length, position = _varint(body, record_start)
        end = position + length
        timestamp_delta, position = _varint(body, position + 1)  # skip the attributes byte
        offset_delta, position = _varint(body, position)
        key, position = _varbytes(body, position)
        value_length, position = _varint(body, position)
        yield RawRecord(offset_delta, timestamp_delta, key, value_length < 0, body[record_start:end])
        record_start = end


def rebuild_batch(header: BatchHeader, retained: list[RawRecord]) -> bytes:
    """The batch at header.position with only `retained` records, recompressed with its codec.

    Everything else stays: base offset and last offset delta (so the batch still ends at the
    same offset and producer state stays right), base timestamp, attributes, leader epoch,
    producer id, epoch and base sequence. The max timestamp is that of the retained records
    (CreateTime) or the original one (LogAppendTime, and empty batches kept for producers).
    An empty batch has no records section and says it is uncompressed, as Kafka writes it.
    """
    attributes = header.attributes
    max_timestamp = header.max_timestamp
    if retained:
        body = compress(header.compression, b"".join(r.encoded for r in retained))
        if not attributes & TIMESTAMP_TYPE_BIT:
            max_timestamp = header.base_timestamp + max(r.timestamp_delta for r in retained)
    else:
        body = b""
        attributes &= ~COMPRESSION_MASK
    out = bytearray(HEADER_SIZE) + body
    _HEADER.pack_into(
        out, 0, header.base_offset, len(out) - LOG_OVERHEAD, header.partition_leader_epoch, 2, 0,
        attributes, header.last_offset_delta, header.base_timestamp, max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, len(retained),
    )
    _CRC.pack_into(out, 17, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


CODECS = {
    "uncompressed": COMPRESSION_NONE, "gzip": COMPRESSION_GZIP, "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD,
}


def recompress_batch(
    header: BatchHeader, body: bytes | bytearray | memoryview, codec: int, level: int | None = None
) -> bytes:
    """The batch of `header` with its decompressed records `body` compressed with `codec` at
    `level` (a topic's compression.type and compression.<codec>.level): only the codec bits,
    batch length and CRC change."""
    out = bytearray(HEADER_SIZE) + compress(codec, bytes(body), level)
    _HEADER.pack_into(
        out, 0, header.base_offset, len(out) - LOG_OVERHEAD, header.partition_leader_epoch, 2, 0,
        (header.attributes & ~COMPRESSION_MASK) | codec, header.last_offset_delta, header.base_timestamp,
        header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
        header.record_count,
    )
    _CRC.pack_into(out, 17, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
