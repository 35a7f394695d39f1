"""LeaveGroup (key 13): serves v0–v5.

v0–v2 name one member (its error is the response's error); v3+ batch members, each with an
optional `group.instance.id` (a static member may leave by instance id alone; a member id that
is not the instance's current one gets FENCED_INSTANCE_ID), answered one by one. v5+ adds a
reason. Leaving triggers a rebalance of the others at once (no session timeout wait).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import require
from ..context import RequestContext

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    leaving = [(m.member_id, m.group_instance_id) for m in request.members] if ctx.api_version >= 3 else [
        (request.member_id, None)]
    try:
        require(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
        errors = await group_coordinator(ctx.broker).leave(request.group_id, leaving)
    except KafkaApiError as refused:
        return make(cls, error_code=refused.code, members=())
    if ctx.api_version < 3:
        return make(cls, error_code=errors[0])
    module = response_module(API_KEY, ctx.api_version)
    members = tuple(
        make(module.MemberResponse, member_id=member_id, group_instance_id=instance_id, error_code=member_error)
        for (member_id, instance_id), member_error in zip(leaving, errors, strict=True)
    )
    return make(cls, error_code=ErrorCode.none, members=members)
