"""A follower's Fetch v12 request, written field by field, sans I/O.

A follower sends one fetch per batch it replicates; kio's generic entity writers (a typed
object per partition and topic, then a schema walk with a type check per field) cost ~200 us
of CPU for such a request, as much as checking the CRC of the megabyte it brings. This writes
the same bytes with `struct` in a fraction of that: header v2 (client id a legacy nullable
string, then no tagged fields), then the v12 body, with its compact arrays and strings and no
tagged fields (ClusterId left null). tests/test_replica_fetch_encoding.py checks it byte for
byte against kio's writers.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

FETCH_KEY, FETCH_VERSION = 1, 12
_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
# replica id, max wait ms, min bytes, max bytes, isolation level, session id, session epoch
_BODY = struct.Struct(">iiiibii")
# partition, current leader epoch, fetch offset, last fetched epoch, log start offset, max bytes,
# and the partition's empty tagged fields
_PARTITION = struct.Struct(">iiqiqiB")
_INT32 = struct.Struct(">i")
_NO_TAGS = b"\x00"
_EMPTY_RACK = b"\x01"  # compact string ""


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """What a follower's fetch tells the leader of one partition."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    """The fields of a follower's fetch (isolation level 0, rack id "", no cluster id)."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    session_id: int
    session_epoch: int
    topics: Sequence[tuple[str, Sequence[FetchPosition]]]
    forgotten: Sequence[tuple[str, Sequence[int]]] = ()


def encode_replica_fetch(correlation_id: int, client_id: str, fetch: ReplicaFetch) -> bytes:
    """The request frame (size prefix included)."""
    client = client_id.encode()
    parts = [_HEADER.pack(FETCH_KEY, FETCH_VERSION, correlation_id, len(client)), client, _NO_TAGS,
             _BODY.pack(fetch.replica_id, fetch.max_wait_ms, fetch.min_bytes, fetch.max_bytes, 0,
                        fetch.session_id, fetch.session_epoch),
             _uvarint(len(fetch.topics) + 1)]
    for topic, positions in fetch.topics:
        parts += (_compact_string(topic), _uvarint(len(positions) + 1))
        parts += (_PARTITION.pack(p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch,
                                  p.log_start_offset, p.max_bytes, 0) for p in positions)
        parts.append(_NO_TAGS)
    parts.append(_uvarint(len(fetch.forgotten) + 1))
    for topic, indexes in fetch.forgotten:
        parts += (_compact_string(topic), _uvarint(len(indexes) + 1), *map(_INT32.pack, indexes), _NO_TAGS)
    parts += (_EMPTY_RACK, _NO_TAGS)
    payload = b"".join(parts)
    return _INT32.pack(len(payload)) + payload


def _compact_string(value: str) -> bytes:
    encoded = value.encode()
    return _uvarint(len(encoded) + 1) + encoded


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# ---------------------------------------------------------------------- the leader's answer

_ANSWER_TOP = struct.Struct(">ihi")  # throttle time ms, error code, session id
_PARTITION_HEAD = struct.Struct(">ihqqq")  # index, error code, high watermark, last stable offset, log start
_ABORTED = struct.Struct(">qqB")  # producer id, first offset, no tagged fields
_EPOCH_END_OFFSET = struct.Struct(">iqB")  # tag 0: diverging epoch, end offset
_LEADER_ID_AND_EPOCH = struct.Struct(">iiB")  # tag 1: current leader, its epoch
_SNAPSHOT_ID = struct.Struct(">qiB")  # tag 2: end offset, epoch
_NULL = b"\x00"  # a compact nullable array or records: null


def encode_replica_fetch_response(response: Any) -> list[bytes | memoryview | Any]:
    """The body of a Fetch v12 response (a kio `FetchResponse` of v12), as chunks: record sets
    (bytes, views or file regions) are chunks of their own, never copied. What kio's writers
    make of it, field by field, without their per-field type checks and per-entity buffers."""
    chunks: list[Any] = [_ANSWER_TOP.pack(int(response.throttle_time.total_seconds() * 1000),
                                          response.error_code, response.session_id),
                         _uvarint(len(response.responses) + 1)]
    for topic in response.responses:
        chunks += (_compact_string(topic.topic), _uvarint(len(topic.partitions) + 1))
        for answer in topic.partitions:
            _encode_partition(chunks, answer)
        chunks.append(_NO_TAGS)
    chunks.append(_NO_TAGS)
    return _joined_around_records(chunks)


def _encode_partition(chunks: list[Any], answer: Any) -> None:
    head = [_PARTITION_HEAD.pack(answer.partition_index, answer.error_code, answer.high_watermark,
                                 answer.last_stable_offset, answer.log_start_offset)]
    aborted = answer.aborted_transactions
    if aborted is None:
        head.append(_NULL)
    else:
        head.append(_uvarint(len(aborted) + 1))
        head += (_ABORTED.pack(a.producer_id, a.first_offset, 0) for a in aborted)
    head.append(_INT32.pack(answer.preferred_read_replica))
    records = answer.records
    if records is None:
        head.append(_NULL)
        chunks += head
    else:
        head.append(_uvarint(len(records) + 1))
        chunks += head
        if len(records):
            chunks.append(records)
    chunks.append(_partition_tags(answer))


