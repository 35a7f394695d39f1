"""The transaction coordinator: Kafka's TransactionCoordinator, transaction protocol version 1.

A transactional id lives on partition `coordinator_partition(id, partitions)` of
`__transaction_state`; the broker leading that partition is its coordinator, and the
partition's leader epoch is the coordinator epoch it writes into every marker (a deposed
coordinator's late markers are then refused by the partitions). State is in memory
(`TxnMetadata`, one per id) and in that partition; the ids of a partition this broker starts
leading are loaded from its records in the background (partition_loads.py, shared with the group
coordinator; COORDINATOR_LOAD_IN_PROGRESS until then),
and transactions found half-completed (PrepareCommit/PrepareAbort) are completed. When it stops
leading a partition its ids leave memory.

Every change is written before it is applied (txn_metadata.py). EndTxn is answered once its
PrepareCommit/PrepareAbort record is written; the markers are then written to every partition
of the transaction (`write_markers`: locally or through WriteTxnMarkers to their leaders), and
CompleteCommit/CompleteAbort recorded. A transaction open longer than its timeout is aborted
with its producer's epoch bumped (the producer is fenced), every
`transaction.abort.timed.out.transaction.cleanup.interval.ms`; an id idle for
`transactional.id.expiration.ms` is forgotten (a tombstone).

Depends on: the `TxnStateTopic` store; a `Clock`; `allocate_producer_id` (the metadata store's
producer id blocks); `write_markers(producer_id, epoch, coordinator_epoch, commit, partitions)`,
which returns a final error code per partition.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..errors import InvalidTxnStateError, KafkaApiError
from .clock import Clock, Timer
from .partition_loads import PartitionLoads
from .records import coordinator_partition
from .txn_metadata import NO_EPOCH, NO_PRODUCER_ID, Partitions, TxnError, TxnMetadata
from .txn_records import TxnStatus, TxnValue
from .txn_store import TOPIC as TXN_TOPIC
from .txn_store import TxnStateTopic

if TYPE_CHECKING:
    from ..cluster.partition import Partition
    from ..config import BrokerConfig

log = logging.getLogger(__name__)

WriteMarkers = Callable[[int, int, int, bool, Iterable[tuple[str, int]]],
                        Awaitable[dict[tuple[str, int], ErrorCode]]]
RETRY_BACKOFF_MS = 100  # a completion that could not be written is tried again after this
MARKER_GIVE_UP = {ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced}

# Kafka's names for the states (DescribeTransactions, ListTransactions filters)
STATE_NAMES = {
    TxnStatus.EMPTY: "Empty", TxnStatus.ONGOING: "Ongoing", TxnStatus.PREPARE_COMMIT: "PrepareCommit",
    TxnStatus.PREPARE_ABORT: "PrepareAbort", TxnStatus.COMPLETE_COMMIT: "CompleteCommit",
    TxnStatus.COMPLETE_ABORT: "CompleteAbort", TxnStatus.DEAD: "Dead",
    TxnStatus.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int
    id_expiration_ms: int
    abort_check_ms: int
    expiry_check_ms: int

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> TxnConfig:
        return cls(
            max_timeout_ms=config["transaction.max.timeout.ms"],
            id_expiration_ms=config["transactional.id.expiration.ms"],
            abort_check_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            expiry_check_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
        )


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, store: TxnStateTopic, clock: Clock, *,
                 allocate_producer_id: Callable[[], Awaitable[int]], write_markers: WriteMarkers) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.allocate_producer_id = allocate_producer_id
        self.write_markers = write_markers
        self.txns: dict[str, TxnMetadata] = {}
        self._tasks: set[asyncio.Task] = set()
        self.loads = PartitionLoads(store, self._load, self._spawn)
        self.coordinator_epochs = self.loads.epochs  # partition read -> its leader epoch then
        self._timers: list[Timer] = []

    # ================================================================ life cycle

    def start(self) -> None:
        """Load the ids of every partition this broker leads; start the timeout and expiry checks."""
        self.loads.start()
        self._schedule(self.config.abort_check_ms, self._abort_timed_out)
        self._schedule(self.config.expiry_check_ms, self._expire_ids)

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self.loads.stop()
        for task in self._tasks:
            task.cancel()

    def _schedule(self, delay_ms: int, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        def run() -> None:
            self._timers.remove(timer)
            task = self._spawn(job())
            task.add_done_callback(lambda _t: self._schedule(delay_ms, job))

        timer = self.clock.call_later(delay_ms, run)
        self._timers.append(timer)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ================================================================ which ids are served here

    def partition_for(self, transactional_id: str) -> int:
        return coordinator_partition(transactional_id, self.store.partition_count())

    def serves(self, transactional_id: str) -> bool:
        """May this broker serve `transactional_id` now?"""
        return self.loads.serves(self.partition_for(transactional_id))

    async def _load(self, index: int, coordinator_epoch: int) -> None:
        """Read partition `index`'s ids; completions found prepared resume once it counts as read."""
        states = await self.store.read_states(index)
        for transactional_id, value in states.items():
            if value is not None and value.status != TxnStatus.DEAD:
                self.txns[transactional_id] = TxnMetadata.from_value(transactional_id, value)
        resumed = [t for t in self.txns.values() if self.partition_for(t.transactional_id) == index and t.completing]
        for txn in resumed:
            self._spawn(self._finish(index, txn))
        if states:
            log.info("loaded %s-%d (coordinator epoch %d): %d transactional ids, %d completions resumed",
                     TXN_TOPIC, index, coordinator_epoch, len(states), len(resumed))

    def on_leadership(self, partition: Partition, leads: bool) -> None:
        """A `__transaction_state` partition this broker stopped leading: its ids leave memory
        (their clients find the new coordinator, which loads them); one it leads now is loaded at
        once, so half-completed transactions complete without waiting for a client."""
        if partition.topic != TXN_TOPIC:
            return
        index = partition.index
        self.loads.unload(index)
        for transactional_id in [t for t in self.txns if self.partition_for(t) == index]:
            del self.txns[transactional_id]
        if leads:
            self.loads.ensure_loaded(index)

    def _serving(self, index: int, coordinator_epoch: int) -> bool:
        return self.coordinator_epochs.get(index) == coordinator_epoch

    # ================================================================ InitProducerId

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = NO_PRODUCER_ID,
                               producer_epoch: int = NO_EPOCH) -> tuple[int, int]:
        """The producer id and epoch for this transactional id (a new epoch each call); an open
        transaction of the previous producer is aborted first (CONCURRENT_TRANSACTIONS meanwhile:
        the client retries). Raises TxnError."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            raise TxnError(ErrorCode.invalid_transaction_timeout,
                           f"transaction timeout {timeout_ms} ms is not in (0, {self.config.max_timeout_ms}]")
        txn = await self._metadata_for_init(transactional_id, timeout_ms)
        if producer_id != NO_PRODUCER_ID and txn.producer_epoch != NO_EPOCH:  # (a new id: nothing to check)
            retried = self._check_recovering_producer(txn, producer_id, producer_epoch)
            if retried:
                return txn.producer_id, txn.producer_epoch
        if txn.status == TxnStatus.ONGOING and txn.pending is None:
            await self._abort(txn, bump_epoch=True)
            raise TxnError(ErrorCode.concurrent_transactions, "aborting the previous producer's transaction")
        new_producer_id = await self.allocate_producer_id() if txn.epoch_exhausted else None
        value = txn.prepare_init(timeout_ms, self.clock.now_ms(), new_producer_id)
        await self._write(txn, value)
        return txn.producer_id, txn.producer_epoch

    async def _metadata_for_init(self, transactional_id: str, timeout_ms: int) -> TxnMetadata:
        self._check_coordinator(transactional_id)
        txn = self.txns.get(transactional_id)
        if txn is not None:
            return txn
        producer_id = await self.allocate_producer_id()
        self._check_coordinator(transactional_id)  # leadership may have moved meanwhile
        return self.txns.setdefault(transactional_id, TxnMetadata(transactional_id, producer_id, NO_EPOCH, timeout_ms))

    @staticmethod
    def _check_recovering_producer(txn: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
        """KIP-360: a producer that names its id and epoch may bump them only if they are current;
        True when it repeats a bump whose answer it lost (then the current epoch is its answer)."""
        if producer_id != txn.producer_id:
            raise TxnError(ErrorCode.producer_fenced, f"producer id {producer_id} is not the current one")
        if producer_epoch == txn.producer_epoch:
            return False
        if producer_epoch == txn.last_producer_epoch and txn.finished:
            return True
        raise TxnError(ErrorCode.producer_fenced, f"producer epoch {producer_epoch} is fenced")

    # ================================================================ AddPartitionsToTxn, AddOffsetsToTxn

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Partitions) -> None:
        """Add partitions to the producer's transaction (starting it); raises TxnError."""
        txn = self._current(transactional_id, producer_id, producer_epoch)
        value = txn.prepare_add_partitions(partitions, self.clock.now_ms())
        if value is not None:
            await self._write(txn, value)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890's check for partition leaders: is each partition in the producer's open
        transaction (NONE) or not (INVALID_TXN_STATE)? Raises TxnError for the whole request."""
        txn = self._current(transactional_id, producer_id, producer_epoch)
        ongoing = txn.status == TxnStatus.ONGOING
        return {tp: ErrorCode.none if ongoing and tp in txn.partitions else InvalidTxnStateError.code
                for tp in partitions}

    def _current(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        self._check_coordinator(transactional_id)
        txn = self.txns.get(transactional_id)
        if txn is None:
            raise TxnError(ErrorCode.invalid_producer_id_mapping, f"no producer for {transactional_id!r}")
        txn.check_producer(producer_id, producer_epoch)
        return txn

    def _check_coordinator(self, transactional_id: str) -> None:
        """Refuse `transactional_id` when this broker cannot serve it now (NOT_COORDINATOR & co.)."""
        self.loads.check(self.partition_for(transactional_id))

    # ================================================================ EndTxn

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Commit or abort: answered once the decision is written; the markers follow. A retry of
        a decision already made succeeds (or CONCURRENT_TRANSACTIONS while it completes); the
        opposite decision is INVALID_TXN_STATE. Raises TxnError."""
        txn = self._current(transactional_id, producer_id, producer_epoch)
        if txn.pending is not None:
            raise TxnError(ErrorCode.concurrent_transactions, "a state change is being written")
        if txn.status == TxnStatus.ONGOING:
            await self._end(txn, commit, bump_epoch=False)
            return
        decided = {TxnStatus.PREPARE_COMMIT: True, TxnStatus.COMPLETE_COMMIT: True,
                   TxnStatus.PREPARE_ABORT: False, TxnStatus.COMPLETE_ABORT: False}.get(txn.status)
        if decided is None or decided != commit:
            raise TxnError(ErrorCode.invalid_txn_state,
                           f"cannot {'commit' if commit else 'abort'}: transaction is {STATE_NAMES[txn.status]}")
        if txn.completing:
            raise TxnError(ErrorCode.concurrent_transactions, "the transaction is completing")

    async def _abort(self, txn: TxnMetadata, bump_epoch: bool) -> None:
        await self._end(txn, commit=False, bump_epoch=bump_epoch)

    async def _end(self, txn: TxnMetadata, commit: bool, bump_epoch: bool) -> None:
        index = self.partition_for(txn.transactional_id)
        await self._write(txn, txn.prepare_end(commit, self.clock.now_ms(), bump_epoch))
        self._spawn(self._finish(index, txn))

    async def _finish(self, index: int, txn: TxnMetadata) -> None:
        """Write the markers, then CompleteCommit/CompleteAbort, while this broker still coordinates."""
        coordinator_epoch = self.coordinator_epochs.get(index)
        if coordinator_epoch is None:
            return
        commit = txn.status == TxnStatus.PREPARE_COMMIT
        results = await self.write_markers(txn.producer_id, txn.producer_epoch, coordinator_epoch, commit,
                                           sorted(txn.partitions))
        refused = {tp: code for tp, code in results.items() if code in MARKER_GIVE_UP}
        if refused:
            log.error("transaction %r: markers refused %s; left %s", txn.transactional_id, refused,
                      STATE_NAMES[txn.status])
            return
        while self._serving(index, coordinator_epoch) and self.txns.get(txn.transactional_id) is txn:
            try:
                await self._write(txn, txn.prepare_complete(self.clock.now_ms()))
                return
            except KafkaApiError as exc:
                log.warning("transaction %r: cannot record its completion yet: %s", txn.transactional_id, exc)
            await asyncio.sleep(RETRY_BACKOFF_MS / 1000)

    # ================================================================ writes

    async def _write(self, txn: TxnMetadata, value: TxnValue | None) -> None:
        """Write the pending state (None: a tombstone), then apply it; a failed write changes
        nothing and raises the store's KafkaApiError, or TxnError (NOT_COORDINATOR when leadership moved)."""
        index = self.partition_for(txn.transactional_id)
        coordinator_epoch = self.coordinator_epochs.get(index)
        try:
            await self.store.write(index, txn.transactional_id, value)
        except BaseException:
            txn.abandon()
            raise
        if coordinator_epoch is None or not self._serving(index, coordinator_epoch):
            txn.abandon()
            raise TxnError(ErrorCode.not_coordinator, "this broker stopped coordinating the transaction")
        if value is None:
            self.txns.pop(txn.transactional_id, None)
        else:
            txn.complete(value)

    # ================================================================ timeouts and expiry

    async def _abort_timed_out(self) -> None:
        """Abort transactions open longer than their timeout, fencing their producers (Kafka's
        abortTimedOutTransactions)."""
        now = self.clock.now_ms()
        for txn in [t for t in self.txns.values() if t.timed_out(now)]:
            if not self.serves(txn.transactional_id):
                continue
            log.info("aborting transaction %r: open over its %d ms timeout", txn.transactional_id, txn.timeout_ms)
            try:
                await self._abort(txn, bump_epoch=True)
            except KafkaApiError as exc:
                log.warning("cannot abort timed-out transaction %r: %s", txn.transactional_id, exc)

    async def _expire_ids(self) -> None:
        """Forget ids idle for `transactional.id.expiration.ms` with nothing in progress."""
        now = self.clock.now_ms()
        for txn in [t for t in self.txns.values() if t.finished and t.pending is None
                    and now - t.last_update_ms >= self.config.id_expiration_ms]:
            if not self.serves(txn.transactional_id):
                continue
            txn.prepare_dead()
            try:
                await self._write(txn, None)
            except KafkaApiError as exc:
                log.warning("cannot expire transactional id %r: %s", txn.transactional_id, exc)

    # ================================================================ DescribeTransactions, ListTransactions

    def describe(self, transactional_id: str) -> TxnMetadata:
        """The id's state; raises TxnError (TRANSACTIONAL_ID_NOT_FOUND for an unknown one)."""
        self._check_coordinator(transactional_id)
        txn = self.txns.get(transactional_id)
        if txn is None:
            raise TxnError(ErrorCode.transactional_id_not_found, f"unknown transactional id {transactional_id!r}")
        return txn

    def list_transactions(self, states: set[str], producer_ids: set[int], min_duration_ms: int = -1,
                          id_pattern: str | None = None) -> list[TxnMetadata]:
        """The ids this broker coordinates (loaded), filtered as ListTransactions filters:
        empty filters match all; `min_duration_ms` keeps transactions running at least that long."""
        now = self.clock.now_ms()
        pattern = re.compile(id_pattern) if id_pattern else None
        return [
            txn for txn in self.txns.values()
            if self.partition_for(txn.transactional_id) in self.coordinator_epochs
            and (not states or STATE_NAMES[txn.status] in states)
            and (not producer_ids or txn.producer_id in producer_ids)
            and (min_duration_ms < 0 or (txn.start_ms >= 0 and now - txn.start_ms >= min_duration_ms))
            and (pattern is None or pattern.fullmatch(txn.transactional_id))
        ]

    @property
    def loading(self) -> bool:
        return self.loads.loading
