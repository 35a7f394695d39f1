"""What a leader appends and how an append fails: the one append pipeline's parts, used by
`ReplicaManager.append_records` (Kafka's appendRecords) for every writer alike: Produce, the
coordinators' internal topics and transaction markers.

An entry is either client or coordinator batches already validated (`Batches`) or a
transaction's COMMIT/ABORT marker (`TxnMarker`). The partition and its log refuse with the
one error type (`KafkaApiError`, errors.py) and Kafka's code for it; `append_to_leader` adds the
disk's failures as KAFKA_STORAGE_ERROR; each caller maps codes to its own API's only where
Kafka does (a coordinator answers NOT_COORDINATOR where a producer gets NOT_LEADER_OR_FOLLOWER).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import KafkaApiError, KafkaStorageError
from ..protocol.records import BatchHeader
from ..storage.log import AppendInfo
from .partition import Partition

log = logging.getLogger(__name__)

ACKS_ALL = -1


@dataclass(frozen=True, slots=True)
class Batches:
    """Record batches for a leader's log, with their validated headers."""

    data: bytearray
    headers: list[BatchHeader]


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A transaction's end marker (always appended with acks=all, as Kafka's WriteTxnMarkers)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


Entry = Batches | TxnMarker


@dataclass(frozen=True, slots=True)
class AppendResult:
    """An entry in the leader's log (and fsynced if its flush policy said so)."""

    partition: Partition
    info: AppendInfo
    acks: int

    @property
    def required_offset(self) -> int:
        """What every ISR member must have before an acks=all answer."""
        return self.info.last_offset + 1

    @property
    def awaiting_replicas(self) -> bool:
        """acks=all and the entry is not replicated yet (Kafka's delayedProduceRequestRequired);
        a refusal `replicated` raises now is the wait's (`wait_for_replicas`) to give."""
        if self.acks != ACKS_ALL:
            return False
        try:
            return not self.partition.replicated(self.required_offset)
        except KafkaApiError:
            return True


def append_to_leader(partition: Partition, entry: Entry, acks: int) -> AppendInfo:
    """Append `entry` as leader: NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (acks=all below
    min.insync.replicas), the log's idempotence and transaction refusals
    (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED) and
    KAFKA_STORAGE_ERROR (the disk), all as KafkaApiError."""
    try:
        if isinstance(entry, TxnMarker):
            return partition.append_control_marker(entry.producer_id, entry.producer_epoch, entry.commit,
                                                   entry.coordinator_epoch)
        return partition.append_as_leader(entry.data, entry.headers, acks)
    except OSError as exc:
        log.warning("cannot append to %s: %s", partition, exc)
        raise KafkaStorageError(f"disk error: {exc.strerror}") from None
