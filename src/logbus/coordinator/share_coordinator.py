"""The share coordinator (KIP-932): share-partition state kept in `__share_group_state`.

A share-partition (group, topic id, partition) lives on partition
`abs(hash("group:topicId:partition")) % share.coordinator.state.topic.num.partitions` of the
topic; the broker leading that partition is its share coordinator (FindCoordinator key type 2).
Share-partition leaders talk to it through the persister (cluster/share_persister.py) with the
RPCs InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState and ReadShareGroupStateSummary, as Kafka's brokers do.

Each change is written before it counts, acks=all, then applied to memory: a write the ISR did
not take changes nothing (its caller gets the error and its state is as before). A write is a
ShareUpdate record holding only the batches written; every
`share.coordinator.snapshot.update.records.per.snapshot` updates (and on initialization) a
ShareSnapshot holding the whole state is written instead, so a load replays one snapshot and a
few updates per share-partition (`ShareStates.replay`). Writes of one `__share_group_state`
partition are serialized. Fencing, as Kafka's shard: a write or read from a leader epoch older
than the one recorded gets FENCED_LEADER_EPOCH, a write of an older state epoch
FENCED_STATE_EPOCH; a read from a newer leader epoch records that epoch first, so the previous
leader's late writes are refused.

The topic is created on first use like the other internal topics, but with Kafka's
cleanup.policy=delete (a share-partition's state is a snapshot plus the updates after it: keeping
only the latest record per key would lose updates) and retention.ms=-1. As Kafka's, the
coordinator prunes it instead: every `share.coordinator.state.topic.prune.interval.ms` it
deletes (DeleteRecords, so followers follow) what lies below the oldest latest snapshot of the
partition's share-partitions (`RedundantOffsets`): every record below it was overridden.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..errors import KafkaApiError
from .internal_topic import WRITE_TIMEOUT_S, InternalTopic, Record, TopicSpec
from .partition_loads import PartitionLoads
from .records import RecordFormatError, coordinator_partition
from .share_records import (
    SNAPSHOT,
    UPDATE,
    ShareKey,
    ShareState,
    ShareUpdate,
    StateBatch,
    check_batches,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_key,
    encode_snapshot,
    encode_update,
)

if TYPE_CHECKING:
    from ..cluster.metadata import MetadataStore
    from ..cluster.partition import Partition
    from ..cluster.replica_manager import ReplicaManager
    from ..config import BrokerConfig
    from .clock import Clock, Timer

log = logging.getLogger(__name__)

TOPIC = "__share_group_state"


class ShareStateTopic(InternalTopic):
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, replicas: ReplicaManager,
                 clock: Clock) -> None:
        spec = TopicSpec(TOPIC, config["share.coordinator.state.topic.num.partitions"],
                         config["share.coordinator.state.topic.replication.factor"],
                         config["share.coordinator.state.topic.segment.bytes"],
                         config["share.coordinator.state.topic.min.isr"],
                         cleanup=(("cleanup.policy", "delete"), ("retention.ms", "-1")))
        super().__init__(spec, metadata, replicas, clock)


@dataclass(frozen=True, slots=True)
class Change:
    """What one write makes of a share-partition: the record to append and the state after it."""

    record: Record
    state: ShareState | None  # None: deleted
    snapshot: bool = False


class RedundantOffsets:
    """Kafka's ShareCoordinatorOffsetsManager for one `__share_group_state` partition: the offset of
    each share-partition's latest snapshot (or tombstone). A snapshot holds its share-partition's
    whole state, so only the updates after it are needed besides it: every record below the
    lowest of these offsets is redundant. A tombstone counts once, when written, then its
    share-partition needs nothing more."""

    def __init__(self) -> None:
        self.snapshots: dict[ShareKey, int] = {}
        self.lowest_needed = -1  # -1: nothing recorded yet

    def record(self, key: ShareKey, offset: int, deleted: bool) -> None:
        """`key`'s snapshot (or tombstone, when `deleted`) was written at `offset`; offsets come in
        log order."""
        self.snapshots[key] = offset
        self.lowest_needed = min(self.snapshots.values())
        if deleted:
            del self.snapshots[key]

    def prune_below(self) -> int | None:
        """The offset below which every record is redundant (None: none is)."""
        return self.lowest_needed if self.lowest_needed > 0 else None


class ShareStates:
    """The share-partitions' states of the `__share_group_state` partitions read here (sans-I/O):
    a load replays records into it, a request plans a `Change` and applies it once written."""

    def __init__(self, updates_per_snapshot: int) -> None:
        self.updates_per_snapshot = updates_per_snapshot
        self.states: dict[ShareKey, ShareState] = {}
        self.updates: dict[ShareKey, int] = {}  # update records since the key's snapshot

    def replay(self, key_bytes: bytes, value: bytes | None) -> ShareKey | None:
        """One record of the topic, in log order; records that do not decode are skipped. Returns
        the share-partition whose snapshot (or snapshot tombstone) the record is, else None."""
        try:
            kind, key = decode_key(key_bytes)
            if value is None:
                self.forget(key)
            elif kind == SNAPSHOT:
                self.states[key], self.updates[key] = decode_snapshot(value), 0
            elif key in self.states:
                update = decode_update(value)
                self.states[key] = self.states[key].updated(update.start_offset, update.leader_epoch, update.batches)
                self.updates[key] += 1
        except (RecordFormatError, UnicodeDecodeError) as exc:
            log.warning("skipping a %s record that does not decode: %s", TOPIC, exc)
            return None
        return key if kind == SNAPSHOT else None

    def forget(self, key: ShareKey) -> None:
        self.states.pop(key, None)
        self.updates.pop(key, None)

    def apply(self, key: ShareKey, change: Change) -> None:
        if change.state is None:
            self.forget(key)
        elif change.snapshot:
            self.states[key], self.updates[key] = change.state, 0
        else:
            self.states[key], self.updates[key] = change.state, self.updates.get(key, 0) + 1

    # ---------------------------------------------------------------- planning changes

    def initialize(self, key: ShareKey, state_epoch: int, start_offset: int, now_ms: int) -> Change:
        """A fresh state (InitializeShareGroupState): a snapshot; FENCED_STATE_EPOCH for an older epoch."""
        current = self.states.get(key)
        if current is not None and current.state_epoch > state_epoch:
            raise KafkaApiError(ErrorCode.fenced_state_epoch, "The state epoch is older than the share-partition's.")
        snapshot_epoch = current.snapshot_epoch + 1 if current is not None else 0
        return self._snapshot(key, ShareState(state_epoch, -1, start_offset, (), snapshot_epoch, now_ms, now_ms))

    def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: tuple[StateBatch, ...], now_ms: int) -> Change:
        """A leader's write (WriteShareGroupState): an update, or a snapshot when it is time."""
        try:
            check_batches(batches)
        except RecordFormatError as exc:
            raise KafkaApiError(ErrorCode.invalid_request, str(exc)) from None
        current = self.states.get(key)
        if current is None:
            raise KafkaApiError(ErrorCode.unknown_topic_or_partition, "The share-partition is not initialized.")
        if leader_epoch != -1 and current.leader_epoch > leader_epoch:
            raise KafkaApiError(ErrorCode.fenced_leader_epoch, "The leader epoch is older than the share-partition's.")
        if state_epoch != -1 and current.state_epoch > state_epoch:
            raise KafkaApiError(ErrorCode.fenced_state_epoch, "The state epoch is older than the share-partition's.")
        state = current.updated(start_offset, leader_epoch, batches)
        if self.updates.get(key, 0) + 1 >= self.updates_per_snapshot:
            snapshot = replace(state, snapshot_epoch=current.snapshot_epoch + 1, write_timestamp=now_ms)
            return self._snapshot(key, snapshot)
        update = ShareUpdate(current.snapshot_epoch, state.leader_epoch, start_offset, batches)
        return Change((encode_key(UPDATE, key), encode_update(update)), replace(state, write_timestamp=now_ms))

    def read(self, key: ShareKey, leader_epoch: int) -> Change | None:
        """Check a leader's read (ReadShareGroupState); the update recording its newer leader epoch,
        if it is newer."""
        current = self.states.get(key)
        if current is None or leader_epoch == -1 or leader_epoch == current.leader_epoch:
            return None
        if leader_epoch < current.leader_epoch:
            raise KafkaApiError(ErrorCode.fenced_leader_epoch, "The leader epoch is older than the share-partition's.")
        return self.write(key, -1, leader_epoch, -1, (), current.write_timestamp)

    def delete(self, key: ShareKey) -> Change:
        """DeleteShareGroupState: a tombstone (the update key's tombstone follows in the same batch)."""
        return Change((encode_key(SNAPSHOT, key), None), None)

    @staticmethod
    def _snapshot(key: ShareKey, state: ShareState) -> Change:
        return Change((encode_key(SNAPSHOT, key), encode_snapshot(state)), state, snapshot=True)


