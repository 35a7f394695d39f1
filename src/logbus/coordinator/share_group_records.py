"""The `__consumer_offsets` records of share groups (KIP-932) that logbus writes, byte for byte as
Kafka 4.2 writes them (sans-I/O).

A key is an int16 record type and the group id (an int16-length string), as the consumer group
keys; a value is an int16 version (0) and a flexible body:

  11 ShareGroupMetadata                group  epoch, metadata hash (logbus writes 0)
  15 ShareGroupStatePartitionMetadata  group  the topic-partitions whose share state is being
                                              initialized and is initialized (topic id, name,
                                              partitions, create timestamp), the topics whose
                                              share state is being deleted (id, name)

A null value is a tombstone. Kafka's member and assignment records of share groups (10, 12–14)
are not written: a share group's members are not kept over a coordinator restart (they rejoin);
a log holding them is read without them. Tagged fields are skipped on read. Anything that does
not parse raises RecordFormatError (or UnicodeDecodeError), as records.py's decoders.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .consumer_records import NO_TAGS, ConsumerRecordReader, compact_array, compact_string
from .records import I16, I32, I64, RecordFormatError, RecordReader, encode_string

SHARE_GROUP_METADATA = 11
SHARE_STATE_PARTITION_METADATA = 15
KINDS = frozenset({SHARE_GROUP_METADATA, SHARE_STATE_PARTITION_METADATA})
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class ShareGroupKey:
    kind: int
    group: str


@dataclass(frozen=True, slots=True)
class ShareGroupEpochValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class StateTopic:
    """A topic of ShareGroupStatePartitionMetadata (partitions and create time: () and -1 for a
    topic being deleted, whose record has neither)."""

    topic_id: uuid.UUID
    name: str
    partitions: tuple[int, ...] = ()
    create_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class StatePartitionMetadataValue:
    initializing: tuple[StateTopic, ...] = ()
    initialized: tuple[StateTopic, ...] = ()
    deleting: tuple[StateTopic, ...] = ()

    def topics(self) -> tuple[StateTopic, ...]:
        """Every topic whose share state may exist."""
        return self.initializing + self.initialized + self.deleting


ShareGroupValue = ShareGroupEpochValue | StatePartitionMetadataValue


def is_share_group_key(data: bytes) -> bool:
    return len(data) >= 2 and I16.unpack_from(data)[0] in KINDS


def encode_share_key(key: ShareGroupKey) -> bytes:
    return I16.pack(key.kind) + encode_string(key.group)


def encode_share_value(value: ShareGroupValue) -> bytes:
    if isinstance(value, ShareGroupEpochValue):
        body = I32.pack(value.epoch) + I64.pack(value.metadata_hash)
    else:
        body = (_partitions_info(value.initializing) + _partitions_info(value.initialized)
                + compact_array([t.topic_id.bytes + compact_string(t.name) + NO_TAGS for t in value.deleting]))
    return I16.pack(VALUE_VERSION) + body + NO_TAGS


def _partitions_info(topics: tuple[StateTopic, ...]) -> bytes:
    return compact_array([
        t.topic_id.bytes + compact_string(t.name) + compact_array([I32.pack(p) for p in t.partitions])
        + I64.pack(t.create_timestamp) + NO_TAGS
        for t in topics
    ])


def decode_share_key(data: bytes) -> ShareGroupKey:
    reader = RecordReader(data)
    kind = reader.i16()
    if kind not in KINDS:
        raise RecordFormatError(f"record type {kind} is not a share group's")
    return ShareGroupKey(kind, reader.string())


def decode_share_value(kind: int, data: bytes) -> ShareGroupValue:
    reader = ConsumerRecordReader(data)
    version = reader.i16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"share group record {kind} v{version} is not supported")
    value: ShareGroupValue
    if kind == SHARE_GROUP_METADATA:
        value = ShareGroupEpochValue(reader.i32(), reader.i64())
    elif kind == SHARE_STATE_PARTITION_METADATA:
        value = StatePartitionMetadataValue(_read_partitions_info(reader), _read_partitions_info(reader),
                                            tuple(_read_topic_info(reader) for _ in range(reader.array_length())))
    else:
        raise RecordFormatError(f"record type {kind} is not a share group's")
    reader.skip_tags()
    return value


def _read_partitions_info(reader: ConsumerRecordReader) -> tuple[StateTopic, ...]:
    topics = []
    for _ in range(reader.array_length()):
        topic_id, name = reader.uuid(), reader.compact_string()
        partitions = tuple(reader.i32() for _ in range(reader.array_length()))
        topics.append(StateTopic(topic_id, name, partitions, reader.i64()))
        reader.skip_tags()
    return tuple(topics)


def _read_topic_info(reader: ConsumerRecordReader) -> StateTopic:
    topic = StateTopic(reader.uuid(), reader.compact_string())
    reader.skip_tags()
    return topic
