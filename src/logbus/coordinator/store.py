"""`__consumer_offsets` as the group coordinator's store: its records, written and read back.

An `InternalTopic` (internal_topic.py: creation, acks=all writes, chunked reads) with the record
format of records.py: offsets (OffsetCommitKey/Value) and group metadata (GroupMetadataKey/Value)
as Kafka writes them, consumer_records.py's records of KIP-848 consumer groups and
share_group_records.py's of KIP-932 share groups. The topic is
compacted with `offsets.topic.num.partitions` partitions,
`offsets.topic.replication.factor` replicas (capped by the live brokers) and
`offsets.topic.segment.bytes` segments.

TxnOffsetCommit's offsets are written as one transactional batch of the producer (its id and
epoch, no sequence, as Kafka's coordinator writes them); they count only once that producer's
COMMIT marker follows in the partition. Reading back replays the log as Kafka's loader does
(`LogReplay`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, NamedTuple

from ..protocol.records import NO_PRODUCER_ID, BatchHeader, EndTxnMarker
from .consumer_records import (
    ConsumerGroupKey,
    ConsumerGroupValue,
    decode_consumer_key,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
    is_consumer_group_key,
)
from .internal_topic import InternalTopic, ProducerFields, Record, TopicSpec
from .records import (
    OFFSET_KEY_VERSION,
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from .share_group_records import (
    ShareGroupKey,
    ShareGroupValue,
    decode_share_key,
    decode_share_value,
    encode_share_key,
    encode_share_value,
    is_share_group_key,
)

if TYPE_CHECKING:
    from ..cluster.metadata import MetadataStore
    from ..cluster.replica_manager import ReplicaManager
    from ..config import BrokerConfig
    from .clock import Clock

TOPIC = "__consumer_offsets"
LOAD_DECODE_STEP = 512
OFFSET_KEY_PREFIX = OFFSET_KEY_VERSION.to_bytes(2, "big")

Key = OffsetKey | GroupKey | ConsumerGroupKey | ShareGroupKey
Value = OffsetValue | GroupValue | ConsumerGroupValue | ShareGroupValue
Entry = tuple[Key, Value | None]


class LoadedEntry(NamedTuple):
    """A record as the load leaves it: committed (`producer_id` NO_PRODUCER_ID; a tombstone's value
    is None) or pending in `producer_id`'s open transaction. `record_offset` is its batch's base
    offset."""

    key: Key
    value: Value | None
    record_offset: int
    producer_id: int


class OffsetsTopic(InternalTopic):
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, replicas: ReplicaManager,
                 clock: Clock) -> None:
        spec = TopicSpec(TOPIC, config["offsets.topic.num.partitions"], config["offsets.topic.replication.factor"],
                         config["offsets.topic.segment.bytes"])
        super().__init__(spec, metadata, replicas, clock)

    async def write(self, index: int, entries: list[Entry]) -> int:
        """Write `entries` as one batch to partition `index`; returns its base offset; raises KafkaApiError."""
        return await self.append(index, [encode_entry(k, v) for k, v in entries])

    async def write_transactional(self, index: int, entries: list[Entry], producer: ProducerFields,
                                  on_appended: Callable[[int], None]) -> int:
        """Write `entries` as one batch of `producer`'s transaction (InternalTopic.append tells
        `on_appended` where it went before waiting for the ISR); raises KafkaApiError."""
        return await self.append(index, [encode_entry(k, v) for k, v in entries], producer, on_appended)

    # ------------------------------------------------------------ reads

    async def read_state(self, index: int) -> AsyncIterator[list[LoadedEntry]]:
        """What the records of partition `index` leave (`LogReplay`), a chunk at a time.

        The partition is scanned a chunk at a time (`read_batches`) keeping each key's last value
        undecoded (most records of a busy group are overwritten commits), then the survivors are
        decoded `LOAD_DECODE_STEP` at a time; the loop gets a turn between steps, so a big
        partition loads without stalling the broker's other clients.
        """
        replay = LogReplay()
        async for batches in self.read_batches(index):
            for header, records, marker in batches:
                replay.apply(header, records, marker)
        survivors = replay.survivors()
        del replay  # its undecoded values, held once already by `survivors`
        for start in range(0, len(survivors), LOAD_DECODE_STEP):
            entries = [entry for raw in survivors[start : start + LOAD_DECODE_STEP]
                       if (entry := _decode_loaded(*raw)) is not None]
            yield entries
            await asyncio.sleep(0)


class LogReplay:
    """Kafka's loader over the batches of a partition, in offset order (sans-I/O).

    A plain record is committed at once (the last one of each key wins). An offset in a
    transactional batch is pending in its producer's transaction until that producer's control
    batch: COMMIT makes each of its offsets committed unless a later record committed that
    partition, ABORT drops them; offsets of transactions still open at the end stay pending. A
    plain tombstone also drops the pending offsets of its partition (Kafka's
    OffsetMetadataManager.replay).
    """

    def __init__(self) -> None:
        self.committed: dict[bytes, tuple[bytes | None, int]] = {}
        self.pending: dict[int, dict[bytes, tuple[bytes, int]]] = {}  # producer id -> its open transaction's

    def apply(self, header: BatchHeader, records: list[Record], marker: EndTxnMarker | None) -> None:
        if header.is_control:
            if marker is not None:
                self._end_txn(header.producer_id, marker.commit)
            return
        transactional = header.is_transactional and header.producer_id != NO_PRODUCER_ID
        for raw_key, value in records:
            key = _canonical_key(raw_key)
            if transactional and key.startswith(OFFSET_KEY_PREFIX):
                self._add_pending(header.producer_id, key, value, header.base_offset)
            else:
                self._commit(key, value, header.base_offset)

    def _commit(self, key: bytes, value: bytes | None, offset: int) -> None:
        self.committed[key] = (value, offset)
        if value is None:
            for pending in self.pending.values():
                pending.pop(key, None)

    def _add_pending(self, producer_id: int, key: bytes, value: bytes | None, offset: int) -> None:
        pending = self.pending.setdefault(producer_id, {})
        if value is None:  # not written by TxnOffsetCommit; Kafka's loader drops the partition's pending offset
            pending.pop(key, None)
        else:
            pending[key] = (value, offset)

    def _end_txn(self, producer_id: int, commit: bool) -> None:
        pending = self.pending.pop(producer_id, {})
        if not commit:
            return
        for key, (value, offset) in pending.items():
            current = self.committed.get(key)
            if current is None or current[1] < offset:
                self.committed[key] = (value, offset)

    def survivors(self) -> list[tuple[bytes, bytes | None, int, int]]:
        """(key, value, record offset, producer id): the committed records, then the pending ones."""
        result = [(key, value, offset, NO_PRODUCER_ID) for key, (value, offset) in self.committed.items()]
        for producer_id, pending in self.pending.items():
            result.extend((key, value, offset, producer_id) for key, (value, offset) in pending.items())
        return result


def _decode_loaded(key: bytes, value: bytes | None, record_offset: int, producer_id: int) -> LoadedEntry | None:
    """A record that does not decode is skipped, as before transactions."""
    try:
        entry = decode_entry(key, value)
    except (RecordFormatError, UnicodeDecodeError):
        return None
    return None if entry is None else LoadedEntry(*entry, record_offset, producer_id)


def _canonical_key(key: bytes) -> bytes:
    """OffsetCommitKey v0 and v1 have one layout: the same offset under either version is one key."""
    return OFFSET_KEY_PREFIX + key[2:] if key[:2] == b"\x00\x00" else key


def encode_entry(key: Key, value: Value | None) -> tuple[bytes, bytes | None]:
    if isinstance(key, ConsumerGroupKey):
        return encode_consumer_key(key), None if value is None else encode_consumer_value(value)
    if isinstance(key, ShareGroupKey):
        return encode_share_key(key), None if value is None else encode_share_value(value)
    if isinstance(key, OffsetKey):
        return encode_offset_key(key), None if value is None else encode_offset_value(value)
    return encode_group_key(key), None if value is None else encode_group_value(value)


def decode_entry(key_bytes: bytes, value_bytes: bytes | None) -> Entry | None:
    if is_consumer_group_key(key_bytes):
        consumer_key = decode_consumer_key(key_bytes)
        return consumer_key, None if value_bytes is None else decode_consumer_value(consumer_key.kind, value_bytes)
    if is_share_group_key(key_bytes):
        share_key = decode_share_key(key_bytes)
        return share_key, None if value_bytes is None else decode_share_value(share_key.kind, value_bytes)
    key = decode_key(key_bytes)
    if key is None:
        return None
    if value_bytes is None:
        return key, None
    if isinstance(key, OffsetKey):
        return key, decode_offset_value(value_bytes)
    return key, decode_group_value(value_bytes)
