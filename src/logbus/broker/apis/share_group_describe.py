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

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...coordinator.share_group import ASSIGNOR, ShareMember
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, authorized_names, authorized_operations
from ..context import RequestContext
from .consumer_group_describe import NOT_PROVIDED, _assignment

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    described = tuple(_describe(ctx, module, group_id, request.include_authorized_operations)
                      for group_id in request.group_ids)
    return make(response_class(API_KEY, ctx.api_version), groups=described)


def _describe(ctx: RequestContext, module: Any, group_id: str, with_operations: bool) -> Any:
    def failed(code: ErrorCode, message: str | None = None) -> Any:
        return make(module.DescribedGroup, error_code=code, error_message=message, group_id=group_id,
                    group_state="Dead", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                    authorized_operations=NOT_PROVIDED)

    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return failed(ErrorCode.group_authorization_failed)
    coordinator = group_coordinator(ctx.broker)
    error = coordinator.coordinator_error(group_id)
    if error is not None:
        return failed(error)
    group = coordinator.share_group(group_id)
    if group is None:
        return failed(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
    topics = group.subscribed_topics()
    if authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics) != topics:
        return failed(ErrorCode.topic_authorization_failed, "The group has subscribed topics that are not authorized.")
    members = tuple(_member(ctx, module, member) for member in group.members.values())
    return make(module.DescribedGroup, error_code=ErrorCode.none, group_id=group_id, group_state=group.state.value,
                group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR,
                members=members,
                authorized_operations=authorized_operations(ctx, ResourceType.GROUP, group_id, with_operations))


def _member(ctx: RequestContext, module: Any, member: ShareMember) -> Any:
    return make(module.Member, member_id=member.member_id, rack_id=member.rack_id, member_epoch=member.member_epoch,
                client_id=member.client_id, client_host=member.client_host,
                subscribed_topic_names=member.subscribed_topics, assignment=_assignment(ctx, module, member.assigned))
