"""ConsumerGroupDescribe (key 69): serves v0–v1.

A consumer group (KIP-848): state, group and assignment epochs, the assignor, and each member's
epoch, subscription, current and target assignment (topics by id and name; v1 adds the member
type, 1: a consumer-protocol member, 0: a classic member of a mixed group). Needs DESCRIBE on the
group (GROUP_AUTHORIZATION_FAILED) and on every topic its members subscribe to or are assigned
(else TOPIC_AUTHORIZATION_FAILED for the group), as Kafka; authorized operations on request. An
unknown group, or one of the classic type, is GROUP_ID_NOT_FOUND; NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS as for every group API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...coordinator.assignors import Assignment
from ...coordinator.consumer_group import ConsumerGroup, ConsumerMember
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names, authorized_operations, denial
from ..context import RequestContext

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1

CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # MemberType: which protocol the member speaks
NOT_PROVIDED = -2147483648

G = TypeVar("G")


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    described = tuple(_describe(ctx, module, group_id, request.include_authorized_operations)
                      for group_id in request.group_ids)
    return make(response_class(API_KEY, ctx.api_version), groups=described)


def _describe(ctx: RequestContext, module: Any, group_id: str, with_operations: bool) -> Any:
    return describe_group(ctx, module, group_id, with_operations, group_coordinator(ctx.broker).consumer_group,
                          _topics_of, lambda group: _fields(ctx, module, group))


def describe_group(ctx: RequestContext, module: Any, group_id: str, with_operations: bool,
                   find: Callable[[str], G | None], topics_of: Callable[[G], set[str]],
                   fields: Callable[[G], dict[str, Any]]) -> Any:
    """One group's DescribedGroup, for ConsumerGroupDescribe and ShareGroupDescribe alike: the
    checks both make (DESCRIBE on the group, the coordinator, the group of that type, DESCRIBE on
    every topic `topics_of` it), then the `fields` (state, epochs, assignor, members) of its type."""
    def failed(code: ErrorCode, message: str | None = None) -> Any:
        return make(module.DescribedGroup, error_code=code, error_message=message, group_id=group_id,
                    group_state="Dead", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                    authorized_operations=NOT_PROVIDED)

    refused = denial(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
    if refused is not None:
        return failed(refused.code)
    try:
        group_coordinator(ctx.broker).check_coordinator(group_id)
    except KafkaApiError as refused:
        return failed(refused.code)
    group = find(group_id)
    if group is None:
        return failed(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
    topics = topics_of(group)
    if authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics) != topics:
        return failed(ErrorCode.topic_authorization_failed,
                      "The group has subscribed topics that are not authorized.")
    return make(module.DescribedGroup, error_code=ErrorCode.none, group_id=group_id, **fields(group),
                authorized_operations=authorized_operations(ctx, ResourceType.GROUP, group_id, with_operations))


def _fields(ctx: RequestContext, module: Any, group: ConsumerGroup) -> dict[str, Any]:
    members = tuple(_member(ctx, module, member, group.target.get(member.member_id, {}))
                    for member in group.members.values())
    return {"group_state": group.state.value, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch, "assignor_name": group.assignor, "members": members}


def _topics_of(group: ConsumerGroup) -> set[str]:
    topics = group.subscribed_topics()
    for member in group.members.values():
        topics |= set(member.assigned) | set(group.target.get(member.member_id, {}))
    return topics


def _member(ctx: RequestContext, module: Any, member: ConsumerMember, target: Assignment) -> Any:
    return make(module.Member, member_id=member.member_id, instance_id=member.instance_id,
                rack_id=member.rack_id, member_epoch=member.member_epoch, client_id=member.client_id,
                client_host=member.client_host, subscribed_topic_names=member.subscribed_topics,
                subscribed_topic_regex=member.subscribed_regex, assignment=_assignment(ctx, module, member.assigned),
                target_assignment=_assignment(ctx, module, target),
                member_type=CONSUMER_MEMBER if member.classic is None else CLASSIC_MEMBER)


def _assignment(ctx: RequestContext, module: Any, assignment: Assignment) -> Any:
    topics = []
    for name, partitions in sorted(assignment.items()):
        metadata = ctx.broker.metadata.topic(name)
        if metadata is not None:
            topics.append(make(module.TopicPartitions, topic_id=metadata.uuid, topic_name=name,
                               partitions=tuple(sorted(partitions))))
    return make(module.Assignment, topic_partitions=tuple(topics))