def _partition_tags(answer: Any) -> bytes:
    """PartitionData's tagged fields: those not at their defaults, by tag."""
    tags = []
    diverging, leader, snapshot = answer.diverging_epoch, answer.current_leader, answer.snapshot_id
    if diverging.epoch != -1 or diverging.end_offset != -1:
        tags.append((0, _EPOCH_END_OFFSET.pack(diverging.epoch, diverging.end_offset, 0)))
    if leader.leader_id != -1 or leader.leader_epoch != -1:
        tags.append((1, _LEADER_ID_AND_EPOCH.pack(leader.leader_id, leader.leader_epoch, 0)))
    if snapshot.end_offset != -1 or snapshot.epoch != -1:
        tags.append((2, _SNAPSHOT_ID.pack(snapshot.end_offset, snapshot.epoch, 0)))
    if not tags:
        return _NO_TAGS
    return _uvarint(len(tags)) + b"".join(_uvarint(tag) + _uvarint(len(value)) + value for tag, value in tags)


def _joined_around_records(chunks: list[Any]) -> list[Any]:
    """The small chunks between record sets joined, so that a response is a few writes."""
    out: list[Any] = []
    small: list[bytes] = []
    for chunk in chunks:
        if isinstance(chunk, bytes):
            small.append(chunk)
            continue
        if small:
            out.append(b"".join(small))
            small = []
        out.append(chunk)
    if small:
        out.append(b"".join(small))
    return out


# ---------------------------------------------------------------------- the answer, as the follower reads it

_CORRELATION_ID = struct.Struct(">i")
_PARTITION_READ = struct.Struct(">ihqqq")  # index, error code, high watermark, last stable offset, log start
_EPOCH_END = struct.Struct(">iq")
_INT16 = struct.Struct(">h")
_INT64_PAIR = struct.Struct(">qq")


class MalformedAnswer(Exception):
    """A Fetch v12 response that does not decode (truncated, a bad length or count, bad UTF-8)."""


class EpochEnd(NamedTuple):
    epoch: int = -1
    end_offset: int = -1


@dataclass(slots=True)
class FetchedPartition:
    partition_index: int
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: memoryview | None  # a view of the response frame: not copied
    diverging_epoch: EpochEnd = EpochEnd()


@dataclass(slots=True)
class FetchedTopic:
    topic: str
    partitions: list[FetchedPartition]


@dataclass(slots=True)
class FetchAnswer:
    correlation_id: int
    error_code: ErrorCode
    session_id: int
    responses: list[FetchedTopic]


def decode_replica_fetch_response(frame: bytes) -> FetchAnswer:
    """A Fetch v12 response frame (header v1 included, its size not), as a follower reads it:
    what the fetcher uses of each partition, the records a view of `frame` (kio's reader copied
    each record set, a megabyte per replicated batch). Every length and count is checked against
    the bytes there are; MalformedAnswer otherwise. Aborted transactions, the preferred read
    replica and tagged fields other than the diverging epoch are skipped: a follower reads them
    not (its leader sends none)."""
    try:
        return _Reader(frame).answer()
    except (struct.error, ValueError, IndexError) as exc:  # ValueError: bad UTF-8, an unknown error code
        raise MalformedAnswer(str(exc)) from None


class _Reader:
    __slots__ = ("view", "position")

    def __init__(self, frame: bytes) -> None:
        self.view = memoryview(frame)
        self.position = 0

    def answer(self) -> FetchAnswer:
        correlation_id = self._unpack(_CORRELATION_ID)[0]
        self._skip_tags()
        _throttle_ms, error_code, session_id = self._unpack(_ANSWER_TOP)
        topics = [self._topic() for _ in range(self._count())]
        self._skip_tags()
        return FetchAnswer(correlation_id, ErrorCode(error_code), session_id, topics)

    def _topic(self) -> FetchedTopic:
        name = self._string()
        partitions = [self._partition() for _ in range(self._count())]
        self._skip_tags()
        return FetchedTopic(name, partitions)

    def _partition(self) -> FetchedPartition:
        index, error_code, high_watermark, last_stable, log_start = self._unpack(_PARTITION_READ)
        for _ in range(self._count(nullable=True)):  # aborted transactions: producer id, first offset
            self._unpack(_INT64_PAIR)
            self._skip_tags()
        self._unpack(_INT32)  # preferred read replica
        size = self._uvarint() - 1
        records = self._take(size) if size >= 0 else None
        partition = FetchedPartition(index, ErrorCode(error_code), high_watermark, last_stable, log_start, records)
        for tag, value in self._tags():
            if tag == 0:
                partition.diverging_epoch = EpochEnd(*_EPOCH_END.unpack_from(value))
        return partition

    def _unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        values = layout.unpack_from(self.view, self.position)
        self.position += layout.size
        return values

    def _take(self, size: int) -> memoryview:
        end = self.position + size
        if size < 0 or end > len(self.view):
            raise MalformedAnswer(f"{size} bytes at {self.position}, past the end of the answer")
        taken, self.position = self.view[self.position:end], end
        return taken

    def _uvarint(self) -> int:
        value = 0
        for shift in range(0, 35, 7):
            byte = self.view[self.position]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
        raise MalformedAnswer("unsigned varint longer than 5 bytes")

    def _count(self, nullable: bool = False) -> int:
        """A compact array's length, at most the bytes left (every item takes one); a null one
        (where `nullable`) has none."""
        count = self._uvarint() - 1
        if count == -1 and nullable:
            return 0
        if not 0 <= count <= len(self.view) - self.position:
            raise MalformedAnswer(f"array of {count} items at {self.position}")
        return count

    def _string(self) -> str:
        size = self._uvarint() - 1
        if size < 0:
            raise MalformedAnswer(f"null string at {self.position}")
        return str(self._take(size), "utf-8")

    def _tags(self) -> list[tuple[int, memoryview]]:
        """Tagged fields: a count (not one more, as arrays), then tag, size and value each."""
        count = self._uvarint()
        if count > len(self.view) - self.position:
            raise MalformedAnswer(f"{count} tagged fields at {self.position}")
        return [(self._uvarint(), self._take(self._uvarint())) for _ in range(count)]

    def _skip_tags(self) -> None:
        self._tags()
