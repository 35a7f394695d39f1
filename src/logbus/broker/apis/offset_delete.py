"""OffsetDelete (key 47): serves v0.

Deletes committed offsets of a group (tombstones in __consumer_offsets). Partitions of topics
the group's members subscribe to are refused with GROUP_SUBSCRIBED_TO_TOPIC; an Empty group
can drop any. Unknown group: GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...errors import KafkaApiError, TopicAuthorizationError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names, require
from ..context import RequestContext

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    try:
        require(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id)
        readable = authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
        partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions
                      if t.name in readable]
        errors = await group_coordinator(ctx.broker).delete_offsets(request.group_id, partitions)
    except KafkaApiError as refused:
        return make(response_class(API_KEY, ctx.api_version), error_code=refused.code, topics=())
    by_key = dict.fromkeys(((t.name, p.partition_index) for t in request.topics for p in t.partitions),
                           TopicAuthorizationError.code)
    by_key.update(zip(partitions, errors, strict=True))
    topics = tuple(
        make(module.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(
            make(module.OffsetDeleteResponsePartition, partition_index=p.partition_index,
                 error_code=by_key[(t.name, p.partition_index)])
            for p in t.partitions
        ))
        for t in request.topics
    )
    return make(response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none, topics=topics)
