"""DescribeGroups (key 15): serves v0–v6.

State, protocol type and, when Stable, the selected protocol and each member's subscription
(for that protocol) and assignment; in other states members come without them, as Kafka
answers. An unknown group is described as Dead with no error before v6; v6+ answers
GROUP_ID_NOT_FOUND with a message; a consumer group (KIP-848) is answered as an unknown one, as
Kafka does. v3+ may ask for authorized operations: the principal's on the group (every group
operation without an authorizer). With an authorizer a group the principal may not Describe is
GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...coordinator.group import ClassicGroup, GroupState
from ...errors import GroupIdNotFound, KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_operations, require
from ..context import RequestContext

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6

NOT_PROVIDED = -2147483648


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    coordinator = group_coordinator(ctx.broker)
    described = []
    requested = getattr(request, "include_authorized_operations", False)
    for group_id in request.groups:
        try:
            require(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
            group = coordinator.describe(group_id)
        except KafkaApiError as refused:
            described.append(_describe(module, ctx.api_version, group_id, refused.code, None, NOT_PROVIDED))
            continue
        operations = authorized_operations(ctx, ResourceType.GROUP, group_id, requested)
        described.append(_describe(module, ctx.api_version, group_id, None, group, operations))
    return make(response_class(API_KEY, ctx.api_version), groups=tuple(described))


def _describe(module: Any, version: int, group_id: str, error: ErrorCode | None, group: ClassicGroup | None,
              operations: int) -> Any:
    fields: dict[str, Any] = {"group_id": group_id, "error_message": None, "authorized_operations": operations,
                              "group_state": GroupState.DEAD.value, "protocol_type": "", "protocol_data": "",
                              "members": ()}
    if error is not None:
        return make(module.DescribedGroup, error_code=error, **fields)
    if group is None:
        if version >= 6:
            fields["error_message"] = f"Group {group_id} not found."
            return make(module.DescribedGroup, error_code=GroupIdNotFound.code, **fields)
        return make(module.DescribedGroup, error_code=ErrorCode.none, **fields)
    stable = group.is_in(GroupState.STABLE)
    members = tuple(
        make(module.DescribedGroupMember, member_id=m.member_id, group_instance_id=m.group_instance_id,
             client_id=m.client_id, client_host=m.client_host,
             member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
             member_assignment=m.assignment if stable else b"")
        for m in group.members.values()
    )
    fields.update(group_state=group.state.value, protocol_type=group.protocol_type or "",
                  protocol_data=(group.protocol_name or "") if stable else "", members=members)
    return make(module.DescribedGroup, error_code=ErrorCode.none, **fields)
