"""The records of `__share_group_state`, byte for byte as Kafka 4.x's share coordinator writes
them, and the share-partition state they describe (sans-I/O).

A key is an int16 record type and the share-partition (group id as an int16-length string, topic
id, partition: Kafka's non-flexible ShareSnapshotKey / ShareUpdateKey); a value is an int16
version (0) and a flexible body:

  0 ShareSnapshot  snapshot epoch, state epoch, leader epoch, start offset, create and write
                   timestamps, the state batches: the share-partition's whole state
  1 ShareUpdate    snapshot epoch, leader epoch, start offset (-1: unchanged), the state batches
                   that changed since the snapshot

A state batch is first and last offset, delivery state (0 Available, 2 Acknowledged, 4 Archived)
and delivery count. Kafka 4.2's tagged DeliveryCompleteCount (KIP-1226) is not written (its
default, -1, means "unknown") and, as every tagged field, skipped on read. A null value is a
tombstone (the share-partition's state was deleted). Anything that does not parse raises
RecordFormatError (or UnicodeDecodeError), as records.py's decoders.

`ShareState.updated` is Kafka's merge of a write (or an update record) into the state: the
batches written replace what the state had for their offsets, and what lies below the new start
offset goes (on ranges: a hostile batch spanning 2^62 offsets costs no more than any other).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from .records import I8, I16, I32, I64, FlexibleReader, RecordFormatError, RecordReader, encode_string, encode_uvarint

SNAPSHOT = 0
UPDATE = 1
VALUE_VERSION = 0
DELIVERY_STATES = (0, 2, 4)  # Available, Acknowledged, Archived: what a record's persisted state may be
NO_TAGS = b"\x00"


@dataclass(frozen=True, slots=True)
class ShareKey:
    """One share-partition: a share group's state of one topic partition."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """FindCoordinator's key (type 2) and the key hashed to a `__share_group_state` partition:
        "group:topicId:partition", with the topic id as Kafka prints a Uuid (url-safe base64)."""
        return f"{self.group_id}:{topic_id_text(self.topic_id)}:{self.partition}"


def topic_id_text(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareState:
    """What the share coordinator keeps of a share-partition (Kafka's ShareGroupOffset)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = ()
    snapshot_epoch: int = 0
    create_timestamp: int = -1
    write_timestamp: int = -1

    def updated(self, start_offset: int, leader_epoch: int, batches: tuple[StateBatch, ...]) -> ShareState:
        """The state after a write: `batches` override this state's offsets, -1 keeps the start
        offset and leader epoch, and nothing below the start offset stays."""
        start = self.start_offset if start_offset == -1 else start_offset
        epoch = self.leader_epoch if leader_epoch == -1 else leader_epoch
        merged = merge_batches(self.batches, batches, start)
        return replace(self, start_offset=start, leader_epoch=epoch, batches=merged)


def merge_batches(old: tuple[StateBatch, ...], new: tuple[StateBatch, ...],
                  start_offset: int) -> tuple[StateBatch, ...]:
    """`new` laid over `old` (later batches over earlier ones), cut below `start_offset`, in offset
    order with neighbours of the same state and count joined. Works on ranges: a batch's span
    costs nothing."""
    merged: list[StateBatch] = []
    for batch in (*old, *new):
        merged = [part for kept in merged for part in _outside(kept, batch)] + [batch]
    return _joined(sorted((cut for b in merged if (cut := _from(b, start_offset)) is not None),
                          key=lambda b: b.first_offset))


def _outside(kept: StateBatch, over: StateBatch) -> list[StateBatch]:
    """What of `kept` lies outside `over`'s offsets."""
    if kept.last_offset < over.first_offset or kept.first_offset > over.last_offset:
        return [kept]
    parts = []
    if kept.first_offset < over.first_offset:
        parts.append(replace(kept, last_offset=over.first_offset - 1))
    if kept.last_offset > over.last_offset:
        parts.append(replace(kept, first_offset=over.last_offset + 1))
    return parts


def _from(batch: StateBatch, start_offset: int) -> StateBatch | None:
    if batch.last_offset < start_offset:
        return None
    return replace(batch, first_offset=start_offset) if batch.first_offset < start_offset else batch


def _joined(batches: list[StateBatch]) -> tuple[StateBatch, ...]:
    return _runs((b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in batches)


def batches_of(states: dict[int, tuple[int, int]]) -> tuple[StateBatch, ...]:
    """Offsets with their (delivery state, delivery count) as the fewest state batches."""
    return _runs((offset, offset, *states[offset]) for offset in sorted(states))


def _runs(ranges: Iterable[tuple[int, int, int, int]]) -> tuple[StateBatch, ...]:
    """(first, last, state, count) in offset order, neighbours of the same state and count joined
    (plain lists while joining: a share-partition's acknowledgement may name thousands of offsets)."""
    runs: list[list[int]] = []
    for first, last, state, count in ranges:
        run = runs[-1] if runs else None
        if run is not None and run[1] == first - 1 and run[2] == state and run[3] == count:
            run[1] = last
        else:
            runs.append([first, last, state, count])
    return tuple(StateBatch(*run) for run in runs)


def check_batches(batches: tuple[StateBatch, ...]) -> None:
    """A write's batches as a leader sends them: RecordFormatError for offsets out of order or
    negative, or a delivery state that is not a persisted one."""
    for batch in batches:
        if not 0 <= batch.first_offset <= batch.last_offset or batch.delivery_state not in DELIVERY_STATES:
            raise RecordFormatError(f"invalid state batch {batch}")


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    """A ShareUpdate record's value: a write's change."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = field(default=())


# ---------------------------------------------------------------- encoding


def encode_key(kind: int, key: ShareKey) -> bytes:
    return I16.pack(kind) + encode_string(key.group_id) + key.topic_id.bytes + I32.pack(key.partition)


def _batches(batches: tuple[StateBatch, ...]) -> bytes:
    return encode_uvarint(len(batches) + 1) + b"".join(
        I64.pack(b.first_offset) + I64.pack(b.last_offset) + I8.pack(b.delivery_state) + I16.pack(b.delivery_count)
        + NO_TAGS for b in batches)


def encode_snapshot(state: ShareState) -> bytes:
    return (I16.pack(VALUE_VERSION) + I32.pack(state.snapshot_epoch) + I32.pack(state.state_epoch)
            + I32.pack(state.leader_epoch) + I64.pack(state.start_offset) + I64.pack(state.create_timestamp)
            + I64.pack(state.write_timestamp) + _batches(state.batches) + NO_TAGS)


def encode_update(update: ShareUpdate) -> bytes:
    return (I16.pack(VALUE_VERSION) + I32.pack(update.snapshot_epoch) + I32.pack(update.leader_epoch)
            + I64.pack(update.start_offset) + _batches(update.batches) + NO_TAGS)


# ---------------------------------------------------------------- decoding


def decode_key(data: bytes) -> tuple[int, ShareKey]:
    """A record's type (SNAPSHOT or UPDATE) and share-partition."""
    reader = RecordReader(data)
    kind = reader.i16()
    if kind not in (SNAPSHOT, UPDATE):
        raise RecordFormatError(f"record type {kind} is not a share coordinator's")
    group_id = reader.string()
    topic_id = uuid.UUID(bytes=reader.take(16))
    return kind, ShareKey(group_id, topic_id, reader.i32())


def _value_reader(data: bytes) -> FlexibleReader:
    reader = FlexibleReader(data)
    version = reader.i16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"share state record v{version} is not supported")
    return reader


def _read_batches(reader: FlexibleReader) -> tuple[StateBatch, ...]:
    count = reader.compact_length()
    if count < 0 or count * 19 > len(reader.data) - reader.position:
        raise RecordFormatError("bad state batch count")
    batches = []
    for _ in range(count):
        batch = StateBatch(reader.i64(), reader.i64(), reader.i8(), reader.i16())
        reader.tagged_fields()
        batches.append(batch)
    return tuple(batches)


def decode_snapshot(data: bytes) -> ShareState:
    reader = _value_reader(data)
    snapshot_epoch, state_epoch, leader_epoch = reader.i32(), reader.i32(), reader.i32()
    start_offset, created, written = reader.i64(), reader.i64(), reader.i64()
    batches = _read_batches(reader)
    reader.tagged_fields()
    return ShareState(state_epoch, leader_epoch, start_offset, batches, snapshot_epoch, created, written)


def decode_update(data: bytes) -> ShareUpdate:
    reader = _value_reader(data)
    update = ShareUpdate(reader.i32(), reader.i32(), reader.i64())
    batches = _read_batches(reader)
    reader.tagged_fields()
    return replace(update, batches=batches)
