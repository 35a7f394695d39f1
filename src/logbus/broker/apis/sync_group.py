"""SyncGroup (key 14): serves v0–v5.

The leader sends every member's assignment; each member (the leader included) gets its own
once the leader's is written to __consumer_offsets. v3+ carries `group.instance.id`; v5+
the protocol type and name, checked against the group's (INCONSISTENT_GROUP_PROTOCOL) and
returned in the response.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class
from ...security.acl import AclOperation, ResourceType
from ..authorization import require
from ..context import RequestContext

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    require(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    assignments = {a.member_id: a.assignment for a in request.assignments}
    cls = response_class(API_KEY, ctx.api_version)
    try:
        assignment, group = await group_coordinator(ctx.broker).sync(
            request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None),
            getattr(request, "protocol_type", None), getattr(request, "protocol_name", None), assignments,
        )
    except KafkaApiError as refused:
        return make(cls, error_code=refused.code, assignment=b"", protocol_type=None, protocol_name=None)
    # a classic member of a consumer group (no classic group) gets its request's protocol back, as Kafka
    protocol_type = getattr(request, "protocol_type", None) if group is None else group.protocol_type
    protocol_name = getattr(request, "protocol_name", None) if group is None else group.protocol_name
    return make(cls, error_code=ErrorCode.none, assignment=assignment, protocol_type=protocol_type,
                protocol_name=protocol_name)
