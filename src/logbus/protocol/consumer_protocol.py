"""The consumer protocol embedded in classic JoinGroup/SyncGroup (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, v0-v3): what a classic member of a KIP-848 consumer group subscribes
to and owns, and the assignment its SyncGroup answer carries.

Every byte comes from a client: a truncated or inconsistent blob raises ValueError; a version
above 3 is read as v3 (Kafka reads the fields it knows and ignores the rest).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

Assignment = dict[str, frozenset[int]]


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: Assignment
    rack_id: str | None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def unpack(self, fmt: str) -> int:
        try:
            (value,) = struct.unpack_from(fmt, self.data, self.position)
        except struct.error as exc:
            raise ValueError(f"truncated consumer protocol: {exc}") from None
        self.position += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise ValueError("null string in the consumer protocol")
        return text

    def nullable_string(self) -> str | None:
        length = self.unpack(">h")
        return None if length < 0 else self.take(length).decode("utf-8")

    def take(self, length: int) -> bytes:
        if self.position + length > len(self.data):
            raise ValueError("truncated consumer protocol")
        raw = self.data[self.position:self.position + length]
        self.position += length
        return raw

    def count(self) -> int:
        """An array's length; each element takes at least 2 bytes, so a larger claim is refused
        before anything is allocated for it."""
        count = max(self.unpack(">i"), 0)
        if count * 2 > len(self.data) - self.position:
            raise ValueError("consumer protocol array longer than its blob")
        return count

    def skip_bytes(self) -> None:
        length = self.unpack(">i")
        if length > 0:
            self.take(length)

    def partitions(self) -> Assignment:
        result: dict[str, frozenset[int]] = {}
        for _ in range(self.count()):
            topic = self.string()
            partitions = frozenset(self.unpack(">i") for _ in range(self.count()))
            result[topic] = result.get(topic, frozenset()) | partitions
        return result


def parse_subscription(data: bytes) -> Subscription:
    try:
        reader = _Reader(data)
        version = reader.unpack(">h")
        if version < 0:
            raise ValueError(f"consumer protocol version {version}")
        topics = tuple(reader.string() for _ in range(reader.count()))
        reader.skip_bytes()  # user data
        owned = reader.partitions() if version >= 1 else {}
        if version >= 2:
            reader.unpack(">i")  # generation id
        rack = reader.nullable_string() if version >= 3 else None
        return Subscription(version, topics, owned, rack)
    except UnicodeDecodeError as exc:
        raise ValueError(str(exc)) from None


def protocol_version(data: bytes) -> int:
    """The version of a subscription blob (the SyncGroup answer uses it), 0 if it has none."""
    return max(struct.unpack_from(">h", data)[0], 0) if len(data) >= 2 else 0


def parse_assignment(data: bytes) -> Assignment:
    if not data:
        return {}
    try:
        reader = _Reader(data)
        reader.unpack(">h")
        return reader.partitions()
    except UnicodeDecodeError as exc:
        raise ValueError(str(exc)) from None


def encode_assignment(assignment: Assignment, version: int) -> bytes:
    """A ConsumerProtocolAssignment (no user data), at the member's version (at most 3)."""
    parts = [struct.pack(">hi", min(version, 3), len(assignment))]
    for topic, partitions in sorted(assignment.items()):
        name = topic.encode("utf-8")
        parts.append(struct.pack(">h", len(name)) + name + struct.pack(">i", len(partitions)))
        parts.append(struct.pack(f">{len(partitions)}i", *sorted(partitions)))
    parts.append(struct.pack(">i", -1))
    return b"".join(parts)
