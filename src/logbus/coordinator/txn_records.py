"""The records of `__transaction_state`, byte for byte as Kafka writes them (sans-I/O).

Key: int16 version 0, then TransactionLogKey: the transactional id (int16-length string).
Value: int16 version, then TransactionLogValue, or null (a tombstone: the id expired):
  v0 (Kafka's encoding for clients on transaction version 1): producer id, producer epoch,
      timeout, status, partitions (nullable array of topic + partition ids), last update and
      start timestamps, with int16-length strings and int32-length arrays.
  v1 (flexible, transaction version 2, KIP-890): the same fields with compact strings and
      arrays and tagged-field sections, plus tagged fields 0 previous producer id, 1 next
      producer id, 2 client transaction version, each written only when not its default.
A transactional id lives on partition `coordinator_partition(id, transaction.state.log.num.partitions)`.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from dataclasses import dataclass

from .records import I8, I16, I32, I64, FlexibleReader, RecordFormatError, RecordReader, encode_uvarint

KEY_VERSION = 0
FLEXIBLE_VALUE_VERSION = 1
_TAG_PREVIOUS_PRODUCER_ID, _TAG_NEXT_PRODUCER_ID, _TAG_CLIENT_VERSION = 0, 1, 2


class TxnStatus(enum.IntEnum):
    """Kafka's TransactionState ids, as stored."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass(frozen=True, slots=True)
class TxnValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: TxnStatus
    partitions: tuple[tuple[str, tuple[int, ...]], ...]  # (topic, partition ids), topics in order
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_version: int = 0


# ---------------------------------------------------------------- encoding


def encode_key(transactional_id: str) -> bytes:
    data = transactional_id.encode("utf-8")
    return I16.pack(KEY_VERSION) + I16.pack(len(data)) + data


def encode_value(value: TxnValue, version: int) -> bytes:
    """`version` 0 or 1 (Kafka writes 1 for clients on transaction version 2)."""
    if version == 0:
        return _encode_v0(value)
    if version == FLEXIBLE_VALUE_VERSION:
        return _encode_v1(value)
    raise ValueError(f"TransactionLogValue v{version} is not written")


def _fixed_head(value: TxnValue) -> bytes:
    return I64.pack(value.producer_id) + I16.pack(value.producer_epoch) + I32.pack(value.timeout_ms) \
        + I8.pack(value.status)


def _fixed_tail(value: TxnValue) -> bytes:
    return I64.pack(value.last_update_ms) + I64.pack(value.start_ms)


def _encode_v0(value: TxnValue) -> bytes:
    parts = [I16.pack(0), _fixed_head(value), I32.pack(len(value.partitions))]
    for topic, ids in value.partitions:
        name = topic.encode("utf-8")
        parts += [I16.pack(len(name)), name, I32.pack(len(ids)), *(I32.pack(i) for i in ids)]
    parts.append(_fixed_tail(value))
    return b"".join(parts)


def _encode_v1(value: TxnValue) -> bytes:
    parts = [I16.pack(FLEXIBLE_VALUE_VERSION), _fixed_head(value), encode_uvarint(len(value.partitions) + 1)]
    for topic, ids in value.partitions:
        name = topic.encode("utf-8")
        parts += [encode_uvarint(len(name) + 1), name, encode_uvarint(len(ids) + 1), *(I32.pack(i) for i in ids),
                  encode_uvarint(0)]
    parts.append(_fixed_tail(value))
    tags = [(tag, data) for tag, data, default in (
        (_TAG_PREVIOUS_PRODUCER_ID, I64.pack(value.previous_producer_id), value.previous_producer_id == -1),
        (_TAG_NEXT_PRODUCER_ID, I64.pack(value.next_producer_id), value.next_producer_id == -1),
        (_TAG_CLIENT_VERSION, I16.pack(value.client_version), value.client_version == 0),
    ) if not default]
    parts.append(encode_uvarint(len(tags)))
    for tag, data in tags:
        parts += [encode_uvarint(tag), encode_uvarint(len(data)), data]
    return b"".join(parts)


# ---------------------------------------------------------------- decoding


def decode_key(data: bytes) -> str:
    """The transactional id of a `__transaction_state` key."""
    reader = RecordReader(data)
    version = reader.i16()
    if version != KEY_VERSION:
        raise RecordFormatError(f"TransactionLogKey v{version}")
    return reader.string()


def decode_value(data: bytes) -> TxnValue:
    reader = FlexibleReader(data)
    version = reader.i16()
    if version not in (0, FLEXIBLE_VALUE_VERSION):
        raise RecordFormatError(f"TransactionLogValue v{version}")
    flexible = version == FLEXIBLE_VALUE_VERSION
    producer_id, epoch, timeout_ms = reader.i64(), reader.i16(), reader.i32()
    status = _status(reader.i8())
    partitions = _read_partitions(reader, flexible)
    last_update_ms, start_ms = reader.i64(), reader.i64()
    value = TxnValue(producer_id, epoch, timeout_ms, status, partitions, last_update_ms, start_ms)
    if not flexible:
        return value
    tags = reader.tagged_fields()
    return dataclasses.replace(
        value,
        previous_producer_id=_tagged(tags, _TAG_PREVIOUS_PRODUCER_ID, I64, -1),
        next_producer_id=_tagged(tags, _TAG_NEXT_PRODUCER_ID, I64, -1),
        client_version=_tagged(tags, _TAG_CLIENT_VERSION, I16, 0),
    )


def _status(code: int) -> TxnStatus:
    try:
        return TxnStatus(code)
    except ValueError:
        raise RecordFormatError(f"transaction status {code}") from None


def _read_partitions(reader: FlexibleReader, flexible: bool) -> tuple[tuple[str, tuple[int, ...]], ...]:
    count = reader.compact_length() if flexible else reader.i32()
    partitions = []
    for _ in range(max(count, 0)):
        topic = reader.compact_string() if flexible else reader.string()
        ids = reader.compact_length() if flexible else reader.i32()
        if ids < 0:
            raise RecordFormatError("null partition ids")
        partitions.append((topic, tuple(reader.i32() for _ in range(ids))))  # ends with the bytes
        if flexible:
            reader.tagged_fields()
    return tuple(partitions)


def _tagged(tags: dict[int, bytes], tag: int, fmt: struct.Struct, default: int) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    if len(data) != fmt.size:
        raise RecordFormatError(f"tagged field {tag} of {len(data)} bytes")
    return fmt.unpack(data)[0]
