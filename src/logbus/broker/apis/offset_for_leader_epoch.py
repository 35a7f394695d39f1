"""OffsetForLeaderEpoch (key 23): serves v2–v4.

For each partition: the largest leader epoch at or below the one asked and the offset where
it ended (the log end offset for the current epoch), from the log's leader-epoch cache. A
follower (v3+ `replica_id`) or a consumer (-1) uses it to find where its log diverges.
`current_leader_epoch` (-1: not checked) guards against stale leaders: lower than the
partition's epoch is FENCED_LEADER_EPOCH, higher is UNKNOWN_LEADER_EPOCH (checked before the
role, as Kafka's). Other errors, as Kafka's getPartitionOrError: UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER (a partition not hosted here, or not led), KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize_cluster, authorized_names
from ..context import RequestContext

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4

UNCHECKED_EPOCH = -1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    topics = []
    visible = {t.topic for t in request.topics} if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else \
        authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in request.topics))
    for topic in request.topics:
        results = tuple(
            _end_offset(module, ctx, topic.topic, wanted)
            if topic.topic in visible else _result(module, wanted, ErrorCode.topic_authorization_failed)
            for wanted in topic.partitions
        )
        topics.append(make(module.OffsetForLeaderTopicResult, topic=topic.topic, partitions=results))
    return make(response_class(API_KEY, ctx.api_version), topics=tuple(topics))


def _end_offset(module: Any, ctx: RequestContext, topic: str, wanted: Any) -> Any:
    """As Kafka's lastOffsetForLeaderEpoch: the partition as the replica manager finds it for a
    read by the leader (its epoch and role checks), then the end of the epoch asked for."""
    try:
        partition = ctx.broker.replicas.partition_to_read(topic, wanted.partition, wanted.current_leader_epoch)
    except KafkaApiError as exc:
        return _result(module, wanted, exc.code)
    epoch, end_offset = partition.log.end_offset_for_epoch(wanted.leader_epoch)
    return _result(module, wanted, ErrorCode.none, epoch, end_offset)


def _result(module: Any, wanted: Any, error: ErrorCode, epoch: int = -1, end_offset: int = -1) -> Any:
    return make(
        module.EpochEndOffset, error_code=error, partition=wanted.partition, leader_epoch=epoch,
        end_offset=end_offset,
    )
