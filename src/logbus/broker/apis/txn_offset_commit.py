"""TxnOffsetCommit (key 28): serves v0–v5.

A transactional producer's consumer offsets (KafkaProducer.sendOffsetsToTransaction): written to
the group's __consumer_offsets partition as one batch of the producer's transaction (its id and
epoch), they stay pending until the transaction's COMMIT or ABORT marker lands there, and
OffsetFetch does not show them meanwhile. v2+ carries leader epochs; v3+ the group generation,
member id and `group.instance.id`, checked as OffsetCommit checks them when given (see
coordinator/offsets.py). Unknown topics or partitions get UNKNOWN_TOPIC_OR_PARTITION, metadata over
4096 bytes OFFSET_METADATA_TOO_LARGE, a fenced producer epoch INVALID_PRODUCER_EPOCH.

KIP-890, as Kafka 4.1 verifies TxnOffsetCommit: the producer's first batch of a transaction on the
group's partition is written only once the transaction coordinator confirms that AddOffsetsToTxn
added that partition to the transaction (INVALID_TXN_STATE otherwise), so a late retry cannot
open a transaction nobody ends. A coordinator that cannot answer now gives
COORDINATOR_NOT_AVAILABLE, which producers retry (Kafka's mapping of NOT_ENOUGH_REPLICAS here).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...coordinator.offsets import OffsetCommit
from ...errors import CoordinatorNotAvailable, KafkaApiError, NotEnoughReplicasError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import require
from ..context import RequestContext
from .offset_commit import known_commits, response_topics

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    require(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
    require(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    commits, errors = known_commits(ctx, request.topics)
    results = await _commit(ctx, request, commits) if commits else []
    for commit, error in zip(commits, results, strict=True):
        errors[(commit.topic, commit.partition)] = error
    module = response_module(API_KEY, ctx.api_version)
    topics = response_topics(module.TxnOffsetCommitResponseTopic, module.TxnOffsetCommitResponsePartition,
                             request.topics, errors)
    return make(response_class(API_KEY, ctx.api_version), topics=topics)


async def _commit(ctx: RequestContext, request: Any, commits: list[OffsetCommit]) -> list[ErrorCode]:
    try:
        await _verify_in_transaction(ctx, request)
    except KafkaApiError as refused:
        return [refused.code] * len(commits)
    return await group_coordinator(ctx.broker).commit_txn_offsets(
        request.group_id, request.producer_id, request.producer_epoch, getattr(request, "generation_id", -1),
        getattr(request, "member_id", ""), getattr(request, "group_instance_id", None), commits,
    )


async def _verify_in_transaction(ctx: RequestContext, request: Any) -> None:
    """Raise why the transaction coordinator refuses this write. Asked only when the producer
    has no transaction open on the group's partition yet, as Produce asks; a request the group
    coordinator refuses anyway (an invalid group id, a group it does not serve) is left to it.
    A coordinator that cannot answer now is COORDINATOR_NOT_AVAILABLE here (Kafka's mapping of
    the NOT_ENOUGH_REPLICAS a produce gets)."""
    groups = group_coordinator(ctx.broker)
    if not request.group_id or not groups.serves(request.group_id):
        return
    partition = groups.store.partition(groups.partition_for(request.group_id))
    if partition is None or partition.log.producer_state.in_transaction(request.producer_id, request.producer_epoch):
        return
    try:
        await ctx.broker.txn_verifier.verify(request.transactional_id, request.producer_id,
                                             request.producer_epoch, partition.topic, partition.index)
    except NotEnoughReplicasError as exc:
        raise CoordinatorNotAvailable(exc.message) from None
