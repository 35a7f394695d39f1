"""OffsetCommit (key 8): serves v2–v9.

Offsets (with leader epoch from v6 and a metadata string, both returned byte for byte by
OffsetFetch) are written to __consumer_offsets. v2–v4 carry a retention time: when it is not
-1 the offset expires at commit time + retention (OffsetCommitValue v1, as Kafka writes it).
v7+ carries `group.instance.id`. A generation of -1 commits outside group management (an Empty
or new group: admin tools, `assign()`); otherwise the member and generation must be current. In a
consumer group (KIP-848) the generation is the member epoch: STALE_MEMBER_EPOCH when it is not the
member's, UNKNOWN_MEMBER_ID for an unknown member.
Unknown topics or partitions get UNKNOWN_TOPIC_OR_PARTITION; a metadata string over 4096 bytes
OFFSET_METADATA_TOO_LARGE.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...coordinator.offsets import OffsetCommit
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names, require
from ..context import RequestContext

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9

NO_RETENTION = -1


async def handle(ctx: RequestContext, request: Any) -> Any:
    require(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    commits, errors = known_commits(ctx, request.topics)
    retention = getattr(request, "retention_time", None)  # a timedelta in kio; -1 ms: the broker's
    retention_ms = NO_RETENTION if retention is None else round(retention.total_seconds() * 1000)
    coordinator = group_coordinator(ctx.broker)
    expire_at = coordinator.clock.now_ms() + retention_ms if retention_ms != NO_RETENTION else -1
    results = await coordinator.commit_offsets(
        request.group_id, request.generation_id_or_member_epoch, request.member_id or "",
        getattr(request, "group_instance_id", None), commits, expire_at,
    ) if commits else []
    for commit, error in zip(commits, results, strict=True):
        errors[(commit.topic, commit.partition)] = error
    module = response_module(API_KEY, ctx.api_version)
    topics = response_topics(module.OffsetCommitResponseTopic, module.OffsetCommitResponsePartition,
                             request.topics, errors)
    return make(response_class(API_KEY, ctx.api_version), topics=topics)


def known_commits(ctx: RequestContext, topics: Any) -> tuple[list[OffsetCommit], dict[tuple[str, int], ErrorCode]]:
    """The commits of partitions that exist and the principal may Read; TOPIC_AUTHORIZATION_FAILED
    and UNKNOWN_TOPIC_OR_PARTITION for the others (also TxnOffsetCommit's rule)."""
    metadata = ctx.broker.metadata
    commits: list[OffsetCommit] = []
    errors: dict[tuple[str, int], ErrorCode] = {}
    readable = authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in topics))
    for topic in topics:
        known = metadata.topic(topic.name)
        for p in topic.partitions:
            if topic.name not in readable:
                errors[(topic.name, p.partition_index)] = ErrorCode.topic_authorization_failed
                continue
            if known is None or not 0 <= p.partition_index < len(known.partitions):
                errors[(topic.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
                continue
            commits.append(OffsetCommit(topic.name, p.partition_index, p.committed_offset,
                                        getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    return commits, errors


def response_topics(topic_class: type, partition_class: type, topics: Any,
                    errors: dict[tuple[str, int], ErrorCode]) -> tuple:
    """The response's topics: each requested partition with its error, in request order."""
    return tuple(
        make(topic_class, name=topic.name, partitions=tuple(
            make(partition_class, partition_index=p.partition_index, error_code=errors[(topic.name, p.partition_index)])
            for p in topic.partitions
        ))
        for topic in topics
    )
