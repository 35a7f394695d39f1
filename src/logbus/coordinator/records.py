"""The records of `__consumer_offsets`, byte for byte as Kafka writes them (sans-I/O).

Keys start with an int16 version that says what the record is:
  0, 1  OffsetCommitKey     group, topic, partition            (Kafka writes v1)
  2     GroupMetadataKey    group                              (Kafka writes v2)
Values (null = tombstone: the offset or the group is deleted):
  OffsetCommitValue v3: offset, leader epoch, metadata, commit timestamp; v1 (written when the
      client asked for a retention time, OffsetCommit v2-v4) has an expire timestamp instead
      of the leader epoch. v0 and v2 are read too.
  GroupMetadataValue v3: protocol type, generation, protocol, leader, state timestamp and the
      members (id, instance id, client id/host, timeouts, subscription, assignment). v0-v2 are
      read too.
These are Kafka's non-flexible encodings (int16-length strings, int32-length bytes). Key versions
3-8 are the records of KIP-848 consumer groups (consumer_records.py); others (share and streams
groups) are not ours and are skipped.

The coordinating partition of a group is `Utils.abs(groupId.hashCode()) % partitions`, with
Java's String.hashCode over UTF-16 code units and Kafka's abs mapping Integer.MIN_VALUE to 0.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from kio.serial.writers import write_unsigned_varint

from ..protocol.frames import MalformedRequestError, read_uvarint

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_WITH_EXPIRY_VERSION = 1
GROUP_VALUE_VERSION = 3

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
_INT_MIN = -(1 << 31)


class RecordFormatError(ValueError):
    """A key or value of __consumer_offsets that does not parse."""


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (signed 32-bit, over UTF-16 code units)."""
    encoded = text.encode("utf-16-be", "surrogatepass")
    value = 0
    for i in range(0, len(encoded), 2):
        value = (31 * value + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of a coordinator's internal topic that owns a group id or a transactional
    id: Kafka's `Utils.abs(key.hashCode) % partitions` (abs(Integer.MIN_VALUE) is 0 there)."""
    code = java_string_hash(key)
    return (0 if code == _INT_MIN else abs(code)) % partitions


# ---------------------------------------------------------------- record shapes


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int  # -1 when unknown
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only in v1 values


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberValue, ...]


# ---------------------------------------------------------------- encoding


def encode_string(text: str | None) -> bytes:
    if text is None:
        return I16.pack(-1)
    data = text.encode("utf-8")
    return I16.pack(len(data)) + data


def _bytes(data: bytes) -> bytes:
    return I32.pack(len(data)) + data


def encode_offset_key(key: OffsetKey) -> bytes:
    return I16.pack(OFFSET_KEY_VERSION) + encode_string(key.group) + encode_string(key.topic) + I32.pack(key.partition)


def encode_group_key(key: GroupKey) -> bytes:
    return I16.pack(GROUP_KEY_VERSION) + encode_string(key.group)


def encode_offset_value(value: OffsetValue) -> bytes:
    """v3, or v1 when the commit carried an expire timestamp (as Kafka chooses)."""
    if value.expire_timestamp >= 0:
        return (
            I16.pack(OFFSET_VALUE_WITH_EXPIRY_VERSION) + I64.pack(value.offset) + encode_string(value.metadata)
            + I64.pack(value.commit_timestamp) + I64.pack(value.expire_timestamp)
        )
    return (
        I16.pack(OFFSET_VALUE_VERSION) + I64.pack(value.offset) + I32.pack(value.leader_epoch)
        + encode_string(value.metadata) + I64.pack(value.commit_timestamp)
    )


def encode_group_value(value: GroupValue) -> bytes:
    parts = [
        I16.pack(GROUP_VALUE_VERSION), encode_string(value.protocol_type), I32.pack(value.generation),
        encode_string(value.protocol), encode_string(value.leader), I64.pack(value.state_timestamp),
        I32.pack(len(value.members)),
    ]
    for member in value.members:
        parts += [
            encode_string(member.member_id), encode_string(member.group_instance_id), encode_string(member.client_id),
            encode_string(member.client_host), I32.pack(member.rebalance_timeout_ms),
            I32.pack(member.session_timeout_ms), _bytes(member.subscription), _bytes(member.assignment),
        ]
    return b"".join(parts)


# ---------------------------------------------------------------- decoding


class RecordReader:
    """Reads the big-endian fields of an internal topic's key or value; RecordFormatError when
    the bytes end early or do not parse."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def _unpack(self, fmt: struct.Struct) -> int:
        if self.position + fmt.size > len(self.data):
            raise RecordFormatError("record ends early")
        (value,) = fmt.unpack_from(self.data, self.position)
        self.position += fmt.size
        return value

    def i8(self) -> int:
        return self._unpack(I8)

    def i16(self) -> int:
        return self._unpack(I16)

    def i32(self) -> int:
        return self._unpack(I32)

    def i64(self) -> int:
        return self._unpack(I64)

    def take(self, length: int) -> bytes:
        if self.position + length > len(self.data):
            raise RecordFormatError("record ends early")
        data = self.data[self.position : self.position + length]
        self.position += length
        return data

    def nullable_string(self) -> str | None:
        length = self.i16()
        return None if length < 0 else self.take(length).decode("utf-8")

    def string(self) -> str:
        return self.nullable_string() or ""

    def bytes(self) -> bytes:
        length = self.i32()
        return b"" if length < 0 else self.take(length)


def encode_uvarint(value: int) -> bytes:
    buffer = io.BytesIO()
    write_unsigned_varint(buffer, value)
    return buffer.getvalue()


class FlexibleReader(RecordReader):
    """The compact (varint-length) fields and tagged sections of flexible versions."""

    def uvarint(self) -> int:
        try:
            value, self.position = read_uvarint(self.data, self.position)
        except MalformedRequestError as exc:
            raise RecordFormatError(str(exc)) from None
        return value

    def compact_length(self) -> int:
        """A compact string's or array's length; -1 for null."""
        return self.uvarint() - 1

    def compact_string(self) -> str:
        length = self.compact_length()
        if length < 0:
            raise RecordFormatError("null where a string is required")
        return self.take(length).decode("utf-8")

    def tagged_fields(self) -> dict[int, bytes]:
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.take(self.uvarint())
        return fields


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a record, or None for record kinds the classic coordinator does not own."""
    reader = RecordReader(data)
    version = reader.i16()
    if version in (0, 1):
        return OffsetKey(reader.string(), reader.string(), reader.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.string())
    return None


def decode_offset_value(data: bytes) -> OffsetValue:
    reader = RecordReader(data)
    version = reader.i16()
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"OffsetCommitValue v{version} is not supported")
    offset = reader.i64()
    leader_epoch = reader.i32() if version >= 3 else -1
    metadata = reader.string()
    commit_timestamp = reader.i64()
    expire_timestamp = reader.i64() if version == 1 else -1
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_value(data: bytes) -> GroupValue:
    reader = RecordReader(data)
    version = reader.i16()
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"GroupMetadataValue v{version} is not supported")
    protocol_type = reader.string()
    generation = reader.i32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_timestamp = reader.i64() if version >= 2 else -1
    members = []
    for _ in range(reader.i32()):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout = reader.i32() if version >= 1 else -1
        session_timeout = reader.i32()
        members.append(MemberValue(
            member_id, instance_id, client_id, client_host, rebalance_timeout
            if rebalance_timeout >= 0 else session_timeout, session_timeout, reader.bytes(), reader.bytes(),
        ))
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))
