"""JoinGroup (key 11): serves v0–v9.

v0 has no rebalance timeout (the session timeout is used). From v4 a member's first join
(without a member id) gets MEMBER_ID_REQUIRED and the id to join with. v5+ carries
`group.instance.id` (static membership), v7+ the protocol type and a nullable protocol name,
v8+ a reason, v9+ `skip_assignment` (a static leader rejoining a Stable group gets the members
but must not assign again). Semantics live in `coordinator.GroupCoordinator.join`; a group id
held by a consumer group with members takes the member in as a classic member of it
(`coordinator/classic_members.py`), as Kafka 4.1.
"""

from __future__ import annotations

from typing import Any

from ...coordinator import group_coordinator
from ...coordinator.group import JoinResult
from ...coordinator.membership import JoinRequest
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import require
from ..context import RequestContext

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    session_ms = int(request.session_timeout.total_seconds() * 1000)
    rebalance = getattr(request, "rebalance_timeout", None)
    join = JoinRequest(
        group_id=request.group_id, member_id=request.member_id or "",
        group_instance_id=getattr(request, "group_instance_id", None), client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}", session_timeout_ms=session_ms,
        rebalance_timeout_ms=int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms,
        protocol_type=request.protocol_type, protocols=[(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=version >= 4,
    )
    try:
        require(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
        result = await group_coordinator(ctx.broker).join(join)
    except KafkaApiError as refused:  # Kafka echoes the member id the request came with
        result = JoinResult(refused.code, join.member_id)
    module = response_module(API_KEY, version)
    members = tuple(
        make(module.JoinGroupResponseMember, member_id=member_id, group_instance_id=instance_id, metadata=metadata)
        for member_id, instance_id, metadata in result.members
    )
    protocol_name = result.protocol_name if version >= 7 else (result.protocol_name or "")
    return make(
        response_class(API_KEY, version), error_code=result.error, generation_id=result.generation,
        protocol_type=result.protocol_type, protocol_name=protocol_name, leader=result.leader,
        skip_assignment=result.skip_assignment, member_id=result.member_id, members=members,
    )
