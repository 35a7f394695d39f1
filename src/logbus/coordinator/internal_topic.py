"""An internal topic as a coordinator's durable store: `__consumer_offsets`, `__transaction_state`.

Writes go the normal way data goes: a v2 batch (`records.build_batch`) appended through the
replica manager's one append pipeline (`ReplicaManager.append_records`: as leader, flushed if
the topic's flush policy says so), and answered once every in-sync replica has it (acks=all,
as Kafka writes its coordinators' records), so a write survives the coordinator's death. The
topic is created on first use, as Kafka does (compacted, with the partitions, replication and
segment size its keys give; `__share_group_state` is not compacted but pruned: see
share_coordinator.py); the log cleaner keeps the latest record per key. Reads walk a
partition a chunk at a time, handing the event loop back between chunks, so loading a big
partition does not stall the broker's clients.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..cluster.appends import ACKS_ALL, Batches
from ..cluster.metadata import MetadataWriteError, TopicExistsError
from ..cluster.partition import Partition
from ..errors import KafkaApiError
from ..protocol.records import (
    TRANSACTIONAL_BIT,
    BatchHeader,
    EndTxnMarker,
    build_batch,
    iter_headers,
    iter_records,
    read_end_txn_marker,
    validate_batches,
)

if TYPE_CHECKING:
    from ..cluster.metadata import MetadataStore
    from ..cluster.replica_manager import ReplicaManager
    from .clock import Clock

log = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 5.0  # Kafka's offsets.commit.timeout.ms and transaction's request timeout
LOAD_CHUNK_BYTES = 16 * 1024  # load steps of a few ms each on the event loop

Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)
StoredBatch = tuple[BatchHeader, list[Record], EndTxnMarker | None]  # the marker of a control batch


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """How an internal topic is created (Kafka's `<topic>.num.partitions`-style keys)."""

    name: str
    num_partitions: int
    replication_factor: int  # capped by the live brokers at creation, as Kafka does
    segment_bytes: int
    min_insync_replicas: int | None = None  # also capped by the replicas it gets
    cleanup: tuple[tuple[str, str], ...] = (("cleanup.policy", "compact"),)  # its configs besides those


@dataclass(frozen=True, slots=True)
class ProducerFields:
    """A transactional write's producer (TxnOffsetCommit's offsets are part of a transaction)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int = -1


class InternalTopic:
    def __init__(self, spec: TopicSpec, metadata: MetadataStore, replicas: ReplicaManager, clock: Clock) -> None:
        self.spec = spec
        self.name = spec.name
        self.metadata = metadata
        self.replicas = replicas
        self.clock = clock
        self._creation: asyncio.Task | None = None

    def exists(self) -> bool:
        return self.metadata.topic(self.name) is not None

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
        replication = max(min(self.spec.replication_factor, len(self.metadata.brokers())), 1)
        configs = {
            **dict(self.spec.cleanup), "compression.type": "producer", "segment.bytes": str(self.spec.segment_bytes),
        }
        if self.spec.min_insync_replicas is not None:
            configs["min.insync.replicas"] = str(min(self.spec.min_insync_replicas, replication))
        try:
            await self.metadata.create_topic(self.name, self.spec.num_partitions, replication, configs, internal=True)
            await self.replicas.wait_opened(self.name)  # its replicas here are served once a coordinator is named
        except TopicExistsError:
            pass
        except MetadataWriteError as exc:
            log.warning("cannot create %s: %s", self.name, exc)
            return f"cannot create {self.name}: {exc}"
        return None

    def partition_count(self) -> int:
        topic = self.metadata.topic(self.name)
        return len(topic.partitions) if topic is not None else self.spec.num_partitions

    def partition(self, index: int) -> Partition | None:
        return self.replicas.get(self.name, index)

    def leader_of(self, index: int) -> int | None:
        topic = self.metadata.topic(self.name)
        if topic is None or index >= len(topic.partitions):
            return None
        return topic.partitions[index].leader

    def is_empty(self, index: int) -> bool:
        partition = self.partition(index)
        return partition is None or partition.log.log_start_offset >= partition.log.log_end_offset

    # ------------------------------------------------------------ writes

    async def append(self, index: int, records: list[Record], producer: ProducerFields | None = None,
                     on_appended: Callable[[int], None] | None = None) -> int:
        """Write `records` as one batch to partition `index` and wait for the ISR; returns the batch's
        base offset. `on_appended(base offset)` runs as soon as the batch is in the leader's log,
        before the wait, so that nothing written after it (a transaction marker) can find the
        caller's state without it. Raises KafkaApiError (NOT_COORDINATOR when this broker no longer
        leads the partition; INVALID_PRODUCER_EPOCH for a fenced producer's transactional batch)."""
        if self.partition(index) is None:
            raise KafkaApiError(ErrorCode.not_coordinator, f"{self.name}-{index} is not hosted here")
        data = bytearray(self._batch(records, producer))
        try:
            appended = await self.replicas.append_records(
                self.name, index, Batches(data, validate_batches(data)), ACKS_ALL,
                on_appended=None if on_appended is None else lambda info: on_appended(info.base_offset),
            )
        except KafkaApiError as exc:
            raise _coordinator_error(exc.code, f"cannot write {self.name}-{index}: {exc}") from None
        try:
            await self.replicas.wait_for_replicas(appended, WRITE_TIMEOUT_S)
        except KafkaApiError as exc:
            raise _coordinator_error(exc.code, f"{self.name}-{index}: {exc.code.name}") from None
        return appended.info.base_offset

    def _batch(self, records: list[Record], producer: ProducerFields | None) -> bytes:
        if producer is None:
            return build_batch(records, self.clock.now_ms())
        return build_batch(records, self.clock.now_ms(), producer_id=producer.producer_id,
                           producer_epoch=producer.producer_epoch, base_sequence=producer.base_sequence,
                           attributes=TRANSACTIONAL_BIT)

    # ------------------------------------------------------------ reads

    async def read_batches(self, index: int) -> AsyncIterator[list[StoredBatch]]:
        """The batches of partition `index` in offset order with their keyed records, one chunk of
        log at a time; a control batch has no records but its COMMIT or ABORT marker (None for
        other batches, or a control record that is neither)."""
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
            batches: list[StoredBatch] = []
            for header in iter_headers(data):
                if header.is_control:
                    batches.append((header, [], read_end_txn_marker(data, header)))
                else:
                    batches.append((header, [(r.key, r.value) for r in iter_records(data, header)
                                             if r.key is not None], None))
                offset = header.next_offset
            if offset == start:  # nothing whole was read: a damaged tail; stop there
                return
            yield batches
            await asyncio.sleep(0)


def _coordinator_error(code: ErrorCode, message: str) -> KafkaApiError:
    """A failed write as its coordinator answers it: NOT_COORDINATOR when this broker no longer
    leads the partition, INVALID_PRODUCER_EPOCH for a fenced producer, else
    COORDINATOR_NOT_AVAILABLE (too few in-sync replicas, a timeout, the disk), which clients retry."""
    if code == ErrorCode.not_leader_or_follower:
        return KafkaApiError(ErrorCode.not_coordinator, message)
    if code == ErrorCode.invalid_producer_epoch:
        return KafkaApiError(code, message)
    return KafkaApiError(ErrorCode.coordinator_not_available, message)
