"""Which partitions of a coordinator's internal topic this broker leads and has read into memory.

Both coordinators keep their state in memory and in an internal topic (groups in
`__consumer_offsets`, transactional ids in `__transaction_state`): a key lives on one partition,
and the broker leading that partition serves it once it has read the partition's records. An
empty partition counts as read at once; another is read in the background, one load per
partition, and its keys' requests get COORDINATOR_LOAD_IN_PROGRESS meanwhile, as in Kafka. A
partition is marked read, with the leader epoch it was read under (the transaction
coordinator's epoch), in the same step as its load ends, so nothing sees it half read. Losing
leadership forgets it (`unload`); a failed load is logged and the next request tries again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ..errors import CoordinatorLoadInProgress, CoordinatorNotAvailable, KafkaApiError, NotCoordinator
from .internal_topic import InternalTopic

log = logging.getLogger(__name__)

Load = Callable[[int, int], Coroutine[Any, Any, None]]  # (partition index, leader epoch)


class PartitionLoads:
    def __init__(self, store: InternalTopic, load: Load,
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task]) -> None:
        """`load(index, epoch)` reads partition `index` into memory; `spawn` runs it."""
        self.store = store
        self.load = load
        self.spawn = spawn
        self.epochs: dict[int, int] = {}  # partition read -> its leader epoch then
        self._loading: dict[int, asyncio.Task] = {}

    def start(self) -> None:
        """Start reading every partition this broker leads."""
        if self.store.exists():
            for index in range(self.store.partition_count()):
                self.ensure_loaded(index)

    def stop(self) -> None:
        for task in list(self._loading.values()):
            task.cancel()

    def check(self, index: int) -> None:
        """Refuse keys of partition `index` when they cannot be served here now: its topic is
        missing, another broker leads it, or it is still being read."""
        if not self.store.exists():
            raise CoordinatorNotAvailable
        partition = self.store.partition(index)
        if partition is None or not partition.is_leader:
            raise NotCoordinator
        if not self.ensure_loaded(index):
            raise CoordinatorLoadInProgress

    def serves(self, index: int) -> bool:
        """May keys of partition `index` be served here now (`check` passes)?"""
        try:
            self.check(index)
        except KafkaApiError:
            return False
        return True

    def ensure_loaded(self, index: int) -> bool:
        """True once partition `index` is read; otherwise start reading it (once)."""
        if index in self.epochs:
            return True
        partition = self.store.partition(index)
        if partition is None or not partition.is_leader:
            return False
        if self.store.is_empty(index):
            self.epochs[index] = partition.leader_epoch
            return True
        if index not in self._loading:
            task = self.spawn(self._run(index, partition.leader_epoch))
            self._loading[index] = task
            task.add_done_callback(functools.partial(self._on_done, index))
        return False

    def is_loading(self, index: int) -> bool:
        return index in self._loading

    def unload(self, index: int) -> None:
        """This broker stopped leading partition `index`: forget it, stop a load in progress."""
        self.epochs.pop(index, None)
        loading = self._loading.pop(index, None)
        if loading is not None:
            loading.cancel()

    @property
    def loading(self) -> bool:
        """Is any partition still being read (ListGroups and ListTransactions say so)."""
        return bool(self._loading)

    async def _run(self, index: int, epoch: int) -> None:
        await self.load(index, epoch)
        self.epochs[index] = epoch  # in the load's last step: no request sees it half read

    def _on_done(self, index: int, task: asyncio.Task) -> None:
        if self._loading.get(index) is task:
            del self._loading[index]
        if not task.cancelled() and task.exception() is not None:
            log.error("cannot load %s-%d: %r", self.store.name, index, task.exception())
