"""ListOffsets (key 2): serves v1–v10.

Special timestamps: -2 earliest (log start offset), -1 latest, -3 the record with the largest
timestamp (v7+), -4 earliest local (v8+, the log start offset here: there is no tiered storage),
-5 latest tiered (v9+: -1, nothing is tiered). Any other timestamp finds the first record at or
after it. As in Kafka's Partition.fetchOffsetForTimestamp, what a reader may fetch bounds the
answers: latest is the high watermark, or the last stable offset for read_committed (isolation
level 1, v2+), and a record found by timestamp (-3 included) at or past that bound gives offset -1.
A partition not hosted here answers as Kafka's getPartitionOrError: KAFKA_STORAGE_ERROR (its log
dir failed), NOT_LEADER_OR_FOLLOWER (no replica here) or UNKNOWN_TOPIC_OR_PARTITION; one hosted
is read through the replica manager's `partition_to_read` (Kafka's localLogWithEpochOrThrow):
a v4+ `current_leader_epoch` older than the partition's is FENCED_LEADER_EPOCH, a newer one
UNKNOWN_LEADER_EPOCH, and only the leader answers (NOT_LEADER_OR_FOLLOWER).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.partition import Partition
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names
from ..context import RequestContext

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 10

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
READ_COMMITTED = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED  # v2+
    topics = []
    visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        answers = []
        for wanted in topic.partitions:
            if topic.name not in visible:
                answers.append(_answer(module, wanted.partition_index, ErrorCode.topic_authorization_failed))
                continue
            try:  # v4+ names the leader epoch the client knows
                partition = ctx.broker.replicas.partition_to_read(
                    topic.name, wanted.partition_index, getattr(wanted, "current_leader_epoch", -1))
            except KafkaApiError as exc:
                answers.append(_answer(module, wanted.partition_index, exc.code))
                continue
            answers.append(_lookup(module, partition, wanted, read_committed))
        topics.append(make(module.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(answers)))
    return make(response_class(API_KEY, ctx.api_version), topics=tuple(topics))


def _lookup(module: Any, partition: Partition, wanted: Any, read_committed: bool) -> Any:
    index = wanted.partition_index
    log = partition.log
    timestamp = wanted.timestamp
    fetchable = partition.last_stable_offset if read_committed else partition.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        offset, found_ts = log.log_start_offset, -1
    elif timestamp == LATEST:
        offset, found_ts = fetchable, -1
    elif timestamp == LATEST_TIERED:
        offset, found_ts = -1, -1
    else:
        found = log.max_timestamp_offset() if timestamp == MAX_TIMESTAMP else (
            log.offset_for_timestamp(timestamp)
        )
        if found is None or found.offset >= fetchable:
            return _answer(module, index, ErrorCode.none)
        offset, found_ts = found.offset, found.timestamp
    epoch = log.epoch_for_offset(offset - 1 if timestamp == LATEST else offset)
    return _answer(module, index, ErrorCode.none, found_ts, offset, epoch)


def _answer(
    module: Any, index: int, error: ErrorCode, timestamp: int = -1, offset: int = -1,
    epoch: int = -1,
) -> Any:
    return make(
        module.ListOffsetsPartitionResponse, partition_index=index, error_code=error,
        timestamp=timestamp, offset=offset, leader_epoch=epoch, old_style_offsets=(),
    )
