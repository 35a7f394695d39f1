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
from ..errors import InvalidProducerEpochError, InvalidTxnStateError, KafkaApiError, NotEnoughReplicasError
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
                     index: int) -> None:
        """Return if (topic, index) is in the producer's open transaction; else raise the refusal a
        produce response gives (`_produce_refusal`)."""
        if not self.enabled:
            return
        refused = f"partition {topic}-{index} is not in the transaction of {transactional_id!r}"
        try:
            answers = self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                                         [(topic, index)])
        except KafkaApiError as exc:
            if exc.code != ErrorCode.not_coordinator:
                raise _produce_refusal(exc.code, refused) from None
            await self._verify_remotely(transactional_id, producer_id, producer_epoch, topic, index, refused)
            return
        _check(answers[(topic, index)], refused)

    async def _verify_remotely(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                               index: int, refused: str) -> None:
        """Ask the broker leading the id's `__transaction_state` partition (NOT_ENOUGH_REPLICAS,
        which producers retry, while it is unknown or unreachable)."""
        leader = self.coordinator.store.leader_of(self.coordinator.partition_for(transactional_id))
        client = self.clients.get(leader) if leader is not None and leader != self.clients.broker_id else None
        if client is None:
            raise NotEnoughReplicasError(refused)
        request = _verify_only(transactional_id, producer_id, producer_epoch, topic, index)
        try:
            response = await client.request(ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, request)
        except OSError:
            raise NotEnoughReplicasError(refused) from None
        _check(response.error_code, refused)
        codes = [p.partition_error_code for t in response.results_by_transaction for r in t.topic_results
                 if r.name == topic for p in r.results_by_partition if p.partition_index == index]
        if not codes:
            raise InvalidTxnStateError(refused)
        _check(codes[0], refused)


def _verify_only(transactional_id: str, producer_id: int, producer_epoch: int, topic: str, index: int) -> Any:
    return verify_request.AddPartitionsToTxnRequest(transactions=(verify_request.AddPartitionsToTxnTransaction(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch, verify_only=True,
        topics=(verify_request.AddPartitionsToTxnTopic(name=topic, partitions=(index,)),)),))


def _check(code: ErrorCode, refused: str) -> None:
    """Raise a coordinator's answer other than NONE as a produce response gives it."""
    if code != ErrorCode.none:
        raise _produce_refusal(code, refused)


def _produce_refusal(code: ErrorCode, message: str) -> KafkaApiError:
    """A coordinator's refusal as a produce response gives it, as Kafka's ReplicaManager maps
    the answers of its AddPartitionsToTxnManager: NOT_ENOUGH_REPLICAS for one the producer should
    retry, INVALID_PRODUCER_EPOCH when fenced, else INVALID_TXN_STATE."""
    if code in RETRIABLE:
        return NotEnoughReplicasError(message)
    if code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch):
        return InvalidProducerEpochError(message)
    return InvalidTxnStateError(message)
