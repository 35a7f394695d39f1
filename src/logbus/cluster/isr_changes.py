"""A leader's ISR changes, written in batches (Kafka's AlterPartitionManager).

A restarted follower catches up on thousands of partitions within a few fetches, and each of
them asks its leader for an ISR expansion. Written one by one, each change is a metadata-store
round trip; here at most one write is in flight per broker, and the changes asked for meanwhile
wait and go together in the next one (up to `max_batch`), as Kafka's AlterPartition request
carries every partition whose ISR changed since the last one was sent. A follower's first fetch
after its restart names all of its partitions of one leader, so their expansions are queued
together: one write for them (its multi-ops pipelined, `zk_writes.commit_state_batches`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from .metadata import IsrChange, PartitionKey, PartitionState

log = logging.getLogger(__name__)

MAX_BATCH = 10_000  # changes per write: a restarted follower's partitions of one leader, at the scale

Owner = TypeVar("Owner")
WriteIsrChanges = Callable[[list[IsrChange]], Awaitable[list[PartitionState | BaseException]]]


class IsrChangeBatcher(Generic[Owner]):
    """Collects ISR changes and writes them with `write`, one batch at a time; each answer (the
    new state, or the exception for that change) goes to `on_written(owner, change, answer)`."""

    def __init__(self, write: WriteIsrChanges,
                 on_written: Callable[[Owner, IsrChange, PartitionState | BaseException], None],
                 max_batch: int = MAX_BATCH) -> None:
        self._write = write
        self._on_written = on_written
        self.max_batch = max_batch
        self._queued: dict[PartitionKey, tuple[Owner, IsrChange]] = {}
        self._writer: asyncio.Task | None = None
        self.batches_written = 0

    def submit(self, owner: Owner, change: IsrChange) -> None:
        """Queue `change` (replacing one queued for the same partition and not yet sent)."""
        self._queued[(change.topic, change.index)] = (owner, change)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_queued())

    @property
    def queued(self) -> int:
        return len(self._queued)

    async def stop(self) -> None:
        """Stop writing (changes still queued are dropped: their leaders ask again)."""
        self._queued.clear()
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.wait({self._writer})

    async def _write_queued(self) -> None:
        try:
            while self._queued:
                keys = list(self._queued)[: self.max_batch]
                batch = [self._queued.pop(key) for key in keys]
                answers = await self._write_batch([change for _, change in batch])
                self.batches_written += 1
                if len(batch) > 1:
                    log.info("wrote the ISR changes of %d partitions together", len(batch))
                for (owner, change), answer in zip(batch, answers, strict=True):
                    self._on_written(owner, change, answer)
        finally:
            self._writer = None

    async def _write_batch(self, changes: list[IsrChange]) -> list[PartitionState | BaseException]:
        try:
            return await self._write(changes)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every change of the batch fails with it (and is asked again)
            log.exception("writing %d ISR changes failed", len(changes))
            return [exc] * len(changes)
