"""ListPartitionReassignments (key 46): serves v0.

The partitions (all, or those named) with a reassignment in progress: their replicas and the
replicas being added and removed. None on a single broker.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..authorization import require_cluster
from ..context import RequestContext

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    require_cluster(ctx, AclOperation.DESCRIBE)
    wanted = None if request.topics is None else [
        (topic.name, index) for topic in request.topics for index in topic.partition_indexes
    ]
    by_topic: dict[str, list[Any]] = {}
    for (name, index), state in ctx.broker.metadata.list_reassignments(wanted).items():
        by_topic.setdefault(name, []).append(make(
            module.OngoingPartitionReassignment, partition_index=index, replicas=tuple(state.replicas),
            adding_replicas=tuple(state.adding_replicas), removing_replicas=tuple(state.removing_replicas)))
    return make(
        response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none, error_message=None,
        topics=tuple(make(module.OngoingTopicReassignment, name=name, partitions=tuple(partitions))
                     for name, partitions in by_topic.items()),
    )
