"""DeleteShareGroupOffsets (key 92): serves v0 (Kafka 4.2's range).

Removes an empty share group's state of whole topics: the next share fetch of the group starts
each of their partitions where share.auto.offset.reset says. Needs DELETE on the group
(GROUP_AUTHORIZATION_FAILED) and READ on each topic (TOPIC_AUTHORIZATION_FAILED for it), as
Kafka's handler checks. The group must be a known share group (GROUP_ID_NOT_FOUND) without
members (NON_EMPTY_GROUP), answered for the whole request, as INVALID_GROUP_ID, NOT_COORDINATOR
and COORDINATOR_LOAD_IN_PROGRESS are; a topic that does not exist, or of which the group has no
state, is UNKNOWN_TOPIC_OR_PARTITION. Each partition's state is deleted from its share
coordinator (DeleteShareGroupState) through the group's deleting list, as Kafka
(coordinator/share_group_persistence.py). See broker/share_offsets.py.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..context import RequestContext
from ..share_offsets import check_alterable, group_topics, readable_topics

API_KEY = 92
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    try:
        check_alterable(ctx, AclOperation.DELETE, request.group_id)
    except KafkaApiError as exc:
        return make(response_class(API_KEY, ctx.api_version), error_code=exc.code, error_message=exc.message,
                    responses=())
    readable = readable_topics(ctx, request.topics)
    topics = [await _topic(ctx, module, request.group_id, topic.topic_name, topic.topic_name in readable)
              for topic in request.topics]
    return make(response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none, responses=tuple(topics))


async def _topic(ctx: RequestContext, module: Any, group_id: str, name: str, readable: bool) -> Any:
    def answer(code: ErrorCode, message: str | None = None) -> Any:
        metadata = ctx.broker.metadata.topic(name) if code is ErrorCode.none else None
        return make(module.DeleteShareGroupOffsetsResponseTopic, topic_name=name,
                    topic_id=metadata.uuid if metadata is not None else None, error_code=code, error_message=message)

    if not readable:
        return answer(ErrorCode.topic_authorization_failed)
    metadata = ctx.broker.metadata.topic(name)
    if metadata is None:
        return answer(ErrorCode.unknown_topic_or_partition)
    if name not in group_topics(ctx, group_id):
        return answer(ErrorCode.unknown_topic_or_partition, "There is no offset information to delete.")
    coordinator = group_coordinator(ctx.broker)
    try:
        await coordinator.share_writes.delete_topics(group_id, {name}, coordinator.delete_share_state)
    except KafkaApiError as exc:
        return answer(exc.code, exc.message)
    return answer(ErrorCode.none)
