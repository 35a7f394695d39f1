"""Metadata (key 3): serves v0–v13.

Brokers, cluster id, controller, and per topic its id and partitions (leader, leader epoch,
replicas, ISR). An empty/null topic list (v1+: null) means all topics. Unknown topics are
created when `auto.create.topics.enable` is on and the request allows it (v4+), with
`num.partitions`; invalid names get INVALID_TOPIC_EXCEPTION. Encoded responses for the
all-topics request are cached until metadata changes (encoding is the slow part), and each
topic's encoded part until that topic changes.

With an authorizer (as Kafka's KafkaApis): listing all topics lists only those the principal
may Describe; a named topic it may not Describe is TOPIC_AUTHORIZATION_FAILED; auto-creating one
needs Create on the cluster or on the topic (TOPIC_AUTHORIZATION_FAILED otherwise).

Each broker is given by its endpoint on the listener the request came in on; brokers without
that listener are left out, and a partition whose live leader lacks it answers
LISTENER_NOT_FOUND with no leader, as Kafka does.

`include_topic_authorized_operations` (v8+) and `include_cluster_authorized_operations` (v8–v10)
report the principal's operations (without an authorizer: every operation the resource type
supports); INT32_MIN when not requested. Cached all-topics answers are per principal and host
when an authorizer is on.
"""

from __future__ import annotations

import io
import uuid
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode
from kio.serial.writers import write_unsigned_varint

from ...errors import KafkaApiError, TopicAuthorizationError
from ...protocol.codec import encode, is_flexible, make, response_class, response_module
from ...security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ..authorization import authorize, authorize_cluster, authorized_names, authorized_operations, denial, require
from ..context import RawResponse, RequestContext
from ..topics import ensure_topic

API_KEY = 3
# All-topics answers whose per-topic parts are kept (one per listener, version and, under an
# authorizer, principal and client host): they outlive topic changes, so their number is bounded.
MAX_CACHED_ANSWERS = 64
MIN_VERSION = 0
MAX_VERSION = 13

_ZERO_UUID = uuid.UUID(int=0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    version = ctx.api_version
    operations = _Operations(
        topic=bool(getattr(request, "include_topic_authorized_operations", False)),
        cluster=bool(getattr(request, "include_cluster_authorized_operations", False)),
    )
    key: tuple[object, ...] = (ctx.listener_name, version, operations)
    if broker.authorizer is not None:
        key = (*key, ctx.principal, ctx.client_host)
    if request.topics is None or (version == 0 and not request.topics):
        cached = broker.metadata_cache.get(key)
        if cached is not None:
            return cached
        names = sorted(authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, broker.metadata.topics()))
        response = RawResponse(_encode_topics(ctx, names, operations, key, every=True))
        broker.metadata_cache[key] = response
        return response
    allow_create = getattr(request, "allow_auto_topic_creation", True)
    wanted = []
    for topic in request.topics:
        name = topic.name
        if name is None and version < 12:  # Kafka: topic ids are not supported before v12
            wanted.append(("", ErrorCode.invalid_request))
            continue
        if name is None:
            resolved = broker.metadata.topic_by_id(str(topic.topic_id))
            refused = None if resolved is None else denial(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                                           resolved.name)
            if refused is not None:
                wanted.append((None, refused.code))
                continue
            wanted.append((resolved.name if resolved else None, ErrorCode.none if resolved else
                           ErrorCode.unknown_topic_id))
            continue
        try:
            await _describe_or_create(ctx, name, allow_create)
        except KafkaApiError as exc:
            wanted.append((name, exc.code))
        else:
            wanted.append((name, ErrorCode.none))
    if wanted and all(name is not None and error is ErrorCode.none for name, error in wanted):
        names = list(dict.fromkeys(name for name, _ in wanted if name is not None))  # Kafka's set of topics
        return RawResponse(_encode_topics(ctx, names, operations, key, every=False))
    return _build(ctx, wanted, operations)


async def _describe_or_create(ctx: RequestContext, name: str, allow_create: bool) -> None:
    """Describe a named topic, after creating it if it is unknown and may be; the refusal to
    answer for it raised."""
    require(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
    auto_create = allow_create and ctx.broker.config["auto.create.topics.enable"]
    if auto_create and ctx.broker.metadata.topic(name) is None and not _may_create(ctx, name):
        raise TopicAuthorizationError(f"Not authorized to CREATE TOPIC {name}")
    await ensure_topic(ctx.broker, name, allow_create)


def _may_create(ctx: RequestContext, name: str) -> bool:
    return authorize_cluster(ctx, AclOperation.CREATE) or \
        authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, name)


class _Operations(NamedTuple):
    """Whether the client asked for topic and cluster authorized operations."""

    topic: bool
    cluster: bool


