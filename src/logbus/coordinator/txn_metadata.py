"""One transactional id's state and the transitions a coordinator may make (sans-I/O).

Kafka's TransactionMetadata, for the transaction protocol of version 1 (clients add partitions
with AddPartitionsToTxn; the epoch moves only at InitProducerId, a timeout or a fence):

    Empty ──AddPartitions──▶ Ongoing ──EndTxn──▶ PrepareCommit / PrepareAbort
      ▲                         │                    │ markers written to every partition
      │                         │ (InitProducerId,    ▼
      └─────── InitProducerId ◀─┴─ timeout: abort) CompleteCommit / CompleteAbort

Write then apply: each `prepare_*` returns the TxnValue to write to `__transaction_state` (or
the error to answer) and marks the transition pending; every other request meanwhile gets
CONCURRENT_TRANSACTIONS. Once the record is in the log `complete(value)` applies it; a failed
write calls `abandon()` and nothing changes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ..errors import TxnError
from .txn_records import TxnStatus, TxnValue

MAX_EPOCH = 32767
NO_PRODUCER_ID = -1
NO_EPOCH = -1

Partitions = frozenset[tuple[str, int]]


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: TxnStatus = TxnStatus.EMPTY
    partitions: Partitions = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = NO_EPOCH  # the epoch before the last bump: a retried InitProducerId
    pending: TxnValue | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ views

    def to_value(self) -> TxnValue:
        return _value(self.producer_id, self.producer_epoch, self.timeout_ms, self.status, self.partitions,
                      self.last_update_ms, self.start_ms)

    @classmethod
    def from_value(cls, transactional_id: str, value: TxnValue) -> TxnMetadata:
        partitions = frozenset((topic, index) for topic, ids in value.partitions for index in ids)
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, value.status,
                   partitions, value.start_ms, value.last_update_ms)

    @property
    def completing(self) -> bool:
        """Between EndTxn's prepare record and the markers' completion."""
        return self.status in (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT)

    @property
    def finished(self) -> bool:
        """No transaction in progress: a new one may start, the id may expire."""
        return self.status in (TxnStatus.EMPTY, TxnStatus.COMPLETE_COMMIT, TxnStatus.COMPLETE_ABORT)

    def timed_out(self, now_ms: int) -> bool:
        return self.status == TxnStatus.ONGOING and self.pending is None and now_ms > self.start_ms + self.timeout_ms

    # ------------------------------------------------------------------ transitions

    def prepare_init(self, timeout_ms: int, now_ms: int, new_producer_id: int | None) -> TxnValue:
        """InitProducerId for a complete (or empty) transaction: the next epoch, or a new producer
        id at epoch 0 (`new_producer_id`) once the epoch is exhausted; no partitions."""
        self._check_not_pending()
        if not self.finished:
            raise TxnError(ErrorCode.concurrent_transactions, f"transaction is {self.status.name}")
        if new_producer_id is not None:
            value = _value(new_producer_id, 0, timeout_ms, TxnStatus.EMPTY, frozenset(), now_ms, -1)
        else:
            value = _value(self.producer_id, self.producer_epoch + 1, timeout_ms, TxnStatus.EMPTY, frozenset(),
                           now_ms, -1)
        return self._begin(value)

    @property
    def epoch_exhausted(self) -> bool:
        """Kafka bumps to a new producer id before the epoch reaches Short.MaxValue."""
        return self.producer_epoch >= MAX_EPOCH - 1

    def prepare_add_partitions(self, partitions: Partitions, now_ms: int) -> TxnValue | None:
        """AddPartitionsToTxn/AddOffsetsToTxn: None when every partition is already in the
        transaction (nothing to write), else the Ongoing state with them added."""
        self._check_not_pending()
        if self.completing:
            raise TxnError(ErrorCode.concurrent_transactions, f"transaction is {self.status.name}")
        if self.status == TxnStatus.PREPARE_EPOCH_FENCE or self.status == TxnStatus.DEAD:
            raise TxnError(ErrorCode.invalid_txn_state, f"transaction is {self.status.name}")
        if self.status == TxnStatus.ONGOING and partitions <= self.partitions:
            return None
        start = self.start_ms if self.status == TxnStatus.ONGOING else now_ms
        current = self.partitions if self.status == TxnStatus.ONGOING else frozenset()
        return self._begin(_value(self.producer_id, self.producer_epoch, self.timeout_ms, TxnStatus.ONGOING,
                                  current | partitions, now_ms, start))

    def prepare_end(self, commit: bool, now_ms: int, bump_epoch: bool = False) -> TxnValue:
        """EndTxn on an Ongoing transaction (or the coordinator aborting one, `bump_epoch` fencing
        its producer): PrepareCommit or PrepareAbort, keeping its partitions for the markers."""
        self._check_not_pending()
        if self.status != TxnStatus.ONGOING:
            raise TxnError(ErrorCode.invalid_txn_state, f"transaction is {self.status.name}")
        status = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        epoch = self.producer_epoch + 1 if bump_epoch else self.producer_epoch
        return self._begin(_value(self.producer_id, epoch, self.timeout_ms, status, self.partitions, now_ms,
                                  self.start_ms))

    def prepare_complete(self, now_ms: int) -> TxnValue:
        """Every marker is written: CompleteCommit or CompleteAbort, no partitions."""
        self._check_not_pending()
        if not self.completing:
            raise TxnError(ErrorCode.invalid_txn_state, f"transaction is {self.status.name}")
        status = TxnStatus.COMPLETE_COMMIT if self.status == TxnStatus.PREPARE_COMMIT else TxnStatus.COMPLETE_ABORT
        return self._begin(_value(self.producer_id, self.producer_epoch, self.timeout_ms, status, frozenset(),
                                  now_ms, self.start_ms))

    def prepare_dead(self) -> None:
        """The id expired: a tombstone is written; nothing else may happen to it meanwhile."""
        self._check_not_pending()
        self.pending = dataclasses.replace(self.to_value(), status=TxnStatus.DEAD)

    def complete(self, value: TxnValue) -> None:
        """The pending record is in the log: it is the state now."""
        if value.producer_epoch != self.producer_epoch or value.producer_id != self.producer_id:
            self.last_producer_epoch = self.producer_epoch
        self.producer_id = value.producer_id
        self.producer_epoch = value.producer_epoch
        self.timeout_ms = value.timeout_ms
        self.status = value.status
        self.partitions = frozenset((t, i) for t, ids in value.partitions for i in ids)
        self.start_ms = value.start_ms
        self.last_update_ms = value.last_update_ms
        self.pending = None

    def abandon(self) -> None:
        """The write failed: the state is as it was."""
        self.pending = None

    # ------------------------------------------------------------------ checks

    def check_producer(self, producer_id: int, producer_epoch: int) -> None:
        """A request's producer must be this id's current one (Kafka's INVALID_PRODUCER_ID_MAPPING
        and PRODUCER_FENCED)."""
        if producer_id != self.producer_id:
            raise TxnError(ErrorCode.invalid_producer_id_mapping,
                           f"producer id {producer_id} is not the one of {self.transactional_id!r}")
        if producer_epoch != self.producer_epoch:
            raise TxnError(ErrorCode.producer_fenced,
                           f"epoch {producer_epoch} of producer {producer_id} is fenced "
                           f"(current {self.producer_epoch})")

    def _check_not_pending(self) -> None:
        if self.pending is not None:
            raise TxnError(ErrorCode.concurrent_transactions, "a state change is being written")

    def _begin(self, value: TxnValue) -> TxnValue:
        self.pending = value
        return value


def _value(producer_id: int, epoch: int, timeout_ms: int, status: TxnStatus, partitions: Partitions,
           last_update_ms: int, start_ms: int) -> TxnValue:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    return TxnValue(producer_id, epoch, timeout_ms, status, tuple((t, tuple(ids)) for t, ids in by_topic.items()),
                    last_update_ms, start_ms)
