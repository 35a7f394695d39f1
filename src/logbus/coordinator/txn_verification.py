"""KIP-890 (part 1): a partition leader checks with the transaction coordinator before the first
batch of a transaction opens it in a partition.

Without the check, a transactional batch that arrives late (a retry after its transaction was
aborted) would open a transaction nobody ends, and the partition's last stable offset would
stop there for good. With `transaction.partition.verification.enable` (Kafka's default, true),
the leader asks the coordinator whether the partition is in the producer's open transaction:
directly when this broker coordinates the transactional id. The answer, in a produce response's
terms: NONE; INVALID_TXN_STATE (not in it); INVALID_PRODUCER_EPOCH (fenced); NOT_ENOUGH_REPLICAS
while the coordinator cannot answer (moving, loading, busy), which producers retry.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from .txn_coordinator import TransactionCoordinator
from .txn_metadata import TxnError

RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
             ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions}


class TxnVerifier:
    def __init__(self, coordinator: TransactionCoordinator, enabled: bool) -> None:
        self.coordinator = coordinator
        self.enabled = enabled

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                     index: int) -> ErrorCode:
        """Is (topic, index) in the producer's open transaction? A produce error code, NONE if so."""
        if not self.enabled:
            return ErrorCode.none
        try:
            answers = self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                                         [(topic, index)])
        except TxnError as exc:
            return produce_code(exc.code)
        return produce_code(answers[(topic, index)])


def produce_code(code: ErrorCode) -> ErrorCode:
    """A coordinator's answer as a produce response gives it."""
    if code in (ErrorCode.none, ErrorCode.invalid_txn_state):
        return code
    if code in RETRIABLE:
        return ErrorCode.not_enough_replicas
    if code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch):
        return ErrorCode.invalid_producer_epoch
    return ErrorCode.invalid_txn_state
