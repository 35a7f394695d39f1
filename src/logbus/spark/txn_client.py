"""A transactional producer on the connector's blocking client, for the exactly-once sink.

KIP-939's shape splits a transaction between processes: each Spark task begins one and writes
into it, the driver commits it. Kafka's coordinator accepts EndTxn from any connection that
names the transactional id, producer id and epoch, but confluent-kafka (like the Java producer)
only ends transactions it began itself, so these requests are ours, at flexible versions Kafka
3.0+ serves: FindCoordinator v3, InitProducerId v4, AddPartitionsToTxn v3, Produce v9,
AddOffsetsToTxn v3, TxnOffsetCommit v3, OffsetFetch v7 (require_stable) and EndTxn v3.

Every request that can meet a passing state (a coordinator moving or loading, a transaction
still completing, a leader changing, offsets not yet stable) is retried with backoff until
`retry_for_s` has passed; anything else (fenced, invalid state, too large) fails at once.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..client.apis import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    OFFSET_FETCH,
    PRODUCE,
    TXN_OFFSET_COMMIT,
    api_module,
)
from ..client.client import Client
from ..client.errors import AuthenticationError, KafkaError
from ..client.security import ClientSecurity
from ..protocol.codec import make
from ..protocol.records import TRANSACTIONAL_BIT, build_batch

GROUP, TRANSACTION = 0, 1  # FindCoordinator key types
TopicPartition = tuple[str, int]
RETRY_FOR_S = 60.0
PRODUCE_TIMEOUT = datetime.timedelta(seconds=30)
_FIRST_BACKOFF_S, _MAX_BACKOFF_S = 0.01, 0.5
_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
RETRIABLE = _COORDINATOR_MOVED | {
    ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions, ErrorCode.unstable_offset_commit,
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out, ErrorCode.kafka_storage_error,
}
_ACKNOWLEDGED = frozenset({ErrorCode.none, ErrorCode.duplicate_sequence_number})


class TxnError(KafkaError):
    """The broker refused a transactional request with an error retrying cannot clear."""

    def __init__(self, what: str, code: ErrorCode) -> None:
        super().__init__(f"{what}: {code.name.upper()}")
        self.code = code


@dataclass(frozen=True, slots=True)
class ProducerId:
    """What identifies one transaction to the coordinator: enough for anyone to end it."""

    transactional_id: str
    producer_id: int
    epoch: int


class TxnClient(Client):
    """The transactional requests, routed to the coordinators FindCoordinator names."""

    def __init__(self, bootstrap_servers: str, timeout: float = 30.0, retry_for_s: float = RETRY_FOR_S,
                 security: ClientSecurity | None = None) -> None:
        super().__init__(bootstrap_servers, timeout, security)
        self.retry_for_s = retry_for_s
        self._coordinators: dict[tuple[int, str], tuple[str, int]] = {}

    # ---------------------------------------------------------------- plumbing

    def retrying(self, what: str, attempt: Callable[[], ErrorCode], coordinator: tuple[int, str] | None = None) -> None:
        """Run `attempt` until it answers NONE; retry retriable codes and lost connections (with
        backoff) until `retry_for_s` has passed, raise on anything else (a refused login at once).
        An answer that the `coordinator` (key type, key) moved makes the next attempt look it up again."""
        deadline = time.monotonic() + self.retry_for_s
        backoff = _FIRST_BACKOFF_S
        while True:
            try:
                error = attempt()
                failure: object = error.name.upper()
            except (OSError, KafkaError) as exc:
                if isinstance(exc, TxnError | AuthenticationError):
                    raise
                error, failure = ErrorCode.request_timed_out, exc
            if error is ErrorCode.none:
                return
            if error in _COORDINATOR_MOVED and coordinator is not None:
                self._coordinators.pop(coordinator, None)
            if error not in RETRIABLE:
                raise TxnError(what, error)
            if time.monotonic() + backoff > deadline:
                raise KafkaError(f"{what}: still {failure} after {self.retry_for_s:.0f}s")
            time.sleep(backoff)  # the state it waits out (a coordinator loading, markers being written) is remote
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _ask_coordinator(self, what: str, coordinator: tuple[int, str], api_key: int, request: Any,
                         error_of: Callable[[Any], ErrorCode] = lambda answer: answer.error_code) -> Any:
        """Send `request` to the coordinator (key type, key) until `error_of` its answer is NONE
        (see `retrying`); that answer."""
        answers: list[Any] = []

        def attempt() -> ErrorCode:
            answers[:] = [self._coordinator_call(coordinator, api_key, request)]
            return error_of(answers[0])

        self.retrying(what, attempt, coordinator)
        return answers[0]

    def _coordinator_call(self, coordinator: tuple[int, str], api_key: int, body: Any) -> Any:
        """Send to the coordinator, looked up on first use (again after a lost connection)."""
        address = self._coordinators.get(coordinator) or self._find_coordinator(*coordinator)
        try:
            return self._call(self._connection(address), api_key, body)
        except (OSError, KafkaError):
            self._coordinators.pop(coordinator, None)
            raise

    def _find_coordinator(self, key_type: int, key: str) -> tuple[str, int]:
        module = api_module(FIND_COORDINATOR)
        response = self.call_any(FIND_COORDINATOR, make(module.request_cls, key=key, key_type=key_type))
        if response.error_code != ErrorCode.none:
            if response.error_code in RETRIABLE:
                raise KafkaError(f"FindCoordinator {key}: {response.error_code.name.upper()}")
            raise TxnError(f"FindCoordinator {key}", response.error_code)
        self._coordinators[(key_type, key)] = (response.host, response.port)
        return response.host, response.port

    # ---------------------------------------------------------------- the transaction coordinator

    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int) -> ProducerId:
        """A new epoch for the id: fences its previous producer, whose open transaction the
        coordinator aborts first (CONCURRENT_TRANSACTIONS until that is done, retried here)."""
        module = api_module(INIT_PRODUCER_ID)
        request = make(module.request_cls, transactional_id=transactional_id, producer_id=-1, producer_epoch=-1,
                       transaction_timeout=datetime.timedelta(milliseconds=transaction_timeout_ms))
        answer = self._ask_coordinator(f"InitProducerId {transactional_id}", (TRANSACTION, transactional_id),
                                       INIT_PRODUCER_ID, request)
        return ProducerId(transactional_id, answer.producer_id, answer.producer_epoch)

    def add_partitions(self, producer: ProducerId, partitions: Iterable[TopicPartition]) -> None:
        """Add partitions to the open transaction (or open it): before their first batch (KIP-890)."""
        module = api_module(ADD_PARTITIONS_TO_TXN)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = make(
            module.request_cls, v3_and_below_transactional_id=producer.transactional_id,
            v3_and_below_producer_id=producer.producer_id, v3_and_below_producer_epoch=producer.epoch,
            v3_and_below_topics=tuple(make(module.request.AddPartitionsToTxnTopic, name=topic,
                                           partitions=tuple(parts)) for topic, parts in by_topic.items()),
        )
        self._ask_coordinator(
            f"AddPartitionsToTxn {producer.transactional_id}", (TRANSACTION, producer.transactional_id),
            ADD_PARTITIONS_TO_TXN, request, lambda answer: _worst({
                p.partition_error_code for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}))

    def add_offsets(self, producer: ProducerId, group_id: str) -> None:
        """Put the group's offsets partition into the transaction, for a TxnOffsetCommit."""
        module = api_module(ADD_OFFSETS_TO_TXN)
        request = make(module.request_cls, transactional_id=producer.transactional_id,
                       producer_id=producer.producer_id, producer_epoch=producer.epoch, group_id=group_id)
        self._ask_coordinator(f"AddOffsetsToTxn {producer.transactional_id}",
                              (TRANSACTION, producer.transactional_id), ADD_OFFSETS_TO_TXN, request)

    def end_txn(self, producer: ProducerId, commit: bool) -> None:
        """Commit or abort: answered once the decision is written (markers follow). Ending a
        transaction already ended the same way succeeds."""
        module = api_module(END_TXN)
        request = make(module.request_cls, transactional_id=producer.transactional_id,
                       producer_id=producer.producer_id, producer_epoch=producer.epoch, committed=commit)
        self._ask_coordinator(f"EndTxn({'commit' if commit else 'abort'}) {producer.transactional_id}",
                              (TRANSACTION, producer.transactional_id), END_TXN, request)

    # ---------------------------------------------------------------- the group coordinator

    def txn_offset_commit(self, producer: ProducerId, group_id: str, partition: TopicPartition, offset: int,
                          metadata: str) -> None:
        """Commit a group offset inside the transaction: visible when (if) it commits."""
        module = api_module(TXN_OFFSET_COMMIT)
        committed = make(module.request.TxnOffsetCommitRequestPartition, partition_index=partition[1],
                         committed_offset=offset, committed_leader_epoch=-1, committed_metadata=metadata)
        request = make(
            module.request_cls, transactional_id=producer.transactional_id, group_id=group_id,
            producer_id=producer.producer_id, producer_epoch=producer.epoch, generation_id=-1, member_id="",
            group_instance_id=None,
            topics=(make(module.request.TxnOffsetCommitRequestTopic, name=partition[0], partitions=(committed,)),),
        )
        self._ask_coordinator(f"TxnOffsetCommit {group_id}", (GROUP, group_id), TXN_OFFSET_COMMIT, request,
                              lambda answer: answer.topics[0].partitions[0].error_code)

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, tuple[int, str]]:
        """Everything the group committed: (offset, metadata) per partition. `require_stable`:
        waits out offsets of a transaction still being completed."""
        module = api_module(OFFSET_FETCH)
        request = make(module.request_cls, group_id=group_id, require_stable=True, topics=None)
        answer = self._ask_coordinator(f"OffsetFetch {group_id}", (GROUP, group_id), OFFSET_FETCH, request)
        return {(topic.name, p.partition_index): (p.committed_offset, p.metadata or "")
                for topic in answer.topics for p in topic.partitions if p.committed_offset >= 0}

    # ---------------------------------------------------------------- partition leaders

    def produce(self, producer: ProducerId, batches: Mapping[TopicPartition, bytes]) -> dict[TopicPartition, ErrorCode]:
        """One batch per partition, acks=all, one request per leader: each partition's error code
        (a lost connection answers REQUEST_TIMED_OUT for its partitions, to be retried)."""
        by_leader: dict[tuple[str, int], dict[TopicPartition, bytes]] = {}
        results: dict[TopicPartition, ErrorCode] = {}
        for tp, batch in batches.items():
            try:
                address = self._leader_connection(*tp).address
            except (OSError, KafkaError):
                results[tp] = ErrorCode.leader_not_available
                continue
            by_leader.setdefault(address, {})[tp] = batch
        for address, part in by_leader.items():
            results.update(self._produce_to(address, producer, part))
        for tp, code in results.items():
            if code not in _ACKNOWLEDGED:
                self.leaders.pop(tp, None)
        return results

    def _produce_to(self, address: tuple[str, int], producer: ProducerId,
                    batches: Mapping[TopicPartition, bytes]) -> dict[TopicPartition, ErrorCode]:
        module = api_module(PRODUCE)
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), batch in batches.items():
            by_topic.setdefault(topic, []).append(make(module.request.PartitionProduceData, index=partition,
                                                       records=batch))
        request = make(module.request_cls, transactional_id=producer.transactional_id, acks=-1,
                       timeout=PRODUCE_TIMEOUT, topic_data=tuple(
                           make(module.request.TopicProduceData, name=topic, partition_data=tuple(parts))
                           for topic, parts in by_topic.items()))
        try:
            response = self._call(self._connection(address), PRODUCE, request)
        except (OSError, KafkaError):
            return dict.fromkeys(batches, ErrorCode.request_timed_out)
        return {(topic.name, p.index): p.error_code for topic in response.responses for p in topic.partition_responses}


