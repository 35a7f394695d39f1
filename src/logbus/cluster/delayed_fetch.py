"""Kafka's DelayedFetch: a fetch that found fewer than `min_bytes` waits here for the partitions
it reads to have more, woken by the partitions themselves (`Partition.wake_on_data`) rather than
by polling. Sans request: `apis/fetch.py` reads, and calls `wait_for_fetchable` between reads. A
ShareFetch waits in the same `wait_for_data`, woken also by the records its share partitions
release (apis/share_fetch.py).

A follower's fetch session instead keeps a `ChangeWatch` on its partitions: each partition
whose HW, LEO or state moves marks itself in it (and wakes the fetch waiting on it), so that a
follower's fetch handles the partitions it names and those marked, not every partition of the
session, and waits without registering with each of them (see apis/fetch.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Hashable, Sequence

from .partition import Partition

WaiterCall = Callable[[asyncio.Future[None]], None]
Waker = tuple[WaiterCall, WaiterCall]  # how a source takes a waiter to complete on its news, how it forgets it


async def wait_for_fetchable(
    partitions: list[tuple[Partition, int]], missing: int, deadline: float, read_committed: bool, follower: bool,
    stopping: Callable[[], bool],
) -> None:
    """Wait until what the fetcher may read could make up `missing` bytes, or the `deadline` (in
    event loop time), or `stopping()`. As Kafka's DelayedFetch: a follower reads to the log end, so
    the bytes appended since now count (each partition up to its max bytes), and a moved high
    watermark answers it too (the HW it knows moves on: KIP-392's case); a consumer reads below the
    high watermark, so only a moved HW wakes it (bytes appended above the HW of a replicated
    partition are not its to read yet; a lone leader's HW moves with every append).

    For a read_committed consumer the last stable offset counts instead: bytes appended lie
    above it until it moves (when the HW passes a transaction's marker, or records no transaction
    holds back), so the appends of an open transaction do not wake it.

    A wake-up compares counters only, reading nothing (Kafka's DelayedFetch.tryComplete); the
    caller then reads for real, which may still find too little (an estimate: bytes appended
    include batches above the partition's high watermark or before the fetch offset).
    """
    loop = asyncio.get_running_loop()
    bound = _last_stable_offset if read_committed else _high_watermark
    start = [partition.appended_bytes for partition, _ in partitions]
    marks = [bound(partition) for partition, _ in partitions]
    while (remaining := deadline - loop.time()) > 0 and not stopping():
        await wait_for_data([partition for partition, _ in partitions], remaining)
        arrived = sum(
            min(partition.appended_bytes - before, max_bytes)
            for (partition, max_bytes), before in zip(partitions, start, strict=True)
        )
        if (follower and arrived >= missing) or any(
            bound(partition) != mark for (partition, _), mark in zip(partitions, marks, strict=True)
        ):
            return


def _high_watermark(partition: Partition) -> int:
    return partition.high_watermark


def _last_stable_offset(partition: Partition) -> int:
    return partition.last_stable_offset


async def wait_for_data(partitions: list[Partition], timeout: float, wakers: Sequence[Waker] = ()) -> None:
    """Until the HW or LEO of any of `partitions` moves, one of the other `wakers` wakes the
    wait (a share fetch's: records released by its share partitions), or `timeout`."""
    everyone = [*((partition.wake_on_data, partition.forget_waiter) for partition in partitions), *wakers]
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for register, _ in everyone:
        register(waiter)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await waiter
    finally:
        for _, forget in everyone:
            forget(waiter)


class ChangeWatch:
    """The partitions of one fetch session that moved since `take` last asked: `watch(partition,
    key)` subscribes, the partition calls `changed` on each move (`Partition.add_watch`; it holds
    the watch weakly, so a dropped session stops being told)."""

    __slots__ = ("keys", "fetched_at", "_dirty", "_waiter", "__weakref__")

    def __init__(self) -> None:
        self.keys: dict[Partition, Hashable] = {}
        self.fetched_at = 0.0  # time.monotonic() of the session's latest fetch (`FollowerState.caught_up_at`)
        self._dirty: set[Hashable] = set()
        self._waiter: asyncio.Future[None] | None = None

    def watch(self, partition: Partition, key: Hashable) -> None:
        if self.keys.get(partition) != key:
            self.keys[partition] = key
            partition.add_watch(self)

    def forget_all(self) -> None:
        """Start over (before watching every partition of the session again): partitions
        replaced since (a topic created again) stop counting."""
        self.keys = {}

    def changed(self, partition: Partition) -> None:
        key = self.keys.get(partition)
        if key is not None:
            self._dirty.add(key)
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(None)

    def take(self) -> set[Hashable]:
        """The keys of the partitions that moved since the last call."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    async def wait(self, timeout: float) -> None:
        """Until a watched partition moves (at once if one has since `take`), or `timeout`."""
        if self._dirty or timeout <= 0:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._waiter
        finally:
            self._waiter = None
