"""The `__consumer_offsets` records of KIP-848 consumer groups, byte for byte as Kafka 4.1 writes
them (sans-I/O).

A key is an int16 record type (Kafka's coordinator-key apiKey) and the group id (and member id),
as the classic keys (int16-length strings); a value is an int16 version (0) and a flexible body
(compact strings and arrays, uuids, tagged fields). A null value is a tombstone.

  3 ConsumerGroupMetadata            group          epoch (tagged: metadata hash, creation time)
  4 ConsumerGroupPartitionMetadata   group          subscribed topics: id, name, partition count
  5 ConsumerGroupMemberMetadata      group, member  instance/rack/client id, client host, topic
                                                    names, regex, rebalance timeout, assignor
  6 ConsumerGroupTargetAssignmentMetadata  group    assignment epoch
  7 ConsumerGroupTargetAssignmentMember    group, member  target partitions by topic id
  8 ConsumerGroupCurrentMemberAssignment   group, member  member epoch, previous epoch, state,
                                                    assigned partitions, partitions being revoked

Kafka 4.1 keeps the subscribed topics' metadata as a hash in the group's metadata record
(KIP-1101) and reads record 4 only from older logs; logbus writes record 4 (Kafka 4.0's way),
leaving the hash at its default 0. Tagged fields it does not know are skipped on read. Anything
that does not parse raises RecordFormatError (or UnicodeDecodeError), as records.py's decoders.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .records import I16, I32, FlexibleReader, RecordFormatError, RecordReader, encode_string, encode_uvarint

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
MEMBER_KINDS = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
KINDS = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))
VALUE_VERSION = 0
MEMBER_STATES = (0, 1, 2)  # Kafka's MemberState: STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS

TopicIdPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


# ---------------------------------------------------------------- record shapes


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """The key of a consumer group record: its type, the group and (types 5, 7, 8) the member."""

    kind: int
    group: str
    member: str | None = None


@dataclass(frozen=True, slots=True)
class GroupEpochValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadataValue:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadataValue, ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    subscribed_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class AssignmentEpochValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentValue:
    partitions: TopicIdPartitions


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MEMBER_STATES
    assigned: TopicIdPartitions
    revoking: TopicIdPartitions


ConsumerGroupValue = (GroupEpochValue | PartitionMetadataValue | MemberMetadataValue | AssignmentEpochValue
                      | TargetAssignmentValue | CurrentAssignmentValue)

VALUE_TYPES: dict[int, type] = {
    GROUP_METADATA: GroupEpochValue, PARTITION_METADATA: PartitionMetadataValue,
    MEMBER_METADATA: MemberMetadataValue, TARGET_ASSIGNMENT_METADATA: AssignmentEpochValue,
    TARGET_ASSIGNMENT_MEMBER: TargetAssignmentValue, CURRENT_MEMBER_ASSIGNMENT: CurrentAssignmentValue,
}


# ---------------------------------------------------------------- encoding


def compact_string(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    data = text.encode("utf-8")
    return encode_uvarint(len(data) + 1) + data


def compact_array(items: list[bytes]) -> bytes:
    return encode_uvarint(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"


def _topic_partitions(topics: TopicIdPartitions) -> bytes:
    return compact_array([
        topic_id.bytes + compact_array([I32.pack(p) for p in partitions]) + NO_TAGS
        for topic_id, partitions in topics
    ])


def encode_consumer_key(key: ConsumerGroupKey) -> bytes:
    data = I16.pack(key.kind) + encode_string(key.group)
    return data + encode_string(key.member) if key.kind in MEMBER_KINDS else data


def encode_consumer_value(value: ConsumerGroupValue) -> bytes:
    return I16.pack(VALUE_VERSION) + _body(value) + NO_TAGS


def _body(value: ConsumerGroupValue) -> bytes:
    if isinstance(value, GroupEpochValue):
        return I32.pack(value.epoch)
    if isinstance(value, PartitionMetadataValue):
        return compact_array([
            t.topic_id.bytes + compact_string(t.name) + I32.pack(t.partitions) + compact_array([]) + NO_TAGS
            for t in value.topics
        ])
    if isinstance(value, MemberMetadataValue):
        return (
            compact_string(value.instance_id) + compact_string(value.rack_id) + compact_string(value.client_id)
            + compact_string(value.client_host) + compact_array([compact_string(t) for t in value.subscribed_topics])
            + compact_string(value.subscribed_regex) + I32.pack(value.rebalance_timeout_ms)
            + compact_string(value.server_assignor)
        )
    if isinstance(value, AssignmentEpochValue):
        return I32.pack(value.assignment_epoch)
    if isinstance(value, TargetAssignmentValue):
        return _topic_partitions(value.partitions)
    return (
        I32.pack(value.member_epoch) + I32.pack(value.previous_member_epoch) + bytes([value.state & 0xFF])
        + _topic_partitions(value.assigned) + _topic_partitions(value.revoking)
    )


# ---------------------------------------------------------------- decoding


class ConsumerRecordReader(FlexibleReader):
    """FlexibleReader with the fields of these records (every length checked against the data)."""

    def compact_nullable_string(self) -> str | None:
        length = self.compact_length()
        return None if length < 0 else self.take(length).decode("utf-8")

    def array_length(self) -> int:
        """A compact array's length (null read as empty); no more items than bytes left."""
        length = self.compact_length()
        if length > len(self.data) - self.position:
            raise RecordFormatError("array longer than the record")
        return max(length, 0)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16))

    def skip_tags(self) -> None:
        self.tagged_fields()

    def topic_partitions(self) -> TopicIdPartitions:
        topics = []
        for _ in range(self.array_length()):
            topic_id = self.uuid()
            partitions = tuple(self.i32() for _ in range(self.array_length()))
            self.skip_tags()
            topics.append((topic_id, partitions))
        return tuple(topics)


