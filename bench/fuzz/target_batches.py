"""Fuzz target: produce-side batch validation, record checks and bounded decompression.

Any input must end in a clean rejection (CorruptRecordError, or KafkaApiError with a code) or in
batches whose every record decodes: the checks may never raise anything else, nor accept a batch
that `iter_records` (what ListOffsets, compaction and the Spark source use) cannot read. Each input
is tried as is and with its CRCs made valid, so mutations get past the CRC to the rules behind it.
"""

from __future__ import annotations

import struct

import crc32c

from logbus.errors import KafkaApiError
from logbus.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    CorruptRecordError,
    RecordRules,
    build_batch,
    check_client_batch,
    check_record_lengths,
    check_records,
    compress,
    decompress_bounded,
    iter_records,
    validate_batches,
)

DECOMPRESSED_LIMIT = 1 << 20  # small, so a bomb in the corpus stays cheap
RULES = RecordRules(check_timestamps=True, min_timestamp=0, max_timestamp=1 << 62, require_keys=True)
REJECTIONS = (CorruptRecordError, KafkaApiError)


def with_valid_crcs(data: bytes) -> bytes:
    """`data` with the CRC of every batch it frames recomputed (lengths as they are)."""
    out = bytearray(data)
    position = 0
    while position + HEADER_SIZE <= len(out):
        (length,) = struct.unpack_from(">i", out, position + 8)
        end = position + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or end > len(out):
            break
        struct.pack_into(">I", out, position + 17, crc32c.crc32c(bytes(out[position + CRC_START : end])))
        position = end
    return bytes(out)


def _compressed(codec: int, batch: bytes) -> bytes:
    out = bytearray(batch[:HEADER_SIZE]) + compress(codec, batch[HEADER_SIZE:])
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    struct.pack_into(">h", out, 21, struct.unpack_from(">h", out, 21)[0] | codec)
    return with_valid_crcs(bytes(out))


_PLAIN = build_batch([(b"key-%d" % i, b"value-%d" % i * 3) for i in range(5)], 1_700_000_000_000)
SEEDS: list[bytes] = [
    _PLAIN,
    build_batch([(None, b"v")], 1_700_000_000_000, producer_id=3, producer_epoch=0, base_sequence=0),
    *(_compressed(codec, _PLAIN) for codec in (COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4,
                                                COMPRESSION_ZSTD)),
]


def fuzz_one(data: bytes) -> None:
    _check(data)
    _check(with_valid_crcs(data))


def _check(data: bytes) -> None:
    try:
        headers = validate_batches(data)
    except REJECTIONS:
        return
    for header in headers:
        assert header.record_count == header.last_offset_delta + 1 >= 1
        _accepted(check_client_batch, header)
        start = header.position + HEADER_SIZE
        try:
            body = decompress_bounded(header.compression, memoryview(data)[start : header.position + header.size],
                                      DECOMPRESSED_LIMIT)
            assert len(body) <= DECOMPRESSED_LIMIT
        except REJECTIONS:
            continue
        lengths_ok = _accepted(check_record_lengths, body, header.record_count)
        if not _accepted(check_records, body, header, RULES):
            continue
        assert lengths_ok, "check_records accepted what the length walk refuses"
        records = list(iter_records(data, header))
        assert [record.offset for record in records] == list(range(header.base_offset, header.next_offset))


def _accepted(check, *args: object) -> bool:
    try:
        check(*args)
    except REJECTIONS:
        return False
    return True