def _worst(codes: set[ErrorCode]) -> ErrorCode:
    """One code for a request's per-partition answers: NONE only when all are; a code that
    retrying cannot clear wins over a retriable one."""
    failed = codes - {ErrorCode.none}
    fatal = failed - RETRIABLE - {ErrorCode.operation_not_attempted}
    return min(fatal or failed or {ErrorCode.none}, key=lambda code: code.value)


Records = tuple[list[tuple[bytes | None, bytes | None]], list[list[tuple[str, bytes | None]]] | None]


class TransactionalProducer:
    """Writes into one transaction of `producer`: each partition is added before its first batch
    (KIP-890 verification refuses it otherwise) and numbered from sequence 0, as every new
    epoch starts; a batch is resent unchanged (same sequence: the leader drops a duplicate)
    until acknowledged by all in-sync replicas."""

    def __init__(self, client: TxnClient, producer: ProducerId) -> None:
        self.client = client
        self.producer = producer
        self.sequences: dict[TopicPartition, int] = {}

    @property
    def partitions(self) -> tuple[TopicPartition, ...]:
        return tuple(sorted(self.sequences))

    def send(self, chunks: Mapping[TopicPartition, list[Records]]) -> None:
        """Send every chunk (each becomes one record batch), in order within a partition."""
        new = [tp for tp in chunks if tp not in self.sequences]
        if new:
            self.client.add_partitions(self.producer, new)
            self.sequences.update(dict.fromkeys(new, 0))
        queues = {tp: list(reversed(parts)) for tp, parts in chunks.items() if parts}
        while queues:
            self._deliver({tp: queue.pop() for tp, queue in queues.items()})
            queues = {tp: queue for tp, queue in queues.items() if queue}

    def _deliver(self, chunks: Mapping[TopicPartition, Records]) -> None:
        """One batch per partition, resent until each is acknowledged; then the sequences move on."""
        now_ms = int(time.time() * 1000)
        batches = {tp: build_batch(records, now_ms, producer_id=self.producer.producer_id,
                                   producer_epoch=self.producer.epoch, base_sequence=self.sequences[tp],
                                   attributes=TRANSACTIONAL_BIT, headers=headers)
                   for tp, (records, headers) in chunks.items()}
        waiting = dict(batches)

        def attempt() -> ErrorCode:
            answers = self.client.produce(self.producer, waiting)
            for tp, code in answers.items():
                if code in _ACKNOWLEDGED:
                    del waiting[tp]
            return _worst({code for code in answers.values() if code not in _ACKNOWLEDGED})

        self.client.retrying(f"Produce {self.producer.transactional_id}", attempt)
        for tp, (records, _headers) in chunks.items():
            self.sequences[tp] += len(records)
