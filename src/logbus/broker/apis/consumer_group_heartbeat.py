"""ConsumerGroupHeartbeat (key 68): serves v0–v1.

The next-generation consumer group protocol (KIP-848): one request joins, heartbeats, reports the
owned partitions, and leaves (epoch -1; -2 for a static member's temporary leave); the response
carries the member epoch, the heartbeat interval and, when it changed (or on a full request), the
partitions the member may own now. Topics travel by id; a member subscribes by names and/or (v1) a
regular expression. v0 lets the coordinator choose the member id of a joining member that gives
none; from v1 the member generates it (an empty one is INVALID_REQUEST). Needs READ on the group
(GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every topic it subscribes to by name
(TOPIC_AUTHORIZATION_FAILED), as Kafka. Errors as Kafka returns them: INVALID_REQUEST for a
malformed heartbeat, INVALID_REGULAR_EXPRESSION, UNSUPPORTED_ASSIGNOR, UNKNOWN_MEMBER_ID,
FENCED_MEMBER_EPOCH, FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED,
GROUP_ID_NOT_FOUND (a classic group holds the id and may not be converted:
coordinator/migration.py), NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS. The group itself:
coordinator/consumer_group.py.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...coordinator.assignors import Assignment
from ...coordinator.consumer_group import Heartbeat, HeartbeatResult
from ...errors import KafkaApiError, TopicAuthorizationError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names, require
from ..context import RequestContext

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    try:
        authorize_heartbeat(ctx, request.group_id, request.subscribed_topic_names)
        result = await group_coordinator(ctx.broker).consumer_heartbeat(_heartbeat(ctx, request))
    except KafkaApiError as exc:
        return refused_heartbeat(ctx, API_KEY, exc)
    return heartbeat_answer(ctx, API_KEY, result)


def _heartbeat(ctx: RequestContext, request: Any) -> Heartbeat:
    member_id = request.member_id
    if ctx.api_version == 0 and not member_id and request.member_epoch == 0:
        member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    timeout = request.rebalance_timeout
    topics = request.subscribed_topic_names
    return Heartbeat(
        request.group_id, member_id, request.member_epoch, request.instance_id, request.rack_id,
        round(timeout.total_seconds() * 1000) if timeout is not None else -1,
        None if topics is None else tuple(topics), getattr(request, "subscribed_topic_regex", None),
        request.server_assignor,
        None if request.topic_partitions is None else _by_name(ctx, request.topic_partitions),
        ctx.client_id or "", ctx.client_host,
    )


def _by_name(ctx: RequestContext, topic_partitions: Any) -> Assignment:
    """Owned partitions by topic name (partitions of topics deleted meanwhile are dropped)."""
    owned: Assignment = {}
    for topic in topic_partitions:
        metadata = ctx.broker.metadata.topic_by_id(str(topic.topic_id))
        if metadata is not None:
            owned[metadata.name] = owned.get(metadata.name, frozenset()) | frozenset(topic.partitions)
    return owned


def _by_id(ctx: RequestContext, topic_class: type, assignment: Assignment) -> tuple:
    topics = []
    for name, partitions in sorted(assignment.items()):
        metadata = ctx.broker.metadata.topic(name)
        if metadata is not None:
            topics.append(make(topic_class, topic_id=metadata.uuid, partitions=tuple(sorted(partitions))))
    return tuple(topics)


def authorize_heartbeat(ctx: RequestContext, group_id: str, topics: Iterable[str] | None) -> None:
    """What ConsumerGroupHeartbeat and ShareGroupHeartbeat both need, as Kafka: READ on the group
    (GROUP_AUTHORIZATION_FAILED), then DESCRIBE on every topic subscribed by name
    (TOPIC_AUTHORIZATION_FAILED); the refusal raised."""
    require(ctx, AclOperation.READ, ResourceType.GROUP, group_id)
    wanted = set(topics or ())
    if authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, wanted) != wanted:
        raise TopicAuthorizationError("Unauthorized topics in the subscription.")


def heartbeat_answer(ctx: RequestContext, api_key: int, result: HeartbeatResult) -> Any:
    """The answer to a served ConsumerGroupHeartbeat or ShareGroupHeartbeat (`api_key`): the
    member's id and epoch, the heartbeat interval and its assignment (topics by id), if any."""
    module = response_module(api_key, ctx.api_version)
    assignment = None if result.assignment is None else make(
        module.Assignment, topic_partitions=_by_id(ctx, module.TopicPartitions, result.assignment))
    return make(response_class(api_key, ctx.api_version), error_code=ErrorCode.none,
                member_id=result.member_id, member_epoch=result.member_epoch,
                heartbeat_interval=timedelta(milliseconds=result.heartbeat_interval_ms), assignment=assignment)


def refused_heartbeat(ctx: RequestContext, api_key: int, refusal: KafkaApiError) -> Any:
    """The answer to a refused ConsumerGroupHeartbeat or ShareGroupHeartbeat (`api_key`): the
    two responses have the same fields."""
    return make(response_class(api_key, ctx.api_version), error_code=refusal.code,
                error_message=refusal.message, member_epoch=0, heartbeat_interval=timedelta(0))
