"""The share-partitions a leader keeps (KIP-932): one `SharePartition` per share group and partition.

A share-partition is made on the first ShareFetch of its group for a partition this broker
leads, starting where the group's `share.auto.offset.reset` says (latest: the high watermark,
as Kafka's default; earliest: the log start; by_duration:<ISO-8601 duration>: the first record
that recent). Its settings are the group's configs (`share.record.lock.duration.ms`) and the
broker's (`group.share.delivery.count.limit`, `group.share.partition.max.record.locks`), read
when it is made.

State is persisted through the share coordinator (`SharePersister`, share_persister.py): a
share-partition is loaded (`load`) from its persisted state before its first acquisition here,
its state initialized at the start offset above when it has none, with this broker's leader
epoch (which fences the previous leader's writes). An acknowledgement is written before it
applies (`acknowledge`: acks=all on `__share_group_state`; a failed write changes nothing and
the member gets its error); records released (lock expired, member left, delivery limit) are
written in the background (`_flush`), as their delivery counts only matter to the delivery limit.
The writes of one share-partition are serialized. A share-partition leaves memory when this
broker stops leading its partition (or the partition is replaced): the new leader reads it back.

`read` runs one acquisition: where to read, the log read, the batches acquired, the bytes cut to
the batches holding acquired records. A group with `share.isolation.level=read_committed` reads
below the last stable offset, and the batches of aborted transactions are archived there, never
acquired (as Kafka's share-partition leader filters them). A fetch that acquired nothing waits on
`wake_on_release` besides the partitions' own data waits: released records (a lock that
expired, a member that left) may be acquired at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ..coordinator.clock import Clock
from ..coordinator.share_records import ShareKey
from ..durations import iso_duration_ms
from ..errors import KafkaApiError
from ..protocol.records import BatchHeader, iter_headers
from .partition import Partition
from .share_partition import AckBatch, AcquiredRange, SharePartition, SharePartitionConfig
from .share_persister import SharePersister

log = logging.getLogger(__name__)

STATE_EPOCH = 0  # the state epoch of a share-partition initialized here (Kafka's first)
STALE = frozenset({ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch, ErrorCode.unknown_topic_or_partition})


@dataclass(frozen=True, slots=True)
class ShareGroupReadSettings:
    """What a share-partition of a group is made with (the group's configs, the broker's limits)."""

    config: SharePartitionConfig
    auto_offset_reset: str = "latest"
    read_committed: bool = False


@dataclass(frozen=True, slots=True)
class Acquired:
    """One share-partition's part of a ShareFetch answer."""

    records: bytes
    ranges: list[AcquiredRange]


@dataclass(eq=False, slots=True)
class _Held:
    """A share-partition in memory: its partition (this leadership's), where it is persisted, the
    epochs it writes with, and the lock that serializes its writes."""

    partition: Partition
    share: SharePartition
    key: ShareKey
    state_epoch: int
    leader_epoch: int
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    flushing: bool = False


