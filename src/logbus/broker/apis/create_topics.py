"""CreateTopics (key 19): serves v2–v7.

-1 partitions or replication factor take the broker defaults (`num.partitions`,
`default.replication.factor`, v4+). Errors per topic: TOPIC_ALREADY_EXISTS,
INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR (more replicas than
brokers), INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, INVALID_REQUEST (duplicate names).
`validate_only` checks without creating. v5+ returns the topic's resulting configs, v7+ its
id (all zeros when only validated). Under a controller_mutation_rate quota, v6+ answers
THROTTLING_QUOTA_EXCEEDED for a topic while the client's bucket is empty (KIP-599).

The request's topics are checked in order (the partition budget and quota counting the earlier
ones), then written together; each answer waits until the topic is in this broker's metadata,
for `timeout_ms` (at least the metadata store's usual bound), and until the topic's
replicas on this broker are served (their logs are created in the I/O threads), for
`timeout_ms` (at least 30 s).

Bounds, as Kafka's controller has them: a request asking for more than 10,000 partitions in all
(explicit assignments count one each) gets POLICY_VIOLATION for every topic and creates nothing;
a topic that would take the broker past `max.partitions` gets POLICY_VIOLATION.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from ...config import describe_topic_configs, validate_topic_configs
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize_cluster, require
from ..context import RequestContext
from ..throttling import record_mutation
from ..topics import (
    check_partition_budget,
    check_replication_factor,
    check_request_partitions,
    validate_topic_name,
)

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7

NO_TOPIC_ID = uuid.UUID(int=0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    counts = Counter(topic.name for topic in request.topics)
    try:
        check_request_partitions(sum(_requested_partitions(ctx, topic) for topic in request.topics))
    except KafkaApiError as exc:
        return make(response_class(API_KEY, ctx.api_version),
                    topics=tuple(_result(module, ctx, topic.name, error=exc) for topic in request.topics))
    results: list[Any] = [None] * len(request.topics)
    creations = []  # (position, topic, its checked sizes and configs)
    reserved = 0  # partitions of this request's topics checked before, not created yet
    for position, topic in enumerate(request.topics):
        try:
            if counts[topic.name] > 1:
                raise KafkaApiError(ErrorCode.invalid_request, f"Topic {topic.name} named twice")
            checked = _check(ctx, topic, reserved, request.validate_only)
        except KafkaApiError as exc:
            results[position] = _result(module, ctx, topic.name, error=exc)
            continue
        if request.validate_only:
            results[position] = _result(module, ctx, topic.name, created=(*checked, NO_TOPIC_ID))
            continue
        reserved += checked[0]
        creations.append((position, topic, checked))
    # The topics are written together: one after another, each waited for its watch round trip
    # and its logs on this broker, and 2,000 partitions in 20 topics took 20 s.
    wait_s = request.timeout.total_seconds()
    created = await asyncio.gather(*(_create(ctx, topic, checked, wait_s) for _, topic, checked in creations),
                                   return_exceptions=True)
    for (position, topic, _), outcome in zip(creations, created, strict=True):
        if isinstance(outcome, KafkaApiError):
            results[position] = _result(module, ctx, topic.name, error=outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            results[position] = _result(module, ctx, topic.name, created=outcome)
    return make(response_class(API_KEY, ctx.api_version), topics=tuple(results))


def _check(ctx: RequestContext, topic: Any, reserved: int, validate_only: bool) -> tuple[int, int, dict[str, str]]:
    """The topic's partitions, replication factor and configs, if it may be created (KafkaApiError
    otherwise; counted against the client's mutation quota unless `validate_only`); `reserved`:
    partitions the request's earlier topics will add."""
    broker = ctx.broker
    if not authorize_cluster(ctx, AclOperation.CREATE):
        require(ctx, AclOperation.CREATE, ResourceType.TOPIC, topic.name)
    validate_topic_name(topic.name)
    if broker.metadata.topic(topic.name) is not None:
        raise KafkaApiError(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
    partitions, replication = _sizes(broker, topic)
    configs = validate_topic_configs({c.name: c.value for c in topic.configs}, broker.config)
    check_partition_budget(broker, partitions + reserved)
    if not validate_only:
        record_mutation(ctx, partitions)
    return partitions, replication, configs


async def _create(ctx: RequestContext, topic: Any, checked: tuple[int, int, dict[str, str]],
                  wait_s: float) -> tuple[int, int, dict, uuid.UUID]:
    partitions, replication, configs = checked
    assignments = [list(a.broker_ids) for a in sorted(topic.assignments, key=lambda a: a.partition_index)]
    created = await ctx.broker.metadata.create_topic(topic.name, partitions, replication, configs,
                                                     assignments=assignments or None, wait_s=wait_s)
    await ctx.broker.replicas.wait_opened(topic.name, wait_s)  # its replicas here are served, within timeout_ms
    return partitions, replication, configs, created.uuid


def _requested_partitions(ctx: RequestContext, topic: Any) -> int:
    """Partitions `topic` asks for, counted as Kafka's controller counts them for its per-request bound."""
    if topic.assignments:
        return len(topic.assignments)
    if topic.num_partitions == -1:
        return ctx.broker.config["num.partitions"]
    return max(topic.num_partitions, 0)


def _sizes(broker: Any, topic: Any) -> tuple[int, int]:
    if topic.assignments:
        replicas = {len(a.broker_ids) for a in topic.assignments}
        known = {b.broker_id for b in broker.metadata.brokers()}
        indexes = sorted(a.partition_index for a in topic.assignments)
        valid = len(replicas) == 1 and indexes == list(range(len(indexes))) and all(
            set(a.broker_ids) <= known and len(set(a.broker_ids)) == len(a.broker_ids)
            for a in topic.assignments
        )
        if not valid or topic.num_partitions != -1 or topic.replication_factor != -1:
            raise KafkaApiError(ErrorCode.invalid_replica_assignment, "Invalid replica assignment")
        return len(indexes), replicas.pop()
    partitions = topic.num_partitions
    replication = topic.replication_factor
    if partitions == -1:
        partitions = broker.config["num.partitions"]
    if replication == -1:
        replication = broker.config["default.replication.factor"]
    if partitions <= 0:
        raise KafkaApiError(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
    if replication <= 0:
        raise KafkaApiError(
            ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
        )
    check_replication_factor(broker, replication)
    return partitions, replication


def _result(module: Any, ctx: RequestContext, name: str, *, created: tuple | None = None,
            error: KafkaApiError | None = None) -> Any:
    if error is not None:
        return make(
            module.CreatableTopicResult, name=name, error_code=error.code,
            error_message=error.message, topic_config_error_code=0, num_partitions=-1,
            replication_factor=-1, configs=None, topic_id=NO_TOPIC_ID,
        )
    partitions, replication, overrides, topic_id = created
    configs = ()
    if hasattr(module, "CreatableTopicConfigs"):  # v5+ only
        configs = tuple(
            make(module.CreatableTopicConfigs, name=c.name, value=c.text, read_only=False,
                 config_source=int(c.source), is_sensitive=False)
            for c in describe_topic_configs(ctx.broker.config, overrides)
        )
    return make(
        module.CreatableTopicResult, name=name, error_code=ErrorCode.none, error_message=None,
        topic_config_error_code=0, num_partitions=partitions, replication_factor=replication,
        configs=configs, topic_id=topic_id,
    )
