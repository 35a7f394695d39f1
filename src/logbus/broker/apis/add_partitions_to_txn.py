"""AddPartitionsToTxn (key 24): serves v0–v5.

v0–v3 (clients): one transaction, its partitions added before the producer writes to them.
Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED, as Kafka answers. Any other refusal applies to every partition (NOT_COORDINATOR,
CONCURRENT_TRANSACTIONS, PRODUCER_FENCED — INVALID_PRODUCER_EPOCH before v2, ...).

v4–v5 (partition leaders, KIP-890): several transactions in one request, each either added or,
with `verify_only`, checked: each partition answers NONE when it is in the producer's open
transaction, else INVALID_TXN_STATE; an error of the whole transaction (coordinator, producer)
is answered for each of its partitions.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaApiError, producer_fenced_as
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names, denial, require_cluster
from ..context import RequestContext

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5
PRODUCER_FENCED_FROM = 2
BATCHED_FROM = 4

Answers = dict[tuple[str, int], ErrorCode]


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    cls = response_class(API_KEY, ctx.api_version)
    if ctx.api_version < BATCHED_FROM:
        answers = await _add(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                             request.v3_and_below_producer_epoch, request.v3_and_below_topics, verify_only=False)
        return make(cls, results_by_topic_v3_and_below=_topic_results(module, answers))
    try:
        require_cluster(ctx, AclOperation.CLUSTER_ACTION)  # v4+: brokers verifying, as Kafka
    except KafkaApiError as refused:
        return make(cls, error_code=refused.code, results_by_transaction=())
    results = []
    for txn in request.transactions:
        answers = await _add(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                             txn.verify_only)
        results.append(make(module.AddPartitionsToTxnResult, transactional_id=txn.transactional_id,
                            topic_results=_topic_results(module, answers)))
    return make(cls, error_code=ErrorCode.none, results_by_transaction=tuple(results))


async def _add(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int,
               topics: Any, verify_only: bool) -> Answers:
    wanted = [(topic.name, index) for topic in topics for index in topic.partitions]
    refused = denial(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    if refused is not None:
        return dict.fromkeys(wanted, refused.code)
    writable = authorized_names(ctx, AclOperation.WRITE, ResourceType.TOPIC, (topic for topic, _ in wanted))
    if len(writable) < len({topic for topic, _ in wanted}):
        return {tp: ErrorCode.topic_authorization_failed if tp[0] not in writable else
                ErrorCode.operation_not_attempted for tp in wanted}
    unknown = {tp for tp in wanted if not _exists(ctx, *tp)}
    if unknown:
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in wanted}
    coordinator = ctx.broker.txn_coordinator
    try:
        if verify_only:
            return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)
        await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, frozenset(wanted))
    except KafkaApiError as exc:
        return dict.fromkeys(wanted, producer_fenced_as(exc.code, ctx.api_version, PRODUCER_FENCED_FROM))
    return dict.fromkeys(wanted, ErrorCode.none)


def _exists(ctx: RequestContext, topic: str, index: int) -> bool:
    known = ctx.broker.metadata.topic(topic)
    return known is not None and 0 <= index < len(known.partitions)


def _topic_results(module: Any, answers: Answers) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), code in answers.items():
        by_topic.setdefault(topic, []).append(
            make(module.AddPartitionsToTxnPartitionResult, partition_index=index, partition_error_code=code))
    return tuple(make(module.AddPartitionsToTxnTopicResult, name=topic, results_by_partition=tuple(results))
                 for topic, results in by_topic.items())
