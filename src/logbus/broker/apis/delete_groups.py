"""DeleteGroups (key 42): serves v0–v2.

Only an Empty group can go (NON_EMPTY_GROUP otherwise; GROUP_ID_NOT_FOUND when unknown):
tombstones for its offsets and its metadata are written to __consumer_offsets; a share group's
persisted share state is deleted first (DeleteShareGroupState). With an authorizer each group
needs Delete (GROUP_AUTHORIZATION_FAILED).
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

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    coordinator = group_coordinator(ctx.broker)
    results = []
    for group_id in request.groups_names:
        try:
            require(ctx, AclOperation.DELETE, ResourceType.GROUP, group_id)
            await coordinator.delete_group(group_id)
        except KafkaApiError as refused:
            code = refused.code
        else:
            code = ErrorCode.none
        results.append(make(module.DeletableGroupResult, group_id=group_id, error_code=code))
    return make(response_class(API_KEY, ctx.api_version), results=tuple(results))

