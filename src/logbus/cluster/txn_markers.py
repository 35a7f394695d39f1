"""Transaction markers: writing one to a partition this broker leads (`write_marker`, what
WriteTxnMarkers does), and to every partition of a transaction wherever it is led
(`TxnMarkerWriter`, what the transaction coordinator completes a transaction with).

A marker is appended with acks=all semantics (Kafka's KafkaApis.handleWriteTxnMarkersRequest
appends with required acks -1): refused below min.insync.replicas, then awaited until every ISR
member has it, and only then announced to the marker listeners (the group coordinator), so that
offsets committed in a transaction become visible no earlier than the marker is durable in the
ISR.

The writer follows Kafka's TransactionMarkerChannelManager and
TransactionMarkerRequestCompletionHandler: partitions are grouped by their current leader in the
metadata store; those this broker leads are written here, the others with one WriteTxnMarkers
request per leader broker, over a `BrokerClient` kept per broker. Retriable outcomes (no live
leader, a connection failure, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, a timeout...) are
tried again after a short backoff with the leader read again, each leader's partitions on their
own, so one slow broker delays no other. A partition ends with NONE, or with a final code:
UNKNOWN_TOPIC_OR_PARTITION once its topic or partition is gone from the metadata (Kafka's
coordinator then skips it: likely deleted), INVALID_PRODUCER_EPOCH or
TRANSACTION_COORDINATOR_FENCED (this coordinator is stale), or whatever else a leader answers
that Kafka treats as no retry (UNKNOWN_SERVER_ERROR...).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as _REQUEST

from ..errors import LeaderNotAvailableError, NetworkError, UnknownServerError, UnknownTopicError, code_of_awaited
from .appends import ACKS_ALL, TxnMarker
from .broker_client import BrokerClients
from .metadata import NO_LEADER, MetadataStore
from .replica_manager import ReplicaManager

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION = 27, 1
RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms default
# What Kafka's TransactionMarkerRequestCompletionHandler retries (plus what the writer itself finds:
# no live leader, a failed connection); UNKNOWN_TOPIC_OR_PARTITION is final only once the metadata
# has no such partition.
RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available,
    ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out,
    ErrorCode.kafka_storage_error, ErrorCode.network_exception,
})

PartitionKey = tuple[str, int]

# Kafka's request.timeout.ms default, which bounds its marker appends' wait for the ISR (logbus
# has no such key: nothing else waits on it).
MARKER_TIMEOUT_S = 30.0


async def write_marker(replicas: ReplicaManager, topic: str, index: int, producer_id: int, producer_epoch: int,
                       commit: bool, coordinator_epoch: int, timeout: float) -> None:
    """Write a COMMIT or ABORT marker to partition `topic`-`index` as its leader, wait up to
    `timeout` seconds for the ISR to have it, then call the marker listeners.

    Appended through the replica manager's append pipeline; refuses as Kafka does (raises): the
    replica manager's refusal for a partition not hosted here (UNKNOWN_TOPIC_OR_PARTITION...),
    NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (before the append), INVALID_PRODUCER_EPOCH and
    TRANSACTION_COORDINATOR_FENCED (the log refuses the epochs), KAFKA_STORAGE_ERROR (the disk),
    then REQUEST_TIMED_OUT / NOT_ENOUGH_REPLICAS_AFTER_APPEND / NOT_LEADER_OR_FOLLOWER while
    waiting for the ISR; a listener that fails makes it UNKNOWN_SERVER_ERROR, as Kafka answers
    when the group coordinator cannot complete the offsets.
    """
    appended = await replicas.append_records(
        topic, index, TxnMarker(producer_id, producer_epoch, commit, coordinator_epoch), ACKS_ALL)
    await replicas.wait_for_replicas(appended, timeout)
    try:
        replicas.marker_written(appended.partition, producer_id, commit)
    except Exception:  # noqa: BLE001 - a listener's bug must not leave the marker unanswered
        log.exception("a marker listener failed for producer %d on %s", producer_id, appended.partition)
        raise UnknownServerError(f"a marker listener failed on {appended.partition}") from None


class TxnMarkerWriter:
    """Writes a transaction's markers to all its partitions, wherever they are led."""

    def __init__(self, broker_id: int, metadata: MetadataStore, replicas: ReplicaManager, clients: BrokerClients,
                 request_timeout_s: float, backoff_s: float = RETRY_BACKOFF_S) -> None:
        """`request_timeout_s` bounds one local attempt's wait for the ISR (`clients` bound the
        remote ones)."""
        self.broker_id = broker_id
        self.metadata = metadata
        self.replicas = replicas
        self.clients = clients
        self.request_timeout_s = request_timeout_s
        self.backoff_s = backoff_s
        self._writes: set[asyncio.Task] = set()

    async def stop(self) -> None:
        """Cancel the writes in progress (their callers get CancelledError)."""
        for task in self._writes:
            task.cancel()
        await asyncio.gather(*self._writes, return_exceptions=True)

    async def write(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                    partitions: Iterable[PartitionKey]) -> dict[PartitionKey, ErrorCode]:
        """Write the COMMIT (`commit`) or ABORT marker of producer `producer_id` to every partition;
        returns once each has its final code (see the module docstring)."""
        results: dict[PartitionKey, ErrorCode] = {}
        marker = TxnMarker(producer_id, producer_epoch, commit, coordinator_epoch)
        task = asyncio.get_running_loop().create_task(self._write_all(marker, set(partitions), results))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        await task
        return results

    async def _write_all(self, marker: TxnMarker, partitions: set[PartitionKey],
                         results: dict[PartitionKey, ErrorCode]) -> None:
        async with asyncio.TaskGroup() as group:
            self._dispatch(group, marker, partitions, results)

    def _dispatch(self, group: asyncio.TaskGroup, marker: TxnMarker, partitions: Iterable[PartitionKey],
                  results: dict[PartitionKey, ErrorCode]) -> None:
        """One write per current leader; a partition gone from the metadata is final."""
        by_leader: dict[int, list[PartitionKey]] = {}
        for key in partitions:
            leader = self._leader_of(key)
            if leader is None:
                results[key] = UnknownTopicError.code
            else:
                by_leader.setdefault(leader, []).append(key)
        for leader, keys in by_leader.items():
            group.create_task(self._write_to(group, leader, marker, keys, results))

    def _leader_of(self, key: PartitionKey) -> int | None:
        """The partition's leader (NO_LEADER while offline); None when no such partition exists."""
        topic = self.metadata.topic(key[0])
        if topic is None or not 0 <= key[1] < len(topic.partitions):
            return None
        return topic.partitions[key[1]].leader

    async def _write_to(self, group: asyncio.TaskGroup, leader: int, marker: TxnMarker, keys: list[PartitionKey],
                        results: dict[PartitionKey, ErrorCode]) -> None:
        codes = await self._attempt(leader, marker, keys)
        retry = [key for key in keys if codes[key] in RETRIABLE]
        results.update((key, code) for key, code in codes.items() if code not in RETRIABLE)
        if retry:
            log.debug("markers of producer %d to broker %d: retrying %s", marker.producer_id, leader,
                      {key: codes[key].name for key in retry})
            await asyncio.sleep(self.backoff_s)
            self._dispatch(group, marker, retry, results)

    async def _attempt(self, leader: int, marker: TxnMarker, keys: list[PartitionKey]) -> dict[PartitionKey, ErrorCode]:
        if leader == self.broker_id:
            codes = await asyncio.gather(*(
                code_of_awaited(write_marker(self.replicas, topic, index, marker.producer_id, marker.producer_epoch,
                                             marker.commit, marker.coordinator_epoch, self.request_timeout_s))
                for topic, index in keys
            ))
            return dict(zip(keys, codes, strict=True))
        client = self.clients.get(leader) if leader != NO_LEADER else None
        if client is None:
            return dict.fromkeys(keys, LeaderNotAvailableError.code)
        try:
            response = await client.request(WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION, _request(marker, keys))
        except OSError as exc:
            log.debug("markers of producer %d to broker %d: %s", marker.producer_id, leader, exc)
            return dict.fromkeys(keys, NetworkError.code)
        return _codes(response, marker, keys)


def _request(marker: TxnMarker, keys: list[PartitionKey]) -> Any:
    topics: dict[str, list[int]] = {}
    for topic, index in keys:
        topics.setdefault(topic, []).append(index)
    return _REQUEST.WriteTxnMarkersRequest(markers=(_REQUEST.WritableTxnMarker(
        producer_id=marker.producer_id, producer_epoch=marker.producer_epoch, transaction_result=marker.commit,
        coordinator_epoch=marker.coordinator_epoch,
        topics=tuple(_REQUEST.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(p)) for t, p in topics.items()),
    ),))


def _codes(response: Any, marker: TxnMarker, keys: list[PartitionKey]) -> dict[PartitionKey, ErrorCode]:
    """Each partition's code in a leader's answer; one it did not answer is tried again."""
    answered = {(topic.name, p.partition_index): ErrorCode(p.error_code)
                for result in response.markers if result.producer_id == marker.producer_id
                for topic in result.topics for p in topic.partitions}
    return {key: answered.get(key, NetworkError.code) for key in keys}
