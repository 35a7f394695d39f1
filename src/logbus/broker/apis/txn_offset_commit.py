"""TxnOffsetCommit (key 28): serves v0–v5.

A transactional producer's consumer offsets (KafkaProducer.sendOffsetsToTransaction): written to
the group's __consumer_offsets partition as one batch of the producer's transaction (its id and
epoch), they stay pending until the transaction's COMMIT or ABORT marker lands there, and
OffsetFetch does not show them meanwhile. v2+ carries leader epochs; v3+ the group generation,
member id and `group.instance.id`, checked as OffsetCommit checks them when given (see
coordinator/offsets.py). Unknown topics or partitions get UNKNOWN_TOPIC_OR_PARTITION, metadata over
4096 bytes OFFSET_METADATA_TOO_LARGE, a fenced producer epoch INVALID_PRODUCER_EPOCH.

Not checked (yet): that the transaction coordinator added the group to the producer's
transaction (AddOffsetsToTxn; Kafka 3.8+ verifies it, KIP-890).
"""

from __future__ import annotations

from typing import Any

from ...coordinator import group_coordinator
from ...protocol.codec import make, response_class, response_module
from ..context import RequestContext
from .offset_commit import known_commits, response_topics

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    commits, errors = known_commits(ctx, request.topics)
    results = await group_coordinator(ctx.broker).commit_txn_offsets(
        request.group_id, request.producer_id, request.producer_epoch, getattr(request, "generation_id", -1),
        getattr(request, "member_id", ""), getattr(request, "group_instance_id", None), commits,
    ) if commits else []
    for commit, error in zip(commits, results, strict=True):
        errors[(commit.topic, commit.partition)] = error
    module = response_module(API_KEY, ctx.api_version)
    topics = response_topics(module.TxnOffsetCommitResponseTopic, module.TxnOffsetCommitResponsePartition,
                             request.topics, errors)
    return make(response_class(API_KEY, ctx.api_version), topics=topics)
