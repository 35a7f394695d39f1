"""ListGroups (key 16): serves v0–v5.

Every group this broker coordinates (Dead ones excluded); while a `__consumer_offsets`
partition is still loading, the groups loaded so far with COORDINATOR_LOAD_IN_PROGRESS, as Kafka answers.
v4+ filters by state names
(case-insensitive) and reports each group's state; v5+ filters by type ("classic", "consumer":
KIP-848 groups) and reports it. With an authorizer only the groups the principal may
Describe are listed (all of them with Describe on the cluster), as Kafka.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize_cluster, authorized_names
from ..context import RequestContext

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5

async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    coordinator = group_coordinator(ctx.broker)
    listed = []
    groups = coordinator.list_groups()
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in groups))
        groups = [g for g in groups if g.group_id in visible]
    for group in groups:
        if (states and group.state.lower() not in states) or (types and group.group_type not in types):
            continue
        listed.append(make(module.ListedGroup, group_id=group.group_id, protocol_type=group.protocol_type,
                           group_state=group.state, group_type=group.group_type))
    error = ErrorCode.coordinator_load_in_progress if coordinator.loading else ErrorCode.none
    return make(response_class(API_KEY, ctx.api_version), error_code=error, groups=tuple(listed))
