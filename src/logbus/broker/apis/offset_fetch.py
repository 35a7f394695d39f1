"""OffsetFetch (key 9): serves v1–v9.

Committed offsets, leader epochs (v5+) and metadata exactly as committed; -1 (and empty
metadata) for partitions without one. A null topic list (v2+) asks for everything the group
committed. v1 reports group errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...) per
partition, v2–v7 in the top-level error code, v8+ per group: v8+ asks for several groups in
one request. With `require_stable` (v7+), a partition whose offset an open transaction commits
(TxnOffsetCommit, not yet ended by its marker) answers UNSTABLE_OFFSET_COMMIT and offset -1, so
the consumer retries; the group's error stays NONE, as in Kafka. v9 names the member of a
consumer group (KIP-848): an unknown one gets UNKNOWN_MEMBER_ID, a stale epoch STALE_MEMBER_EPOCH.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...coordinator.offsets import FetchedOffset
from ...errors import KafkaApiError, TopicAuthorizationError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names, require
from ..context import RequestContext

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    module = response_module(API_KEY, ctx.api_version)
    require_stable = getattr(request, "require_stable", False)
    if ctx.api_version >= 8:
        groups = []
        for group in request.groups:
            error, offsets = _fetch(ctx, group.group_id, _wanted(group.topics), require_stable,
                                    getattr(group, "member_id", None), getattr(group, "member_epoch", -1))
            groups.append(make(module.OffsetFetchResponseGroup, group_id=group.group_id, error_code=error,
                               topics=_topics(module, "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions",
                                              offsets)))
        return make(cls, groups=tuple(groups))
    wanted = _wanted(request.topics)
    error, offsets = _fetch(ctx, request.group_id, wanted, require_stable)
    if error is not ErrorCode.none and ctx.api_version == 1:
        offsets = [FetchedOffset(t, p, -1, -1, "", error) for t, ps in wanted or [] for p in ps]
    topics = _topics(module, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition", offsets)
    return make(cls, error_code=error, topics=topics)


def _fetch(ctx: RequestContext, group_id: str, wanted: list[tuple[str, list[int]]] | None,
           require_stable: bool, member_id: str | None = None, member_epoch: int = -1
           ) -> tuple[ErrorCode, list[FetchedOffset]]:
    """As Kafka: Describe on the group (GROUP_AUTHORIZATION_FAILED), on each named topic
    (TOPIC_AUTHORIZATION_FAILED); asking for all offsets leaves out the topics it may not Describe."""
    try:
        require(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
        offsets = group_coordinator(ctx.broker).fetch_offsets(group_id, wanted, require_stable, member_id,
                                                              member_epoch)
    except KafkaApiError as refused:
        return refused.code, []
    if ctx.broker.authorizer is None:
        return ErrorCode.none, offsets
    visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (o.topic for o in offsets))
    if wanted is None:
        return ErrorCode.none, [o for o in offsets if o.topic in visible]
    return ErrorCode.none, [o if o.topic in visible else FetchedOffset(o.topic, o.partition, -1, -1, "",
                                                                       TopicAuthorizationError.code)
                            for o in offsets]


def _wanted(topics: Any) -> list[tuple[str, list[int]]] | None:
    if topics is None:
        return None
    return [(t.name, list(t.partition_indexes)) for t in topics]


def _topics(module: Any, topic_class: str, partition_class: str, offsets: list[FetchedOffset]) -> tuple:
    by_topic: dict[str, list[FetchedOffset]] = {}
    for offset in offsets:
        by_topic.setdefault(offset.topic, []).append(offset)
    return tuple(
        make(getattr(module, topic_class), name=name, partitions=tuple(
            make(getattr(module, partition_class), partition_index=o.partition, committed_offset=o.offset,
                 committed_leader_epoch=o.leader_epoch, metadata=o.metadata, error_code=o.error)
            for o in found
        ))
        for name, found in by_topic.items()
    )
