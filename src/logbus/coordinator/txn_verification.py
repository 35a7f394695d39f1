"""KIP-890 (part 1): a partition leader checks with the transaction coordinator before the first
batch of a transaction opens it in a partition.

Without the check, a transactional batch that arrives late (a retry after its transaction was
aborted) would open a transaction nobody ends, and the partition's last stable offset would
stop there for good. With `transaction.partition.verification.enable` (Kafka's default, true),
the leader asks the coordinator whether the partition is in the producer's open transaction:
directly when this broker coordinates the transactional id, else with AddPartitionsToTxn v4
(`verify_only`) sent to the broker leading the id's `__transaction_state` partition. The answer, in a produce response's
terms: NONE; INVALID_TXN_STATE (not in it); INVALID_PRODUCER_EPOCH (fenced); NOT_ENOUGH_REPLICAS
while the coordinator cannot answer (moving, loading, busy), which producers retry.
"""

from __future__ import annotations

from typing import Any

from kio.schema.add_partitions_to_txn.v4 import request as verify_request
from kio.schema.errors import ErrorCode

from ..cluster.broker_client import BrokerClients
from ..errors import KafkaApiError
from .txn_coordinator import TransactionCoordinator

ADD_PARTITIONS_TO_TXN, VERIFY_VERSION = 24, 4

RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
             ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions}


class TxnVerifier:
    def __init__(self, coordinator: TransactionCoordinator, clients: BrokerClients, enabled: bool) -> None:
        self.coordinator = coordinator
        self.clients = clients
        self.enabled = enabled

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                     index: int) -> ErrorCode:
        """Is (topic, index) in the producer's open transaction? A produce error code, NONE if so."""
        if not self.enabled:
            return ErrorCode.none
        try:
            answers = self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                                         [(topic, index)])
        except KafkaApiError as exc:
            if exc.code != ErrorCode.not_coordinator:
                return produce_code(exc.code)
            return await self._verify_remotely(transactional_id, producer_id, producer_epoch, topic, index)
        return produce_code(answers[(topic, index)])

    async def _verify_remotely(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                               index: int) -> ErrorCode:
        """Ask the broker leading the id's `__transaction_state` partition (NOT_ENOUGH_REPLICAS,
        which producers retry, while it is unknown or unreachable)."""
        leader = self.coordinator.store.leader_of(self.coordinator.partition_for(transactional_id))
        client = self.clients.get(leader) if leader is not None and leader != self.clients.broker_id else None
        if client is None:
            return ErrorCode.not_enough_replicas
        request = _verify_only(transactional_id, producer_id, producer_epoch, topic, index)
        try:
            response = await client.request(ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, request)
        except OSError:
            return ErrorCode.not_enough_replicas
        if response.error_code != ErrorCode.none:
            return produce_code(response.error_code)
        codes = [p.partition_error_code for t in response.results_by_transaction for r in t.topic_results
                 if r.name == topic for p in r.results_by_partition if p.partition_index == index]
        return produce_code(codes[0]) if codes else ErrorCode.invalid_txn_state


def _verify_only(transactional_id: str, producer_id: int, producer_epoch: int, topic: str, index: int) -> Any:
    return verify_request.AddPartitionsToTxnRequest(transactions=(verify_request.AddPartitionsToTxnTransaction(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch, verify_only=True,
        topics=(verify_request.AddPartitionsToTxnTopic(name=topic, partitions=(index,)),)),))


def produce_code(code: ErrorCode) -> ErrorCode:
    """A coordinator's answer as a produce response gives it."""
    if code in (ErrorCode.none, ErrorCode.invalid_txn_state):
        return code
    if code in RETRIABLE:
        return ErrorCode.not_enough_replicas
    if code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch):
        return ErrorCode.invalid_producer_epoch
    return ErrorCode.invalid_txn_state
