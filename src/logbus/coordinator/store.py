"""`__consumer_offsets` as the coordinator's durable store: append its records, read them back.

Writes go the normal way data goes: a v2 batch (`records.build_batch`) appended by the
partition as leader, then flushed if the topic's flush policy says so. The topic is created
on first use, as Kafka does (compacted, `offsets.topic.num.partitions` partitions,
`offsets.topic.segment.bytes` segments); the log cleaner keeps the latest record per key.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..cluster.metadata import MetadataWriteError, TopicExistsError
from ..cluster.partition import NotEnoughReplicasError, NotLeaderError, Partition
from ..errors import KafkaApiError
from ..protocol.records import build_batch, iter_headers, iter_records, validate_batches
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

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
COMMIT_TIMEOUT_S = 5.0  # Kafka's offsets.commit.timeout.ms
LOAD_CHUNK_BYTES = 16 * 1024  # load steps of a few ms each on the event loop
LOAD_DECODE_STEP = 512

Entry = tuple[OffsetKey | GroupKey, OffsetValue | GroupValue | None]


class OffsetsTopic:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, replicas: ReplicaManager,
                 clock: Clock) -> None:
        self.metadata = metadata
        self.replicas = replicas
        self.clock = clock
        self.num_partitions: int = config["offsets.topic.num.partitions"]
        self.replication_factor: int = config["offsets.topic.replication.factor"]
        self.segment_bytes: int = config["offsets.topic.segment.bytes"]
        self._creation: asyncio.Task | None = None

    def exists(self) -> bool:
        return self.metadata.topic(TOPIC) is not None

    async def create(self) -> None:
        """Create the topic (idempotent), as Kafka does on the first FindCoordinator.

        One creation task serves every caller, shielded: a client hanging up must not cancel
        it between the metadata write and its announcement (the partitions would never open).
        """
        if self.exists():
            return
        if self._creation is None or self._creation.done():
            self._creation = asyncio.get_running_loop().create_task(self._create())
        failure = await asyncio.shield(self._creation)
        if failure is not None:
            raise KafkaApiError(ErrorCode.coordinator_not_available, failure)

    async def _create(self) -> str | None:
        """Create the topic; on a disk error return why (a caller that hung up must not leak it)."""
        replication = min(self.replication_factor, len(self.metadata.brokers()))
        configs = {
            "cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": str(self.segment_bytes),
        }
        try:
            await self.metadata.create_topic(TOPIC, self.num_partitions, max(replication, 1), configs,
                                                    internal=True)
        except TopicExistsError:
            pass
        except MetadataWriteError as exc:
            log.warning("cannot create %s: %s", TOPIC, exc)
            return f"cannot create {TOPIC}: {exc}"
        return None

    def partition_count(self) -> int:
        topic = self.metadata.topic(TOPIC)
        return len(topic.partitions) if topic is not None else self.num_partitions

    def partition(self, index: int) -> Partition | None:
        return self.replicas.get(TOPIC, index)

    def leader_of(self, index: int) -> int | None:
        topic = self.metadata.topic(TOPIC)
        if topic is None or index >= len(topic.partitions):
            return None
        return topic.partitions[index].leader

    # ------------------------------------------------------------ writes

    async def append(self, index: int, entries: list[Entry]) -> None:
        """Write `entries` as one batch to partition `index`; raises KafkaApiError."""
        partition = self.partition(index)
        if partition is None:
            raise KafkaApiError(ErrorCode.not_coordinator, f"{TOPIC}-{index} is not hosted here")
        data = bytearray(build_batch([encode_entry(k, v) for k, v in entries], self.clock.now_ms()))
        try:
            info = partition.append_as_leader(data, validate_batches(data), acks=-1)
        except NotLeaderError as exc:
            raise KafkaApiError(ErrorCode.not_coordinator, str(exc)) from None
        except NotEnoughReplicasError as exc:
            raise KafkaApiError(ErrorCode.coordinator_not_available, str(exc)) from None
        except OSError as exc:
            raise KafkaApiError(ErrorCode.coordinator_not_available, f"cannot write {TOPIC}: {exc}") from None
        await self.replicas.flush_if_due(partition)
        # acks=all, as Kafka writes offsets: a commit is answered once every in-sync replica has it,
        # so it survives the coordinator's death (offsets.commit.timeout.ms, Kafka's 5 s)
        error = await partition.wait_replicated(info.last_offset + 1, COMMIT_TIMEOUT_S)
        if error == ErrorCode.not_leader_or_follower:
            raise KafkaApiError(ErrorCode.not_coordinator, f"{TOPIC}-{index} changed leader")
        if error is not None:
            raise KafkaApiError(ErrorCode.coordinator_not_available, f"{TOPIC}-{index}: {error.name}")

    # ------------------------------------------------------------ reads

    def is_empty(self, index: int) -> bool:
        partition = self.partition(index)
        return partition is None or partition.log.log_start_offset >= partition.log.log_end_offset

    async def read_latest(self, index: int) -> AsyncIterator[list[Entry]]:
        """The last record of each key of partition `index` (a tombstone as `(key, None)`), in chunks.

        The partition is scanned `LOAD_CHUNK_BYTES` at a time keeping each key's last value
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
        partition = self.partition(index)
        if partition is None:
            return
        offset = partition.log.log_start_offset
        end = partition.log.log_end_offset
        while offset < end:
            fetched = partition.read(offset, LOAD_CHUNK_BYTES, committed_only=False)
            if fetched.slice is None:
                return
            data = fetched.slice.read()
            start = offset
            records: list[tuple[bytes, bytes | None]] = []
            for header in iter_headers(data):
                if not header.is_control:
                    records.extend((r.key, r.value) for r in iter_records(data, header) if r.key is not None)
                offset = header.next_offset
            if offset == start:  # nothing whole was read: a damaged tail; stop there
                return
            yield records
            await asyncio.sleep(0)


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
