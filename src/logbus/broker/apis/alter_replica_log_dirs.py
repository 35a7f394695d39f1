"""AlterReplicaLogDirs (key 34): serves v1–v2.

Moves replicas between this broker's log directories. logbus keeps every partition in its one
data dir, so the only destination there is: naming it is a no-op that succeeds (NONE), as in
Kafka when the replica is already there. Errors per partition, as Kafka answers them:
LOG_DIR_NOT_FOUND for a path that is not a configured log dir (compared as absolute paths),
REPLICA_NOT_AVAILABLE for a partition this broker does not host. A partition named twice takes
the last destination given, as Kafka's map of partition to directory does.
"""

from __future__ import annotations

import os
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import make, response_class, response_module
from ..context import RequestContext

API_KEY = 34
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    destinations: dict[tuple[str, int], str] = {}
    for directory in request.dirs:
        for topic in directory.topics:
            for index in topic.partitions:
                destinations[(topic.name, index)] = directory.path
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), path in destinations.items():
        by_topic.setdefault(topic, []).append(make(
            module.AlterReplicaLogDirPartitionResult, partition_index=index, error_code=_move(ctx, topic, index, path),
        ))
    results = tuple(make(module.AlterReplicaLogDirTopicResult, topic_name=name, partitions=tuple(partitions))
                    for name, partitions in by_topic.items())
    return make(response_class(API_KEY, ctx.api_version), results=results)


def _move(ctx: RequestContext, topic: str, index: int, path: str) -> ErrorCode:
    if os.path.abspath(path) != ctx.broker.data_dir:
        return ErrorCode.log_dir_not_found
    if ctx.broker.replicas.get(topic, index) is None:
        return ErrorCode.replica_not_available
    return ErrorCode.none
