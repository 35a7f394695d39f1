"""AlterReplicaLogDirs (key 34): serves v1–v2.

Moves replicas between this broker's log dirs (`log.dirs`). Per partition, in Kafka's order:
LOG_DIR_NOT_FOUND for a path that is not a configured log dir (compared as absolute paths);
for a partition this broker does not host, REPLICA_NOT_AVAILABLE, and the dir is remembered so
that the partition is created there if it comes (Kafka's preferred log dir); NONE when the
partition is already in the named dir. Moving a hosted partition to another dir needs Kafka's
future-replica machinery (copy while serving, then swap), which logbus does not have: it
answers KAFKA_STORAGE_ERROR, as Kafka does when it cannot create the future replica, and
moves nothing (to move one, stop the broker and move the `<topic>-<partition>` directory; the
next start finds it in any log dir). A partition named twice takes the last destination given,
as Kafka's map of partition to directory does.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ...errors import KafkaApiError, KafkaStorageError, LogDirNotFoundError, ReplicaNotAvailableError, code_of
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..authorization import require_cluster
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
    try:
        require_cluster(ctx, AclOperation.ALTER)
    except KafkaApiError as refused:
        codes = dict.fromkeys(destinations, refused.code)
    else:
        codes = {(topic, index): code_of(functools.partial(_move, ctx, topic, index, path))
                 for (topic, index), path in destinations.items()}
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append(make(
            module.AlterReplicaLogDirPartitionResult, partition_index=index, error_code=code))
    results = tuple(make(module.AlterReplicaLogDirTopicResult, topic_name=name, partitions=tuple(partitions))
                    for name, partitions in by_topic.items())
    return make(response_class(API_KEY, ctx.api_version), results=results)


def _move(ctx: RequestContext, topic: str, index: int, path: str) -> None:
    """Check one partition's move (nothing moves: see the module docstring); raises its refusal."""
    logs = ctx.broker.logs
    destination = os.path.abspath(path) if path else ""
    if destination not in logs.log_dirs:
        raise LogDirNotFoundError(f"{path!r} is not a log dir of this broker")
    if ctx.broker.replicas.get(topic, index) is None:
        logs.prefer_log_dir(topic, index, destination)
        raise ReplicaNotAvailableError(f"{topic}-{index} is not hosted here")
    if logs.log_dir_for(topic, index) != destination:
        raise KafkaStorageError(f"{topic}-{index} cannot move to another log dir while the broker runs")