def is_consumer_group_key(data: bytes) -> bool:
    return len(data) >= 2 and I16.unpack_from(data)[0] in KINDS


def decode_consumer_key(data: bytes) -> ConsumerGroupKey:
    reader = RecordReader(data)
    kind = reader.i16()
    if kind not in KINDS:
        raise RecordFormatError(f"record type {kind} is not a consumer group's")
    group = reader.string()
    return ConsumerGroupKey(kind, group, reader.string() if kind in MEMBER_KINDS else None)


def decode_consumer_value(kind: int, data: bytes) -> ConsumerGroupValue:
    reader = ConsumerRecordReader(data)
    version = reader.i16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"consumer group record {kind} v{version} is not supported")
    value = _read_body(kind, reader)
    reader.skip_tags()
    return value


def _read_body(kind: int, reader: ConsumerRecordReader) -> ConsumerGroupValue:
    if kind == GROUP_METADATA:
        return GroupEpochValue(reader.i32())
    if kind == PARTITION_METADATA:
        return PartitionMetadataValue(tuple(_read_topic_metadata(reader) for _ in range(reader.array_length())))
    if kind == MEMBER_METADATA:
        return MemberMetadataValue(
            reader.compact_nullable_string(), reader.compact_nullable_string(), reader.compact_string(),
            reader.compact_string(), tuple(reader.compact_string() for _ in range(reader.array_length())),
            reader.compact_nullable_string(), reader.i32(), reader.compact_nullable_string(),
        )
    if kind == TARGET_ASSIGNMENT_METADATA:
        return AssignmentEpochValue(reader.i32())
    if kind == TARGET_ASSIGNMENT_MEMBER:
        return TargetAssignmentValue(reader.topic_partitions())
    if kind != CURRENT_MEMBER_ASSIGNMENT:
        raise RecordFormatError(f"record type {kind} is not a consumer group's")
    epoch, previous, state = reader.i32(), reader.i32(), reader.i8()
    if state not in MEMBER_STATES:
        raise RecordFormatError(f"member state {state} is not known")
    return CurrentAssignmentValue(epoch, previous, state, reader.topic_partitions(), reader.topic_partitions())


def _read_topic_metadata(reader: ConsumerRecordReader) -> TopicMetadataValue:
    topic = TopicMetadataValue(reader.uuid(), reader.compact_string(), reader.i32())
    for _ in range(reader.array_length()):  # the racks of each partition (not used since Kafka 4.0)
        reader.i32()
        for _ in range(reader.array_length()):
            reader.compact_string()
        reader.skip_tags()
    reader.skip_tags()
    return topic
