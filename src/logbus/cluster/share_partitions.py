"""The share-partitions a leader keeps (KIP-932): one `SharePartition` per share group and partition.

A share-partition is made on the first ShareFetch of its group for a partition this broker
leads, starting where the group's `share.auto.offset.reset` says (latest: the high watermark,
as Kafka's default; earliest: the log start; by_duration:<ISO-8601 duration>: the first record
that recent). Its settings are the group's configs (`share.record.lock.duration.ms`) and the
broker's (`group.share.delivery.count.limit`, `group.share.partition.max.record.locks`), read
when it is made. State lives in memory only: a share-partition goes when this broker stops
leading its partition (or the partition is replaced); see docs/architecture.md.

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
from collections.abc import Callable
from dataclasses import dataclass

from ..coordinator.clock import Clock
from ..durations import iso_duration_ms
from ..protocol.records import BatchHeader, iter_headers
from .partition import Partition
from .share_partition import AcquiredRange, SharePartition, SharePartitionConfig


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


class SharePartitions:
    def __init__(self, clock: Clock, settings: Callable[[str], ShareGroupReadSettings]) -> None:
        self.clock = clock
        self.settings = settings
        self.partitions: dict[tuple[str, str, int], tuple[Partition, SharePartition]] = {}
        self._waiters: set[asyncio.Future[None]] = set()

    def get(self, group_id: str, partition: Partition) -> SharePartition | None:
        held = self.partitions.get((group_id, partition.topic, partition.index))
        return held[1] if held is not None and held[0] is partition else None

    def get_or_create(self, group_id: str, partition: Partition) -> tuple[SharePartition, ShareGroupReadSettings]:
        settings = self.settings(group_id)
        share = self.get(group_id, partition)
        if share is None:
            share = self._put(group_id, partition, self._start_offset(partition, settings), settings.config)
        return share, settings

    def _put(self, group_id: str, partition: Partition, start_offset: int, config: SharePartitionConfig
             ) -> SharePartition:
        """A new share-partition of the group, replacing any it had for `partition`."""
        key = (group_id, partition.topic, partition.index)
        self._drop(key)
        share = SharePartition(start_offset, config, self.clock, on_released=self._wake)
        self.partitions[key] = (partition, share)
        return share

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
        """Acquire for `member_id` what it may of the partition's next records."""
        share, settings = self.get_or_create(group_id, partition)
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
        for (group, _, _), (_, share) in list(self.partitions.items()):
            if group == group_id:
                share.release_member(member_id)

    # ---------------------------------------------------------------- the admin APIs

    def of_group(self, group_id: str) -> list[tuple[Partition, SharePartition]]:
        """The group's share-partitions here (DescribeShareGroupOffsets of all its partitions)."""
        return [held for key, held in sorted(self.partitions.items(), key=lambda item: item[0])
                if key[0] == group_id]

    def reset(self, group_id: str, partition: Partition, start_offset: int) -> None:
        """AlterShareGroupOffsets (its group is empty: nothing is acquired): the share-partition
        starts over at `start_offset`, at most the high watermark (the log cannot be read past it),
        what was in flight forgotten."""
        self._put(group_id, partition, min(start_offset, partition.high_watermark), self.settings(group_id).config)

    def forget(self, group_id: str, topic: str | None = None, index: int | None = None) -> None:
        """DeleteGroups (every topic), DeleteShareGroupOffsets (a topic) or AlterShareGroupOffsets
        to -1 (a partition): the group's state there goes; a later share fetch starts where its
        share.auto.offset.reset says."""
        for key in [k for k in self.partitions if k[0] == group_id and topic in (None, k[1]) and index in (None, k[2])]:
            self._drop(key)

    def on_leadership(self, partition: Partition, leads: bool) -> None:
        """A partition this broker no longer leads takes its share-partitions' state with it."""
        if not leads:
            for key in [k for k in self.partitions if (k[1], k[2]) == (partition.topic, partition.index)]:
                self._drop(key)

    def _drop(self, key: tuple[str, str, int]) -> None:
        held = self.partitions.pop(key, None)
        if held is not None:
            held[1].close()

    def stop(self) -> None:
        for key in list(self.partitions):
            self._drop(key)

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
