"""DeleteGroups (key 42): serves v0–v2.

Only an Empty group can go (NON_EMPTY_GROUP otherwise; GROUP_ID_NOT_FOUND when unknown):
tombstones for its offsets and its metadata are written to __consumer_offsets.
"""

from __future__ import annotations

from typing import Any

from ...coordinator import group_coordinator
from ...protocol.codec import make, response_class, response_module
from ..context import RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    coordinator = group_coordinator(ctx.broker)
    results = [
        make(module.DeletableGroupResult, group_id=group_id, error_code=await coordinator.delete_group(group_id))
        for group_id in request.groups_names
    ]
    return make(response_class(API_KEY, ctx.api_version), results=tuple(results))
