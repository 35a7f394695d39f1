"""DeleteGroups (key 42): serves v0–v2.

Only an Empty group can go (NON_EMPTY_GROUP otherwise; GROUP_ID_NOT_FOUND when unknown):
tombstones for its offsets and its metadata are written to __consumer_offsets; a share group's
share-partitions here lose their state. With an
authorizer each group needs Delete (GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from ...coordinator import group_coordinator
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import denial
from ..context import RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    coordinator = group_coordinator(ctx.broker)
    results = []
    for group_id in request.groups_names:
        refused = denial(ctx, AclOperation.DELETE, ResourceType.GROUP, group_id)
        code = refused.code if refused is not None else await coordinator.delete_group(group_id)
        results.append(make(module.DeletableGroupResult, group_id=group_id, error_code=code))
    return make(response_class(API_KEY, ctx.api_version), results=tuple(results))


async def _delete(ctx: RequestContext, group_id: str) -> ErrorCode:
    """A share group goes with its share-partitions' state here, as Kafka deletes its share state."""
    coordinator = group_coordinator(ctx.broker)
    share = coordinator.share_group(group_id) is not None
    error = await coordinator.delete_group(group_id)
    if share and error is ErrorCode.none:
        ctx.broker.share_partitions.forget(group_id)
    return error