def _build(ctx: RequestContext, wanted: list[tuple[str | None, ErrorCode]], operations: _Operations) -> Any:
    broker = ctx.broker
    module = response_module(API_KEY, ctx.api_version)
    endpoints = {b.broker_id: (b.endpoint(ctx.listener_name), b.rack) for b in broker.metadata.brokers()}
    brokers = tuple(
        make(module.MetadataResponseBroker, node_id=broker_id, host=endpoint.host, port=endpoint.port, rack=rack)
        for broker_id, (endpoint, rack) in endpoints.items() if endpoint is not None
    )
    reachable = {broker_id for broker_id, (endpoint, _) in endpoints.items() if endpoint is not None}
    topics = tuple(
        _topic(module, broker, name, error,
               authorized_operations(ctx, ResourceType.TOPIC, name or "", operations.topic), set(endpoints), reachable)
        for name, error in wanted)
    return make(
        response_class(API_KEY, ctx.api_version), brokers=brokers,
        cluster_id=broker.metadata.cluster_id, controller_id=broker.metadata.controller_id, topics=topics,
        cluster_authorized_operations=authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME,
                                                            operations.cluster),
        error_code=ErrorCode.none,
    )


def _encode_topics(ctx: RequestContext, names: list[str], operations: _Operations, key: tuple[object, ...],
                   every: bool) -> list[bytes]:
    """The answer for topics `names` (`every`: all topics), each topic's part encoded again only
    when the topic (or the failed replicas) changed since an answer for `key` encoded it:
    building and encoding 10,000 partitions took 1-2.8 s on a loaded 2-core machine, and one ISR
    change anywhere dropped the whole cached answer. A client naming its topics is served from
    the same parts (librdkafka names all of a producer's topics: at 100,000 partitions each of
    its requests held a broker's event loop for seconds, long enough to time out its
    followers' fetches). The topics are spliced into the encoding of the answer without any
    (same fields, an empty array)."""
    broker = ctx.broker
    module = response_module(API_KEY, ctx.api_version)
    endpoints = {b.broker_id: b.endpoint(ctx.listener_name) for b in broker.metadata.brokers()}
    reachable = {broker_id for broker_id, endpoint in endpoints.items() if endpoint is not None}
    failed = broker.metadata.offline_replicas()
    known = broker.metadata_topic_cache.get(key, {})
    parts: dict[str, tuple[Any, object, bytes]] = {}
    for name in names:
        metadata = broker.metadata.topic(name)
        cached = known.get(name)
        if cached is None or cached[0] is not metadata or cached[1] is not failed:
            topic = _topic(module, broker, name, ErrorCode.none,
                           authorized_operations(ctx, ResourceType.TOPIC, name, operations.topic),
                           set(endpoints), reachable)
            cached = (metadata, failed, b"".join(encode(topic)))
        parts[name] = cached
    if key not in broker.metadata_topic_cache and len(broker.metadata_topic_cache) >= MAX_CACHED_ANSWERS:
        broker.metadata_topic_cache.clear()  # with ACLs a key per principal and host: keep them few
    if every:
        broker.metadata_topic_cache[key] = parts  # the parts of topics gone meanwhile go
    else:
        broker.metadata_topic_cache.setdefault(key, {}).update(parts)
    empty = b"".join(encode(_build(ctx, [], operations)))
    flexible = is_flexible(API_KEY, ctx.api_version)
    after = (4 if 8 <= ctx.api_version <= 10 else 0) + (2 if ctx.api_version >= 13 else 0) + flexible
    before = len(empty) - after - (1 if flexible else 4)  # an empty array: its count alone
    count = _uvarint(len(names) + 1) if flexible else len(names).to_bytes(4, "big")
    return [empty[:before], count, *(part for _, _, part in parts.values()), empty[len(empty) - after:]]


def _uvarint(value: int) -> bytes:
    """Kafka's unsigned varint (a compact array's count + 1)."""
    out = io.BytesIO()
    write_unsigned_varint(out, value)
    return out.getvalue()


def _topic(module: Any, broker: Any, name: str | None, error: ErrorCode, operations: int, live: set[int],
           reachable: set[int]) -> Any:
    """`live`: the registered brokers; `reachable`: those with an endpoint on the client's listener."""
    metadata = broker.metadata.topic(name) if name is not None and error is ErrorCode.none else None
    if metadata is None:
        return make(
            module.MetadataResponseTopic, error_code=error, name=name, topic_id=_ZERO_UUID,
            is_internal=False, partitions=(), topic_authorized_operations=operations,
        )
    failed = broker.metadata.offline_replicas()  # replicas in failed log dirs
    partitions = tuple(
        make(
            module.MetadataResponsePartition, partition_index=index,
            error_code=_leader_error(state.leader, live, reachable),
            leader_id=state.leader if state.leader in reachable else -1, leader_epoch=state.leader_epoch,
            replica_nodes=tuple(state.replicas), isr_nodes=tuple(state.isr),
            offline_replicas=tuple(b for b in state.replicas
                                   if b not in live or (name, index) in failed.get(b, ())),
        )
        for index, state in enumerate(metadata.partitions)
    )
    return make(
        module.MetadataResponseTopic, error_code=ErrorCode.none, name=name,
        topic_id=metadata.uuid, is_internal=metadata.internal, partitions=partitions,
        topic_authorized_operations=operations,
    )


def _leader_error(leader: int, live: set[int], reachable: set[int]) -> ErrorCode:
    if leader in reachable:
        return ErrorCode.none
    return ErrorCode.listener_not_found if leader in live else ErrorCode.leader_not_available
