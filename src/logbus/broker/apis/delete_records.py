"""DeleteRecords (key 21): serves v0–v2.

Advances each partition's log start offset to the offset given (-1: the high watermark), through
`ReplicaManager.delete_records` (Kafka's deleteRecords); the answer's low watermark is the log
start offset afterwards (unchanged when the offset is below it). As Kafka's
DelayedDeleteRecords, the answer waits (up to the request's timeout) until every replica on a
live broker has adopted the new log start from its fetches, so a failover after a successful
DeleteRecords never brings the records back. Segments wholly below the new start are removed by
the next retention pass, as in Kafka. Errors per partition:
UNKNOWN_TOPIC_OR_PARTITION (no such partition), NOT_LEADER_OR_FOLLOWER (not the leader, or
no replica here), KAFKA_STORAGE_ERROR (its log dir failed), OFFSET_OUT_OF_RANGE (negative
other than -1, or above the high watermark), REQUEST_TIMED_OUT (a follower did not follow in time).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaApiError, TopicAuthorizationError, code_of_awaited
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names
from ..context import RequestContext

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    timeout = max(request.timeout.total_seconds(), 0.0)
    deletable = authorized_names(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    waits = [
        asyncio.gather(*(
            _delete(module, ctx, topic.name, wanted, timeout)
            if topic.name in deletable else _answered(module, wanted, TopicAuthorizationError.code)
            for wanted in topic.partitions
        ))
        for topic in request.topics
    ]
    answers = await asyncio.gather(*waits)
    return make(response_class(API_KEY, ctx.api_version), topics=tuple(
        make(module.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(results))
        for topic, results in zip(request.topics, answers, strict=True)
    ))


async def _delete(module: Any, ctx: RequestContext, topic: str, wanted: Any, timeout: float) -> Any:
    """A refusal before the log start moved answers -1; one of the wait (as Kafka's
    DelayedDeleteRecords on a timeout) the new low watermark."""
    replicas = ctx.broker.replicas
    try:
        deleted = replicas.delete_records(topic, wanted.partition_index, wanted.offset)
    except KafkaApiError as exc:
        return _result(module, wanted, exc.code)
    error = await code_of_awaited(replicas.wait_for_low_watermark(deleted, timeout))
    return _result(module, wanted, error, deleted.low_watermark)


async def _answered(module: Any, wanted: Any, error: ErrorCode) -> Any:
    return _result(module, wanted, error)


def _result(module: Any, wanted: Any, error: ErrorCode, low_watermark: int = -1) -> Any:
    return make(
        module.DeleteRecordsPartitionResult, partition_index=wanted.partition_index,
        low_watermark=low_watermark, error_code=error,
    )
