"""DescribeTopicPartitions (key 75): serves v0.

KIP-966's paged topic description; the Java admin client's describeTopics uses it. Topics are
described in name order from the `cursor` (topic name, first partition) on, at most
`response_partition_limit` partitions in all, capped by `max.request.partition.size.limit` and
at least 1. Where the limit cuts a topic, `next_cursor` names its first partition left out;
where the limit is used up exactly at a topic's end and topics follow, it names partition 0 of
the next one (which may not exist), as Kafka's DescribeTopicPartitionsRequestHandler does.

An empty topic list means all topics (only those that exist). A named topic that does not exist
is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name). A cursor on a topic
the request does not name, or on a negative partition, fails the request: INVALID_REQUEST on
every named topic.

With an authorizer (as Kafka): listing all topics lists only those the principal may Describe;
a named topic it may not is TOPIC_AUTHORIZATION_FAILED, without its id, after the described ones
and outside the limit. `topic_authorized_operations` is always reported. Partitions as Metadata
gives them: leader (-1 when its broker is gone or lacks the request's listener), leader epoch,
replicas, ISR, offline replicas; no eligible leader replicas (logbus has no ELR): empty lists.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.metadata import NO_LEADER, PartitionState, TopicMetadata
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, authorized_operations
from ..context import RequestContext
from ..topics import validate_topic_name

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

_ZERO_UUID = uuid.UUID(int=0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    try:
        wanted = _wanted_topics(ctx, request)
    except KafkaApiError as exc:
        return _refused(module, ctx, request, exc.code)
    every_topic = not request.topics
    allowed = [name for name in wanted if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)]
    refused = sorted(set(wanted) - set(allowed))
    limit = max(min(ctx.broker.config["max.request.partition.size.limit"], request.response_partition_limit), 1)
    topics, next_cursor = _page(ctx, module, allowed, request.cursor, limit, every_topic)
    denied = () if every_topic else tuple(
        make(module.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.topic_authorization_failed,
             name=name, topic_id=_ZERO_UUID, is_internal=False, partitions=())
        for name in refused
    )
    return make(response_class(API_KEY, ctx.api_version), topics=(*topics, *denied), next_cursor=next_cursor)


def _wanted_topics(ctx: RequestContext, request: Any) -> list[str]:
    """The topic names to describe, sorted, from the cursor's topic on (INVALID_REQUEST for a
    cursor the request cannot have been given)."""
    cursor = request.cursor
    first = cursor.topic_name if cursor is not None else ""
    names = ctx.broker.metadata.topics() if not request.topics else {topic.name for topic in request.topics}
    wanted = sorted(name for name in names if name >= first)
    if cursor is not None and request.topics and cursor.topic_name not in wanted:
        raise KafkaApiError(ErrorCode.invalid_request, "The topic list must contain the cursor topic")
    if cursor is not None and cursor.partition_index < 0:
        raise KafkaApiError(ErrorCode.invalid_request, "The cursor partition must not be negative")
    return wanted


def _page(ctx: RequestContext, module: Any, names: list[str], cursor: Any, limit: int,
          every_topic: bool) -> tuple[list[Any], Any]:
    """The topics that fit in `limit` partitions, and the cursor to go on from (None: all done)."""
    described: list[Any] = []
    remaining = limit
    for name in names:
        if remaining == 0:
            return described, make(module.Cursor, topic_name=name, partition_index=0)
        topic = ctx.broker.metadata.topic(name)
        if topic is None:
            if not every_topic:  # listing every topic, one deleted meanwhile is just left out
                described.append(_missing(ctx, module, name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(len(topic.partitions), start + remaining)
        described.append(_described(ctx, module, topic, range(start, end)))
        if end < len(topic.partitions):
            return described, make(module.Cursor, topic_name=name, partition_index=end)
        remaining -= max(end - start, 0)
    return described, None


def _described(ctx: RequestContext, module: Any, topic: TopicMetadata, indexes: range) -> Any:
    brokers = ctx.broker.metadata.brokers()
    live = {b.broker_id for b in brokers}
    reachable = {b.broker_id for b in brokers if b.endpoint(ctx.listener_name) is not None}
    return make(
        module.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.none, name=topic.name,
        topic_id=topic.uuid, is_internal=topic.internal,
        partitions=tuple(_partition(module, i, topic.partitions[i], live, reachable) for i in indexes),
        topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, topic.name, True),
    )


def _partition(module: Any, index: int, state: PartitionState, live: set[int], reachable: set[int]) -> Any:
    """`live`: the registered brokers; `reachable`: those with an endpoint on the client's listener."""
    return make(
        module.DescribeTopicPartitionsResponsePartition, error_code=ErrorCode.none, partition_index=index,
        leader_id=state.leader if state.leader in reachable else NO_LEADER, leader_epoch=state.leader_epoch,
        replica_nodes=tuple(state.replicas), isr_nodes=tuple(state.isr), eligible_leader_replicas=(),
        last_known_elr=(), offline_replicas=tuple(b for b in state.replicas if b not in live),
    )


def _missing(ctx: RequestContext, module: Any, name: str) -> Any:
    try:
        validate_topic_name(name)
        error = ErrorCode.unknown_topic_or_partition
    except KafkaApiError as exc:
        error = exc.code
    return make(module.DescribeTopicPartitionsResponseTopic, error_code=error, name=name, topic_id=_ZERO_UUID,
                is_internal=False, partitions=(),
                topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, name, True))


def _refused(module: Any, ctx: RequestContext, request: Any, error: ErrorCode) -> Any:
    """Kafka's answer to a request it refuses whole: every named topic with the error."""
    topics = tuple(
        make(module.DescribeTopicPartitionsResponseTopic, error_code=error, name=topic.name, topic_id=_ZERO_UUID,
             is_internal=False, partitions=())
        for topic in request.topics
    )
    return make(response_class(API_KEY, ctx.api_version), topics=topics, next_cursor=None)
