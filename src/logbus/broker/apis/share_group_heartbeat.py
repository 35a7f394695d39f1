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

from typing import Any

from ...coordinator import group_coordinator
from ...coordinator.share_group import ShareHeartbeat
from ...errors import KafkaApiError
from ..context import RequestContext
from .consumer_group_heartbeat import authorize_heartbeat, heartbeat_answer, refused_heartbeat

API_KEY = 76
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    heartbeat = ShareHeartbeat(
        request.group_id, request.member_id, request.member_epoch, request.rack_id,
        None if request.subscribed_topic_names is None else tuple(request.subscribed_topic_names),
        ctx.client_id or "", ctx.client_host,
    )
    try:
        authorize_heartbeat(ctx, request.group_id, request.subscribed_topic_names)
        result = await group_coordinator(ctx.broker).share_heartbeat(heartbeat)
    except KafkaApiError as exc:
        return refused_heartbeat(ctx, API_KEY, exc)
    return heartbeat_answer(ctx, API_KEY, result)