class ShareCoordinator:
    def __init__(self, store: ShareStateTopic, clock: Clock, updates_per_snapshot: int,
                 prune_interval_ms: int = 300_000) -> None:
        self.store = store
        self.clock = clock
        self.shares = ShareStates(updates_per_snapshot)
        self.redundant: dict[int, RedundantOffsets] = {}  # per partition served here
        self.prune_interval_ms = prune_interval_ms
        self._prune_timer: Timer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writing: dict[int, asyncio.Lock] = {}
        self.loads = PartitionLoads(store, self._load, self._spawn)

    def start(self) -> None:
        self.loads.start()
        self._schedule_prune()

    def stop(self) -> None:
        self.loads.stop()
        if self._prune_timer is not None:
            self._prune_timer.cancel()
        for task in self._tasks:
            task.cancel()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def partition_for(self, coordinator_key: str) -> int:
        return coordinator_partition(coordinator_key, self.store.partition_count())

    def on_leadership(self, partition: Partition, leads: bool) -> None:
        """A `__share_group_state` partition this broker stopped leading: its states leave memory;
        one it leads now is loaded at once."""
        if partition.topic != TOPIC:
            return
        index = partition.index
        self.loads.unload(index)
        self._forget_partition(index)
        if leads:
            self.loads.ensure_loaded(index)

    def _forget_partition(self, index: int) -> None:
        for key in [k for k in self.shares.states if self._index(k) == index]:
            self.shares.forget(key)
        self.redundant.pop(index, None)

    async def _load(self, index: int, _epoch: int) -> None:
        """Replay the partition; a snapshot counts at its batch's base offset (each change is a
        batch of its own, so the two are one; for a batch of other writers' keeping the whole
        batch is the safe side)."""
        self._forget_partition(index)
        redundant = self.redundant[index] = RedundantOffsets()
        async for batches in self.store.read_batches(index):
            for header, records, _marker in batches:
                for key, value in records:
                    snapshot_of = self.shares.replay(key, value)
                    if snapshot_of is not None:
                        redundant.record(snapshot_of, header.base_offset, value is None)
        log.info("loaded %s-%d: %d share-partitions in total", TOPIC, index, len(self.shares.states))

    def _index(self, key: ShareKey) -> int:
        return self.partition_for(key.coordinator_key())

    def _serving(self, key: ShareKey) -> int:
        """The partition of `key`, once this broker serves it; else KafkaApiError (NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE)."""
        index = self._index(key)
        self.loads.check(index)
        return index

    async def _commit(self, key: ShareKey, plan: Callable[[], Change | None]) -> ShareState | None:
        """Plan a change under the partition's write lock, write it (acks=all), then apply it;
        shielded, so that a caller going away never leaves a record written and not applied."""
        index = self._serving(key)
        task = asyncio.get_running_loop().create_task(self._write(index, key, plan))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda done: done.cancelled() or done.exception())  # (its caller may be gone)
        return await asyncio.shield(task)

    async def _write(self, index: int, key: ShareKey, plan: Callable[[], Change | None]) -> ShareState | None:
        async with self._writing.setdefault(index, asyncio.Lock()):
            index = self._serving(key)  # (leadership may have moved while waiting)
            change = plan()
            if change is None:
                return self.shares.states.get(key)
            records = [change.record]
            if change.state is None:
                records.append((encode_key(UPDATE, key), None))
            offset = await self.store.append(index, records)
            if self.loads.epochs.get(index) is not None:
                self.shares.apply(key, change)
                if change.snapshot or change.state is None:
                    self.redundant.setdefault(index, RedundantOffsets()).record(key, offset, change.state is None)
            return change.state

    # ---------------------------------------------------------------- pruning

    def _schedule_prune(self) -> None:
        self._prune_timer = self.clock.call_later(self.prune_interval_ms, lambda: self._spawn(self._prune()))

    async def _prune(self) -> None:
        """Kafka's record pruning job: delete the redundant prefix of every partition served here."""
        try:
            for index, redundant in list(self.redundant.items()):
                below = redundant.prune_below()
                if below is not None and self.loads.epochs.get(index) is not None:
                    try:
                        await self._delete_below(index, below)
                    except (KafkaApiError, OSError) as exc:  # (the disk): the next round tries again
                        log.warning("cannot prune %s-%d: %s", TOPIC, index, exc)
        finally:
            self._schedule_prune()

    async def _delete_below(self, index: int, offset: int) -> None:
        partition = self.store.partition(index)
        if partition is None or partition.log.log_start_offset >= offset:
            return
        replicas = self.store.replicas
        try:
            deleted = replicas.delete_records(TOPIC, index, offset)
            await replicas.wait_for_low_watermark(deleted, WRITE_TIMEOUT_S)
        except KafkaApiError as exc:
            log.info("cannot prune %s-%d below %d yet: %s", TOPIC, index, offset, exc.code.name)
            return
        log.debug("pruned %s-%d below %d", TOPIC, index, deleted.low_watermark)

    # ---------------------------------------------------------------- the RPCs

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None:
        await self._commit(key, lambda: self.shares.initialize(key, state_epoch, start_offset, self.clock.now_ms()))

    async def read(self, key: ShareKey, leader_epoch: int) -> ShareState | None:
        """The share-partition's state (None: never initialized), once its leader epoch is recorded."""
        return await self._commit(key, lambda: self.shares.read(key, leader_epoch))

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: tuple[StateBatch, ...]) -> None:
        await self._commit(key, lambda: self.shares.write(key, state_epoch, leader_epoch, start_offset, batches,
                                                          self.clock.now_ms()))

    async def delete(self, key: ShareKey) -> None:
        await self._commit(key, lambda: self.shares.delete(key) if key in self.shares.states else None)

    def summary(self, key: ShareKey) -> ShareState | None:
        """ReadShareGroupStateSummary: the state as it is, without fencing anyone."""
        self._serving(key)
        return self.shares.states.get(key)