class SharePartitions:
    def __init__(self, clock: Clock, settings: Callable[[str], ShareGroupReadSettings],
                 persister: SharePersister, topic_id: Callable[[str], uuid.UUID | None]) -> None:
        self.clock = clock
        self.settings = settings
        self.persister = persister
        self.topic_id = topic_id
        self._held_by_name: dict[tuple[str, str, int], _Held] = {}
        self._loading: dict[tuple[str, str, int], asyncio.Task[_Held]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._waiters: set[asyncio.Future[None]] = set()

    def loaded_shares(self) -> Iterator[tuple[str, Partition, SharePartition]]:
        """(group id, partition, share-partition) of each share-partition in memory here."""
        for (group_id, _, _), held in self._held_by_name.items():
            yield group_id, held.partition, held.share

    def get(self, group_id: str, partition: Partition) -> SharePartition | None:
        held = self._held(group_id, partition)
        return held.share if held is not None else None

    def _held(self, group_id: str, partition: Partition) -> _Held | None:
        held = self._held_by_name.get((group_id, partition.topic, partition.index))
        return held if held is not None and held.partition is partition else None

    async def load(self, group_id: str, partition: Partition, verify: bool = False) -> SharePartition:
        """The share-partition, read from its persisted state (or initialized) the first time;
        KafkaApiError when the share coordinator cannot be reached or fences this leader. With
        `verify` (a share session opens) a copy in memory is checked first against the persisted
        state epoch: a state reset or deleted meanwhile (its group was empty) is read afresh."""
        held = self._held(group_id, partition)
        if held is not None and verify and await self._stale(held):
            self._drop((group_id, partition.topic, partition.index))
            held = None
        if held is not None:
            return held.share
        name = (group_id, partition.topic, partition.index)
        task = self._loading.get(name)
        if task is None or task.done():
            task = self._loading[name] = asyncio.get_running_loop().create_task(self._load(group_id, partition))
            task.add_done_callback(functools.partial(self._loaded, name))
        return (await asyncio.shield(task)).share

    async def _stale(self, held: _Held) -> bool:
        """Has the persisted state been re-initialized or deleted since `held` was read? (False
        when the coordinator cannot say now: the copy is kept.)"""
        try:
            state = await self.persister.summary(held.key)
        except KafkaApiError as exc:
            log.info("cannot check the share state of %s: %s", held.key, exc)
            return False
        stale = state is None or state.state_epoch != held.state_epoch
        return stale and self._held_by_name.get((held.key.group_id, held.partition.topic, held.partition.index)) is held

    def _loaded(self, name: tuple[str, str, int], task: asyncio.Task[_Held]) -> None:
        """A load ended; its failure is logged here too (every fetch waiting for it may have gone)."""
        if self._loading.get(name) is task:
            del self._loading[name]
        if not task.cancelled() and task.exception() is not None:
            log.info("cannot load the share state of %s-%d for group %s: %s", name[1], name[2], name[0],
                     task.exception())

    async def _load(self, group_id: str, partition: Partition) -> _Held:
        topic_id = self.topic_id(partition.topic)
        if topic_id is None:
            raise KafkaApiError(ErrorCode.unknown_topic_or_partition, f"{partition.topic} has no topic id")
        key = ShareKey(group_id, topic_id, partition.index)
        settings = self.settings(group_id)
        epoch = partition.leader_epoch
        state = await self.persister.read(key, epoch)
        if state is None:
            start = self._start_offset(partition, settings)
            await self.persister.initialize(key, STATE_EPOCH, start)  # (its first write records the epoch)
            share = SharePartition(start, settings.config, self.clock)
            state_epoch = STATE_EPOCH
        else:
            share = SharePartition.restore(state.start_offset, state.batches, settings.config, self.clock)
            state_epoch = state.state_epoch
        held = _Held(partition, share, key, state_epoch, epoch)
        if not partition.is_leader or partition.leader_epoch != epoch:  # leadership moved meanwhile
            share.close()
            raise KafkaApiError(ErrorCode.not_leader_or_follower, "Leadership moved while loading the share state.")
        self._drop((group_id, partition.topic, partition.index))
        self._held_by_name[(group_id, partition.topic, partition.index)] = held
        share.on_released = lambda: self._released(held)
        return held

    def _start_offset(self, partition: Partition, settings: ShareGroupReadSettings) -> int:
        reset = settings.auto_offset_reset
        if reset == "earliest":
            return partition.log.log_start_offset
        end = partition.last_stable_offset if settings.read_committed else partition.high_watermark
        if reset.startswith("by_duration:"):
            found = partition.log.offset_for_timestamp(self.clock.now_ms() - _duration_ms(reset.partition(":")[2]))
            return min(found.offset, end) if found is not None else end
        return end

    def read(self, group_id: str, member_id: str, partition: Partition, max_bytes: int, max_records: int,
             min_one_batch: bool, whole_batches: bool = True) -> Acquired:
        """Acquire for `member_id` what it may of the partition's next records (of a loaded
        share-partition: `load` first)."""
        share, settings = self.get(group_id, partition), self.settings(group_id)
        if share is None:
            return Acquired(b"", [])
        share.move_log_start(partition.log.log_start_offset)
        offset = share.fetch_offset()
        if offset is None or max_records <= 0:
            return Acquired(b"", [])
        data = partition.read(offset, max_bytes, committed_only=True, read_committed=settings.read_committed,
                              min_one_batch=min_one_batch)
        if data.slice is None:
            return Acquired(b"", [])
        raw = data.slice.read()
        headers = list(iter_headers(raw))
        aborted = _aborted_batches(headers, data.aborted_transactions)
        batches = [(h.base_offset, h.last_offset, h.is_control or h.base_offset in aborted) for h in headers]
        ranges = share.acquire(member_id, batches, max_records, whole_batches)
        if not ranges:
            return Acquired(b"", [])
        last = ranges[-1].last_offset
        end = next((h.position + h.size for h in headers if h.last_offset >= last), len(raw))
        return Acquired(bytes(raw[:end]), ranges)

    def release_member(self, group_id: str, member_id: str) -> None:
        """A member left its share group: every record it holds here is released."""
        for (group, _, _), held in list(self._held_by_name.items()):
            if group == group_id:
                held.share.release_member(member_id)

    # ---------------------------------------------------------------- writes

    async def acknowledge(self, group_id: str, partition: Partition, member_id: str,
                          batches: Sequence[AckBatch]) -> None:
        """Write a member's acknowledgements, then apply them (KafkaApiError: nothing changed;
        UNKNOWN_TOPIC_OR_PARTITION for a share-partition not loaded here, as Kafka's
        SharePartitionManager)."""
        held = self._held(group_id, partition)
        if held is None:
            raise KafkaApiError(ErrorCode.unknown_topic_or_partition, "The share group has no records in flight here.")
        # shielded: a client hanging up must not abandon a write that may yet succeed
        task = asyncio.get_running_loop().create_task(self._acknowledge(held, member_id, batches))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda done: done.cancelled() or done.exception())  # (its caller may be gone)
        await asyncio.shield(task)

    async def _acknowledge(self, held: _Held, member_id: str, batches: Sequence[AckBatch]) -> None:
        async with held.writing:
            plan = held.share.plan_acknowledge(member_id, batches)
            if not plan.writes:
                held.share.apply_acknowledge(plan)
                return
            try:
                await self.persister.write(held.key, held.state_epoch, held.leader_epoch, plan.start_offset,
                                           plan.writes)
            except KafkaApiError as exc:
                held.share.abandon(plan)
                self._forget_if_stale(held, exc)
                raise
            except BaseException:
                held.share.abandon(plan)
                raise
            held.share.apply_acknowledge(plan)

    def _forget_if_stale(self, held: _Held, exc: KafkaApiError) -> None:
        """A write refused because the persisted state moved on (a newer leader or state epoch,
        the state deleted): this copy goes, and the next fetch reads the state afresh."""
        if exc.code in STALE:
            name = (held.key.group_id, held.partition.topic, held.partition.index)
            if self._held_by_name.get(name) is held:
                self._drop(name)

    async def reset_start_offset(self, group_id: str, topic: str, index: int, start_offset: int) -> None:
        """Start a share-partition's state again at `start_offset` (AlterShareGroupOffsets, for an
        empty group): written first, with the next state epoch, as Kafka re-initializes it; this
        broker's copy goes (its next fetch reads the new state), a leader's copy elsewhere at its
        next write (FENCED_STATE_EPOCH). KafkaApiError when the state cannot be written."""
        topic_id = self.topic_id(topic)
        if topic_id is None:
            raise KafkaApiError(ErrorCode.unknown_topic_or_partition, f"{topic} has no topic id")
        key = ShareKey(group_id, topic_id, index)
        current = await self.persister.summary(key)
        await self.persister.initialize(key, STATE_EPOCH if current is None else current.state_epoch + 1,
                                        start_offset)
        self._drop((group_id, topic, index))

    def forget_group(self, group_id: str) -> None:
        """The group was deleted: its share-partitions here go (a new group of that id starts afresh)."""
        for name in [name for name in self._held_by_name if name[0] == group_id]:
            self._drop(name)

    def _released(self, held: _Held) -> None:
        """Records became Available: a waiting fetch may take them, and their state is written."""
        self._wake()
        self._flush_soon(held)

    def _flush_soon(self, held: _Held) -> None:
        if held.flushing or self._held_by_name.get((held.key.group_id, held.partition.topic, held.partition.index)) \
                is not held:
            return
        held.flushing = True
        task = asyncio.get_running_loop().create_task(self._flush(held))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self, held: _Held) -> None:
        """Write the records released since the last write (a failure is logged; they are
        written with the next write)."""
        try:
            async with held.writing:
                held.flushing = False
                batches, offsets = held.share.write_pending()
                if not batches:
                    return
                try:
                    await self.persister.write(held.key, held.state_epoch, held.leader_epoch,
                                               held.share.start_offset, batches)
                except KafkaApiError as exc:
                    held.share.rewrite(offsets)
                    log.warning("cannot write the released records of %s: %s", held.key, exc)
                    self._forget_if_stale(held, exc)
        finally:
            held.flushing = False

    # ---------------------------------------------------------------- the admin APIs

    async def delete_state(self, group_id: str, topic: str, index: int) -> None:
        """DeleteShareGroupOffsets or AlterShareGroupOffsets to -1 (an empty group): the persisted
        state is deleted (DeleteShareGroupState), then this broker's copy goes; a later share fetch
        starts where share.auto.offset.reset says. KafkaApiError when it cannot be deleted."""
        topic_id = self.topic_id(topic)
        if topic_id is None:
            raise KafkaApiError(ErrorCode.unknown_topic_or_partition, f"{topic} has no topic id")
        await self.persister.delete(ShareKey(group_id, topic_id, index))
        self._drop((group_id, topic, index))

    # ---------------------------------------------------------------- leadership

    def on_leadership(self, partition: Partition, leads: bool) -> None:
        """A partition this broker no longer leads takes its share-partitions' state with it."""
        if not leads:
            for key in [k for k in self._held_by_name if (k[1], k[2]) == (partition.topic, partition.index)]:
                self._drop(key)

    def _drop(self, key: tuple[str, str, int]) -> None:
        held = self._held_by_name.pop(key, None)
        if held is not None:
            held.share.close()

    def stop(self) -> None:
        for key in list(self._held_by_name):
            self._drop(key)
        for task in [*self._tasks, *self._loading.values()]:
            task.cancel()

    # ---------------------------------------------------------------- waiting fetches

    def wake_on_release(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.add(waiter)

    def forget_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


def _aborted_batches(headers: list[BatchHeader], aborted: list[tuple[int, int]] | None) -> set[int]:
    """The base offsets of the batches of aborted transactions among `headers`, from the aborted
    transactions (producer id, first offset) a read_committed read found, as Kafka's consumer
    skips them: a producer's transactional batches from its first offset on, until its marker."""
    if not aborted:
        return set()
    starts = sorted(aborted, key=lambda txn: txn[1])
    ongoing: set[int] = set()
    skipped = set()
    for header in headers:
        while starts and starts[0][1] <= header.last_offset:
            ongoing.add(starts.pop(0)[0])
        if header.is_control:
            ongoing.discard(header.producer_id)  # the transaction's ABORT marker ends it
        elif header.is_transactional and header.producer_id in ongoing:
            skipped.add(header.base_offset)
    return skipped


def _duration_ms(text: str) -> int:
    """An ISO-8601 duration in ms (0 when it is not one)."""
    with contextlib.suppress(ValueError):
        return iso_duration_ms(text)
    return 0
