"""DescribeLogDirs (key 35): serves v1–v4.

One result per log dir (`log.dirs`, absolute paths, in the configured order), each with every
partition it holds that the request names (null topics: all), with its size in bytes and its
offset lag (Kafka: max(HW - LEO, 0), 0 for a leader). Partitions this broker does not host are
left out, as Kafka leaves them out. v3+ has a top-level error code (always NONE: no
authorizer); v4+ each volume's total and usable bytes. A log dir that cannot be read answers
KAFKA_STORAGE_ERROR for it (Kafka's answer for an offline dir), as does a log dir that failed
(offline until the broker restarts).
"""

from __future__ import annotations

import os
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..authorization import require_cluster
from ..context import RequestContext

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    require_cluster(ctx, AclOperation.DESCRIBE)
    by_dir = _partitions_by_dir(ctx, module, _wanted(request))
    offline = ctx.broker.logs.offline_dirs
    results = tuple(_describe_dir(module, log_dir, by_dir[log_dir], log_dir in offline)
                    for log_dir in ctx.broker.logs.log_dirs)
    return make(response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none, results=results)


def _wanted(request: Any) -> dict[str, set[int]] | None:
    """Requested partitions per topic; None for all."""
    if request.topics is None:
        return None
    wanted: dict[str, set[int]] = {}
    for topic in request.topics:
        wanted.setdefault(topic.topic, set()).update(topic.partitions)
    return wanted


def _partitions_by_dir(ctx: RequestContext, module: Any,
                       wanted: dict[str, set[int]] | None) -> dict[str, dict[str, list[Any]]]:
    """log dir -> topic -> the described partitions it holds."""
    logs = ctx.broker.logs
    by_dir: dict[str, dict[str, list[Any]]] = {log_dir: {} for log_dir in logs.log_dirs}
    for (topic, index), partition in sorted(ctx.broker.replicas.partitions.items()):
        if wanted is not None and index not in wanted.get(topic, ()):
            continue
        lag = max(partition.high_watermark - partition.log.log_end_offset, 0)
        by_dir[logs.log_dir_for(topic, index)].setdefault(topic, []).append(make(
            module.DescribeLogDirsPartition, partition_index=index, partition_size=partition.log.size_in_bytes,
            offset_lag=lag, is_future_key=False,
        ))
    return by_dir


def _describe_dir(module: Any, log_dir: str, by_topic: dict[str, list[Any]], offline: bool) -> Any:
    volume = None if offline else _volume(log_dir)
    if volume is None:
        return make(module.DescribeLogDirsResult, error_code=ErrorCode.kafka_storage_error, log_dir=log_dir,
                    topics=(), total_bytes=-1, usable_bytes=-1)
    topics = tuple(make(module.DescribeLogDirsTopic, name=name, partitions=tuple(partitions))
                   for name, partitions in by_topic.items())
    return make(
        module.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=log_dir, topics=topics,
        total_bytes=volume.f_blocks * volume.f_frsize, usable_bytes=volume.f_bavail * volume.f_frsize,
    )


def _volume(log_dir: str) -> os.statvfs_result | None:
    try:
        return os.statvfs(log_dir)
    except OSError:
        return None
