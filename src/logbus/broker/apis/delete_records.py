"""DeleteRecords (key 21): serves v0–v2.

Advances each partition's log start offset to the offset given (-1: the high watermark);
the answer's low watermark is the log start offset afterwards (unchanged when the offset is
below it). Segments wholly below the new start are removed by the next retention pass, as
in Kafka. Errors per partition: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
OFFSET_OUT_OF_RANGE (negative other than -1, or above the high watermark).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.partition import Partition
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names
from ..context import RequestContext

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

HIGH_WATERMARK = -1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    topics = []
    deletable = authorized_names(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        results = tuple(
            _delete(module, ctx.broker.replicas.get(topic.name, wanted.partition_index), wanted)
            if topic.name in deletable else _result(module, wanted, ErrorCode.topic_authorization_failed)
            for wanted in topic.partitions
        )
        topics.append(make(module.DeleteRecordsTopicResult, name=topic.name, partitions=results))
    return make(response_class(API_KEY, ctx.api_version), topics=tuple(topics))


def _delete(module: Any, partition: Partition | None, wanted: Any) -> Any:
    if partition is None:
        return _result(module, wanted, ErrorCode.unknown_topic_or_partition)
    if not partition.is_leader:
        return _result(module, wanted, ErrorCode.not_leader_or_follower)
    offset = partition.high_watermark if wanted.offset == HIGH_WATERMARK else wanted.offset
    if offset < 0 or offset > partition.high_watermark:
        return _result(module, wanted, ErrorCode.offset_out_of_range)
    return _result(module, wanted, ErrorCode.none, partition.log.delete_records_before(offset))


def _result(module: Any, wanted: Any, error: ErrorCode, low_watermark: int = -1) -> Any:
    return make(
        module.DeleteRecordsPartitionResult, partition_index=wanted.partition_index,
        low_watermark=low_watermark, error_code=error,
    )
