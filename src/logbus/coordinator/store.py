"""`__consumer_offsets` as the group coordinator's store: its records, written and read back.

An `InternalTopic` (internal_topic.py: creation, acks=all writes, chunked reads) with the record
format of records.py: offsets (OffsetCommitKey/Value) and group metadata (GroupMetadataKey/Value)
as Kafka writes them. The topic is compacted with `offsets.topic.num.partitions` partitions,
`offsets.topic.replication.factor` replicas (capped by the live brokers) and
`offsets.topic.segment.bytes` segments.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from .internal_topic import InternalTopic, TopicSpec
from .records import (
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

if TYPE_CHECKING:
    from ..cluster.metadata import MetadataStore
    from ..cluster.replica_manager import ReplicaManager
    from ..config import BrokerConfig
    from .clock import Clock

TOPIC = "__consumer_offsets"
LOAD_DECODE_STEP = 512

Entry = tuple[OffsetKey | GroupKey, OffsetValue | GroupValue | None]


class OffsetsTopic(InternalTopic):
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, replicas: ReplicaManager,
                 clock: Clock) -> None:
        spec = TopicSpec(TOPIC, config["offsets.topic.num.partitions"], config["offsets.topic.replication.factor"],
                         config["offsets.topic.segment.bytes"])
        super().__init__(spec, metadata, replicas, clock)

    async def write(self, index: int, entries: list[Entry]) -> None:
        """Write `entries` as one batch to partition `index`; raises KafkaApiError."""
        await self.append(index, [encode_entry(k, v) for k, v in entries])

    # ------------------------------------------------------------ reads

    async def read_latest(self, index: int) -> AsyncIterator[list[Entry]]:
        """The last record of each key of partition `index` (a tombstone as `(key, None)`), in chunks.

        The partition is scanned a chunk at a time (`read_batches`) keeping each key's last value
        undecoded (most records of a busy group are overwritten commits), then the survivors are
        decoded `LOAD_DECODE_STEP` at a time; the loop gets a turn between steps, so a big
        partition loads without stalling the broker's other clients.
        """
        latest: dict[bytes, bytes | None] = {}
        async for records in self._read_chunks(index):
            for key, value in records:
                latest[_canonical_key(key)] = value
        items = list(latest.items())
        latest.clear()
        for start in range(0, len(items), LOAD_DECODE_STEP):
            entries: list[Entry] = []
            for key, value in items[start : start + LOAD_DECODE_STEP]:
                try:
                    entry = decode_entry(key, value)
                except (RecordFormatError, UnicodeDecodeError):
                    continue
                if entry is not None:
                    entries.append(entry)
            yield entries
            await asyncio.sleep(0)

    async def _read_chunks(self, index: int) -> AsyncIterator[list[tuple[bytes, bytes | None]]]:
        """The keyed records of partition `index` in offset order, one chunk of log at a time."""
        async for batches in self.read_batches(index):
            yield [record for _header, records in batches for record in records]


def _canonical_key(key: bytes) -> bytes:
    """OffsetCommitKey v0 and v1 have one layout: the same offset under either version is one key."""
    return b"\x00\x01" + key[2:] if key[:2] == b"\x00\x00" else key


def encode_entry(key: OffsetKey | GroupKey, value: OffsetValue | GroupValue | None) -> tuple[bytes, bytes | None]:
    if isinstance(key, OffsetKey):
        return encode_offset_key(key), None if value is None else encode_offset_value(value)
    return encode_group_key(key), None if value is None else encode_group_value(value)


def decode_entry(key_bytes: bytes, value_bytes: bytes | None) -> Entry | None:
    key = decode_key(key_bytes)
    if key is None:
        return None
    if value_bytes is None:
        return key, None
    if isinstance(key, OffsetKey):
        return key, decode_offset_value(value_bytes)
    return key, decode_group_value(value_bytes)
