"""Heartbeat (key 12): serves v0–v4.

Keeps a member's session alive. REBALANCE_IN_PROGRESS tells it to rejoin; UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION and (v3+, static members) FENCED_INSTANCE_ID as Kafka returns them.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...protocol.codec import make, response_class
from ...security.acl import AclOperation, ResourceType
from ..authorization import require
from ..context import RequestContext

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    require(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    group_coordinator(ctx.broker).heartbeat(
        request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None)
    )
    return make(response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none)
