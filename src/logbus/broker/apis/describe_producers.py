"""DescribeProducers (key 61): serves v0, as Kafka 4.1 advertises it.

For each partition asked, the producers its log tracks (Kafka's ReplicaManager.activeProducerState):
producer id and epoch, the last sequence written (-1 when the producer has only markers here),
the timestamp of its last batch, the coordinator epoch of its last marker (-1 before any), and the
first offset of its open transaction (-1 when none is open). A follower answers from its own log,
as in Kafka (the admin client asks the leader unless told a broker). Errors, as Kafka's
KafkaApis.handleDescribeProducersRequest: INVALID_TOPIC_EXCEPTION for an illegal name,
UNKNOWN_TOPIC_OR_PARTITION for a topic or partition the cluster does not have,
NOT_LEADER_OR_FOLLOWER for a partition this broker holds no replica of.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.partition import Partition
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...protocol.records import NO_SEQUENCE
from ...security.acl import AclOperation, ResourceType
from ...storage.producer_state import ProducerEntry
from ..authorization import require
from ..context import RequestContext
from ..topics import validate_topic_name

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    topics = tuple(
        make(module.TopicResponse, name=topic.name, partitions=_describe_topic(ctx, module, topic))
        for topic in request.topics
    )
    return make(response_class(API_KEY, ctx.api_version), topics=topics)


def _describe_topic(ctx: RequestContext, module: Any, topic: Any) -> tuple:
    """Each asked partition's answer; a topic-level error answers for all of them."""
    try:
        validate_topic_name(topic.name)
        require(ctx, AclOperation.READ, ResourceType.TOPIC, topic.name)
    except KafkaApiError as refused:
        return tuple(_error(module, index, refused.code, refused.message) for index in topic.partition_indexes)
    metadata = ctx.broker.metadata.topic(topic.name)
    answers = []
    for index in topic.partition_indexes:
        if metadata is None or not 0 <= index < len(metadata.partitions):
            answers.append(_error(module, index, ErrorCode.unknown_topic_or_partition))
            continue
        try:  # any replica with the log answers (Kafka's activeProducerState)
            partition = ctx.broker.replicas.partition_to_read(topic.name, index, leader_only=False)
        except KafkaApiError as exc:
            answers.append(_error(module, index, exc.code))
            continue
        answers.append(make(module.PartitionResponse, partition_index=index, error_code=ErrorCode.none,
                            error_message=None, active_producers=_producers(module, partition)))
    return tuple(answers)


def _producers(module: Any, partition: Partition) -> tuple:
    return tuple(
        _producer(module, producer_id, entry)
        for producer_id, entry in partition.log.producer_state.producers.items()
    )


def _producer(module: Any, producer_id: int, entry: ProducerEntry) -> Any:
    return make(
        module.ProducerState, producer_id=producer_id, producer_epoch=entry.epoch,
        last_sequence=entry.batches[-1].last_seq if entry.batches else NO_SEQUENCE,
        last_timestamp=entry.last_timestamp, coordinator_epoch=entry.coordinator_epoch,
        current_txn_start_offset=-1 if entry.txn_first_offset is None else entry.txn_first_offset,
    )


def _error(module: Any, index: int, error: ErrorCode, message: str | None = None) -> Any:
    return make(module.PartitionResponse, partition_index=index, error_code=error, error_message=message,
                active_producers=())
