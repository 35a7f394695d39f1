"""AlterPartitionReassignments (key 45): serves v0–v1.

Per partition the target replicas, or null to cancel a reassignment in progress (KIP-455). The
store checks each one (UNKNOWN_TOPIC_OR_PARTITION; INVALID_REPLICA_ASSIGNMENT for an empty list,
a broker named twice or a broker that is not alive; NO_REASSIGNMENT_IN_PROGRESS for a cancel with
nothing to cancel) and in a cluster hands the valid ones to the controller, which adds the new
replicas, moves leadership once they are in sync and drops the old ones. On one broker the only
valid target is that broker itself, which is already in place. Changes the store cannot hand to
the controller (ZooKeeper down) get the store's code, at the top level and per partition. v1's
`allow_replication_factor_change` is accepted: changing the replication factor is allowed either way.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..authorization import require_cluster
from ..context import RequestContext

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    require_cluster(ctx, AclOperation.ALTER)
    changes = {
        (topic.name, partition.partition_index): None if partition.replicas is None else list(partition.replicas)
        for topic in request.topics for partition in topic.partitions
    }
    refused: KafkaApiError | None = None
    try:
        results = await ctx.broker.metadata.alter_reassignments(changes) if changes else {}
    except KafkaApiError as exc:
        results, refused = dict.fromkeys(changes, exc.code), exc
    by_topic: dict[str, list[Any]] = {}
    for (name, index), code in results.items():
        error = ErrorCode.none if code is None else ErrorCode(code)
        by_topic.setdefault(name, []).append(make(
            module.ReassignablePartitionResponse, partition_index=index, error_code=error,
            error_message=None if code is None else error.name.upper()))
    return make(
        response_class(API_KEY, ctx.api_version), error_code=refused.code if refused else ErrorCode.none,
        error_message=refused.message if refused else None,
        allow_replication_factor_change=getattr(request, "allow_replication_factor_change", True),
        responses=tuple(make(module.ReassignableTopicResponse, name=name, partitions=tuple(partitions))
                        for name, partitions in by_topic.items()),
    )
