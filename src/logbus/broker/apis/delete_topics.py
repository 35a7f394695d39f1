"""DeleteTopics (key 20): serves v1–v6.

v1–v5 name topics; v6 names them or gives their ids (not both). The topic leaves the metadata
store at once; the response waits until this broker has removed the partitions' directories,
so the name can be reused right away. Errors per topic: UNKNOWN_TOPIC_OR_PARTITION,
UNKNOWN_TOPIC_ID (v6), INVALID_REQUEST (name and id both, or one topic named twice),
TOPIC_DELETION_DISABLED (`delete.topic.enable=false`), INVALID_REQUEST for an internal topic
(`__consumer_offsets`: deleting it would lose every committed offset), THROTTLING_QUOTA_EXCEEDED
(v5+) while the client's controller_mutation_rate bucket is empty. Error messages from v5.
With an authorizer each topic needs Delete (TOPIC_AUTHORIZATION_FAILED), decided before whether
it exists, as Kafka.

The deletion is written to the metadata store first; only once that succeeded do the partitions
close and their files go. A failed write (e.g. a full disk) answers KAFKA_STORAGE_ERROR and
leaves the topic fully in place, so the same request can be retried.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.metadata import TopicMetadata
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import require
from ..context import RequestContext
from ..throttling import record_mutation
from ..topics import refuse_internal

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6

NO_TOPIC_ID = uuid.UUID(int=0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    wanted = _wanted(request)
    counts = Counter(wanted)
    responses = []
    for name, topic_id in wanted:
        try:
            if counts[(name, topic_id)] > 1:
                raise KafkaApiError(ErrorCode.invalid_request, f"Topic {name or topic_id} named twice")
            topic = _resolve(ctx, name, topic_id)
            await _delete(ctx, topic)
            responses.append(_response(module, topic.name, topic.uuid))
        except KafkaApiError as exc:
            responses.append(_response(module, name, topic_id, exc))
    return make(response_class(API_KEY, ctx.api_version), responses=tuple(responses))


def _wanted(request: Any) -> list[tuple[str | None, uuid.UUID | None]]:
    """(name, id) per topic; v1–v5 give names only."""
    if hasattr(request, "topic_names"):
        return [(name, None) for name in request.topic_names]
    return [(t.name, None if t.topic_id in (None, NO_TOPIC_ID) else t.topic_id) for t in request.topics]


def _resolve(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None) -> TopicMetadata:
    metadata = ctx.broker.metadata
    if name is not None and topic_id is not None:
        raise KafkaApiError(ErrorCode.invalid_request, "Give a topic name or a topic id, not both")
    if topic_id is not None:
        topic = metadata.topic_by_id(str(topic_id))
        if topic is None:
            raise KafkaApiError(ErrorCode.unknown_topic_id, f"Unknown topic id {topic_id}")
        require(ctx, AclOperation.DELETE, ResourceType.TOPIC, topic.name)
        return topic
    require(ctx, AclOperation.DELETE, ResourceType.TOPIC, name or "")  # before existence: nothing leaks
    topic = metadata.topic(name or "")
    if topic is None:
        raise KafkaApiError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
    return topic


async def _delete(ctx: RequestContext, topic: TopicMetadata) -> None:
    broker = ctx.broker
    if not broker.config["delete.topic.enable"]:
        raise KafkaApiError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled (delete.topic.enable)")
    refuse_internal(topic, "deletion")
    record_mutation(ctx, len(topic.partitions))
    await broker.metadata.delete_topic(topic.name)
    await broker.replicas.wait_dropped(topic.name)


def _response(module: Any, name: str | None, topic_id: uuid.UUID | None, error: KafkaApiError | None = None) -> Any:
    return make(
        module.DeletableTopicResult, name=name, topic_id=topic_id or NO_TOPIC_ID,
        error_code=error.code if error else ErrorCode.none, error_message=error.message if error else None,
    )
