"""AlterShareGroupOffsets (key 91): serves v0 (Kafka 4.2's range).

Sets the start offset (SPSO) of share-partitions of an empty share group: their state is
re-initialized at it with the next state epoch (InitializeShareGroupState, as Kafka), and the
next share fetch of the group acquires from there (what was in flight is forgotten; a start
offset below the log start moves up to it on that fetch; where this broker leads the partition,
one past the high watermark is the high watermark; -1 deletes the state, so that
share.auto.offset.reset decides again). Needs READ on the group
(GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions),
as Kafka. The group must be a known share group
(GROUP_ID_NOT_FOUND) without members (NON_EMPTY_GROUP), answered for the whole request, as
INVALID_GROUP_ID, NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS are; an unknown topic or
partition is UNKNOWN_TOPIC_OR_PARTITION; a share coordinator that cannot take the write, its
code for the partition (broker/share_offsets.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...errors import KafkaApiError, TopicAuthorizationError, UnknownTopicError, code_of_awaited
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..context import RequestContext
from ..share_offsets import UNINITIALIZED, check_alterable, led_here, readable_topics

API_KEY = 91
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    try:
        check_alterable(ctx, AclOperation.READ, request.group_id)
    except KafkaApiError as exc:
        return make(response_class(API_KEY, ctx.api_version), error_code=exc.code, error_message=exc.message,
                    responses=())
    readable = readable_topics(ctx, request.topics)
    topics = [await _topic(ctx, module, request.group_id, topic, topic.topic_name in readable)
              for topic in request.topics]
    return make(response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none, responses=tuple(topics))


async def _topic(ctx: RequestContext, module: Any, group_id: str, topic: Any, readable: bool) -> Any:
    if readable:
        codes = await asyncio.gather(*(
            code_of_awaited(_alter(ctx, group_id, topic.topic_name, p.partition_index, p.start_offset))
            for p in topic.partitions
        ))
    else:
        codes = [TopicAuthorizationError.code] * len(topic.partitions)
    partitions = tuple(make(module.AlterShareGroupOffsetsResponsePartition, partition_index=p.partition_index,
                            error_code=code) for p, code in zip(topic.partitions, codes, strict=True))
    metadata = ctx.broker.metadata.topic(topic.topic_name) if readable else None
    return make(module.AlterShareGroupOffsetsResponseTopic, topic_name=topic.topic_name,
                topic_id=metadata.uuid if metadata is not None else None, partitions=partitions)


async def _alter(ctx: RequestContext, group_id: str, topic: str, index: int, start_offset: int) -> None:
    """Set one share-partition's start offset; raises its refusal."""
    metadata = ctx.broker.metadata.topic(topic)
    if metadata is None or not 0 <= index < len(metadata.partitions):
        raise UnknownTopicError(f"{topic}-{index}")
    shares = ctx.broker.share_partitions
    if start_offset <= UNINITIALIZED:
        await shares.delete_state(group_id, topic, index)
    else:
        partition = led_here(ctx, topic, index)
        end = partition.high_watermark if partition is not None else start_offset
        await group_coordinator(ctx.broker).share_writes.add_topics(group_id, {topic})
        await shares.reset_start_offset(group_id, topic, index, min(start_offset, end))
