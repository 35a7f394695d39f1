"""CreatePartitions (key 37): serves v0–v3.

`count` is the topic's new total. Explicit `assignments` must name one replica list per new
partition, all of the topic's replication factor, of known and distinct brokers. `validate_only`
checks without growing. New partitions' logs open as the metadata store announces the change.
Errors per topic: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS (not more than now),
INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST (one topic named twice, or an internal topic),
POLICY_VIOLATION (more than 10,000 new partitions in the request, as Kafka's controller bounds
it, for every topic; or a topic that would take the broker past `max.partitions`);
THROTTLING_QUOTA_EXCEEDED (v3+) while the client's controller_mutation_rate bucket is empty.
"""

from __future__ import annotations

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
from ..topics import check_partition_budget, check_request_partitions, refuse_internal

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    counts = Counter(topic.name for topic in request.topics)
    try:
        check_request_partitions(sum(_added(ctx, wanted) for wanted in request.topics))
        refused = None
    except KafkaApiError as exc:
        refused = exc
    results = []
    for wanted in request.topics:
        error, message = ErrorCode.none, None
        try:
            if refused is not None:
                raise refused
            if counts[wanted.name] > 1:
                raise KafkaApiError(ErrorCode.invalid_request, f"Topic {wanted.name} named twice")
            await _grow(ctx, wanted, request.validate_only, request.timeout.total_seconds())
        except KafkaApiError as exc:
            error, message = exc.code, exc.message
        results.append(make(
            module.CreatePartitionsTopicResult, name=wanted.name, error_code=error, error_message=message,
        ))
    return make(response_class(API_KEY, ctx.api_version), results=tuple(results))


def _added(ctx: RequestContext, wanted: Any) -> int:
    """New partitions `wanted` asks for (0 for an unknown topic, refused on its own)."""
    topic = ctx.broker.metadata.topic(wanted.name)
    return max(wanted.count - len(topic.partitions), 0) if topic is not None else 0


async def _grow(ctx: RequestContext, wanted: Any, validate_only: bool, wait_s: float) -> None:
    metadata = ctx.broker.metadata
    require(ctx, AclOperation.ALTER, ResourceType.TOPIC, wanted.name)
    topic = metadata.topic(wanted.name)
    if topic is None:
        raise KafkaApiError(ErrorCode.unknown_topic_or_partition, f"Topic {wanted.name} does not exist")
    refuse_internal(topic, "changing its partition count")
    current = len(topic.partitions)
    if wanted.count < current:
        raise KafkaApiError(
            ErrorCode.invalid_partitions,
            f"Topic currently has {current} partitions, which is higher than the requested {wanted.count}.",
        )
    if wanted.count == current:
        raise KafkaApiError(ErrorCode.invalid_partitions, f"Topic already has {current} partitions.")
    assignments = _assignments(ctx, topic, wanted)
    check_partition_budget(ctx.broker, wanted.count - current)
    if validate_only:
        return
    record_mutation(ctx, wanted.count - current)
    await metadata.add_partitions(topic.name, wanted.count, assignments)
    await ctx.broker.replicas.wait_opened(topic.name, wait_s)  # the new replicas here, within timeout_ms


def _assignments(ctx: RequestContext, topic: TopicMetadata, wanted: Any) -> list[list[int]] | None:
    if wanted.assignments is None:
        return None
    added = wanted.count - len(topic.partitions)
    replication = len(topic.partitions[0].replicas)
    known = {b.broker_id for b in ctx.broker.metadata.brokers()}
    replicas = [list(a.broker_ids) for a in wanted.assignments]
    if len(replicas) != added:
        raise KafkaApiError(
            ErrorCode.invalid_replica_assignment,
            f"Increasing the number of partitions by {added} but {len(replicas)} assignments provided.",
        )
    for brokers in replicas:
        if len(brokers) != replication or len(set(brokers)) != len(brokers) or not set(brokers) <= known:
            raise KafkaApiError(
                ErrorCode.invalid_replica_assignment,
                f"Invalid assignment {brokers}: {replication} distinct brokers of {sorted(known)} expected",
            )
    return replicas
