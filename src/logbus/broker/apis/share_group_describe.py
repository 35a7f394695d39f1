"""ShareGroupDescribe (key 77): serves v1 (Kafka 4.2's range).

A share group (KIP-932): its state (Empty or Stable), group and assignment epochs, the assignor
("simple") and each member's epoch, subscription and assignment (topics by id and name). Needs
DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) and on every topic its members subscribe to
(else TOPIC_AUTHORIZATION_FAILED for the group), as Kafka; authorized operations on request. An
unknown group, or one of another type, is GROUP_ID_NOT_FOUND; NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS as for every group API.
"""

from __future__ import annotations

from typing import Any

from ...coordinator import group_coordinator
from ...coordinator.share_group import ASSIGNOR, ShareGroup, ShareMember
from ...protocol.codec import make, response_class, response_module
from ..context import RequestContext
from .consumer_group_describe import _assignment, describe_group

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    described = tuple(_describe(ctx, module, group_id, request.include_authorized_operations)
                      for group_id in request.group_ids)
    return make(response_class(API_KEY, ctx.api_version), groups=described)


def _describe(ctx: RequestContext, module: Any, group_id: str, with_operations: bool) -> Any:
    return describe_group(ctx, module, group_id, with_operations, group_coordinator(ctx.broker).share_group,
                          lambda group: group.subscribed_topics(), lambda group: _fields(ctx, module, group))


def _fields(ctx: RequestContext, module: Any, group: ShareGroup) -> dict[str, Any]:
    members = tuple(_member(ctx, module, member) for member in group.members.values())
    return {"group_state": group.state.value, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch, "assignor_name": ASSIGNOR, "members": members}


def _member(ctx: RequestContext, module: Any, member: ShareMember) -> Any:
    return make(module.Member, member_id=member.member_id, rack_id=member.rack_id, member_epoch=member.member_epoch,
                client_id=member.client_id, client_host=member.client_host,
                subscribed_topic_names=member.subscribed_topics, assignment=_assignment(ctx, module, member.assigned))
