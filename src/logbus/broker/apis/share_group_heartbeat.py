"""ShareGroupHeartbeat (key 76): serves v1 (Kafka 4.2's range; v0 was KIP-932's early access).

A share group member (KIP-932) joins (epoch 0, with its subscribed topic names), heartbeats and
leaves (epoch -1) with one request; the response carries its member epoch, the heartbeat
interval and, on a join or when it changed, its assignment (topics by id): every partition of
the topics it subscribes to (see coordinator/share_group.py). The member generates its id (an
empty one is INVALID_REQUEST). Needs READ on the group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE
on every subscribed topic (TOPIC_AUTHORIZATION_FAILED), as Kafka. Errors as Kafka returns them:
INVALID_REQUEST, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED,
GROUP_ID_NOT_FOUND (a group of another type holds the id), NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...coordinator.share_group import ShareHeartbeat
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, authorized_names
from ..context import RequestContext
from .consumer_group_heartbeat import _by_id

API_KEY = 76
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _error(ctx, ErrorCode.group_authorization_failed, None)
    topics = request.subscribed_topic_names or ()
    if len(authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)) < len(set(topics)):
        return _error(ctx, ErrorCode.topic_authorization_failed, "Unauthorized topics in the subscription.")
    heartbeat = ShareHeartbeat(
        request.group_id, request.member_id, request.member_epoch, request.rack_id,
        None if request.subscribed_topic_names is None else tuple(request.subscribed_topic_names),
        ctx.client_id or "", ctx.client_host,
    )
    try:
        result = await group_coordinator(ctx.broker).share_heartbeat(heartbeat)
    except KafkaApiError as exc:
        return _error(ctx, exc.code, exc.message)
    module = response_module(API_KEY, ctx.api_version)
    assignment = None if result.assignment is None else make(
        module.Assignment, topic_partitions=_by_id(ctx, module.TopicPartitions, result.assignment))
    return make(response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none,
                member_id=result.member_id, member_epoch=result.member_epoch,
                heartbeat_interval=timedelta(milliseconds=result.heartbeat_interval_ms), assignment=assignment)


def _error(ctx: RequestContext, code: ErrorCode, message: str | None) -> Any:
    return make(response_class(API_KEY, ctx.api_version), error_code=code,
                error_message=message, member_epoch=0, heartbeat_interval=timedelta(0))
