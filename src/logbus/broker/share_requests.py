"""What ShareFetch and ShareAcknowledge (KIP-932) have in common: the share session a request
continues, the acknowledgements it carries, and the partition answers' leader fields.

A request's acknowledgements apply per partition, all or none (see cluster/share_partition.py):
a partition whose topic id is unknown answers UNKNOWN_TOPIC_ID, one this broker does not lead
NOT_LEADER_OR_FOLLOWER, one the principal may not Read TOPIC_AUTHORIZATION_FAILED, one the
group never fetched here UNKNOWN_TOPIC_OR_PARTITION, one whose offsets are not the member's
acquired records INVALID_RECORD_STATE, one whose write to the share coordinator failed that
error (nothing applied). Closing a session (epoch -1) releases the records its
member still holds on this broker, as Kafka's releaseSession.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..cluster.partition import Partition
from ..cluster.share_partition import AckBatch
from ..errors import KafkaApiError
from ..metrics.counters import ShareAcknowledgements
from ..protocol.codec import make
from ..security.acl import AclOperation, ResourceType
from .authorization import authorized_names
from .context import RequestContext
from .share_sessions import FINAL_EPOCH, INITIAL_EPOCH, SessionPartition, ShareSession


@dataclass(frozen=True, slots=True)
class Outcome:
    """An error code and message of one partition's answer (NONE: it went well)."""

    code: ErrorCode = ErrorCode.none
    message: str | None = None


OK = Outcome()


def check_request(group_id: str | None, member_id: str | None) -> None:
    if not group_id:
        raise KafkaApiError(ErrorCode.invalid_request, "GroupId can't be empty.")
    if not member_id:
        raise KafkaApiError(ErrorCode.invalid_request, "MemberId can't be empty.")


def session_of(ctx: RequestContext, group_id: str, member_id: str, epoch: int,
               named: Iterable[SessionPartition], forgotten: Iterable[SessionPartition] = ()) -> ShareSession:
    """The share session this request opens (epoch 0), continues, or closes (-1: closed by `finish`)."""
    cache = ctx.broker.share_sessions
    if epoch == INITIAL_EPOCH:
        return cache.open(group_id, member_id, named, ctx.close)
    session = cache.current(group_id, member_id, epoch)
    if epoch != FINAL_EPOCH:
        cache.update(session, named, forgotten)
    return session


def finish(ctx: RequestContext, session: ShareSession, epoch: int) -> None:
    """After the final request of a session: it goes, and its member's acquired records are released."""
    if epoch != FINAL_EPOCH:
        return
    ctx.broker.share_sessions.close(session)
    ctx.broker.share_partitions.release_member(session.group_id, session.member_id)


def topic_name(ctx: RequestContext, topic_id: uuid.UUID | None) -> str | None:
    metadata = ctx.broker.metadata.topic_by_id(str(topic_id)) if topic_id is not None else None
    return metadata.name if metadata is not None else None


def resolve(ctx: RequestContext, topic_id: uuid.UUID | None, index: int, readable: set[str]
            ) -> tuple[Partition | None, Outcome]:
    """The partition this broker leads for a share request, or why not."""
    name = topic_name(ctx, topic_id)
    if name is None:
        return None, Outcome(ErrorCode.unknown_topic_id)
    if name not in readable:
        return None, Outcome(ErrorCode.topic_authorization_failed)
    try:
        return ctx.broker.replicas.partition_to_read(name, index), OK
    except KafkaApiError as exc:
        return None, Outcome(exc.code, exc.message)


def readable_topics(ctx: RequestContext, topic_ids: Iterable[uuid.UUID | None]) -> set[str]:
    """The names of these topics the principal may Read."""
    names = {name for topic_id in topic_ids if (name := topic_name(ctx, topic_id)) is not None}
    if ctx.broker.authorizer is None:
        return names
    return authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, names)


async def acknowledge(ctx: RequestContext, group_id: str, member_id: str, topic_id: uuid.UUID | None, index: int,
                      batches: Iterable[Any], readable: set[str]) -> Outcome:
    """Apply one partition's acknowledgement batches (kio AcknowledgementBatch entities), once
    they are written (cluster/share_partitions.py)."""
    partition, outcome = resolve(ctx, topic_id, index, readable)
    if partition is None:
        return outcome
    acks = [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]
    try:
        await ctx.broker.share_partitions.acknowledge(group_id, partition, member_id, acks)
    except KafkaApiError as exc:
        return Outcome(exc.code, exc.message)
    if ctx.broker.metrics is not None:
        _count(ctx.broker.metrics.share_acknowledgements, acks)
    return OK


async def acknowledge_all(ctx: RequestContext, group_id: str, member_id: str,
                          acks: dict[SessionPartition, Iterable[Any]], readable: set[str]
                          ) -> dict[SessionPartition, Outcome]:
    """Each partition's acknowledgements, written concurrently."""
    outcomes = await asyncio.gather(*(acknowledge(ctx, group_id, member_id, key[0], key[1], batches, readable)
                                      for key, batches in acks.items()))
    return dict(zip(acks, outcomes, strict=True))


async def load_all(ctx: RequestContext, group_id: str, keys: Iterable[SessionPartition], readable: set[str],
                   timeout: float, verify: bool) -> dict[SessionPartition, Outcome]:
    """Load the share-partitions of `keys` this broker leads (their persisted state read; with
    `verify`, a share session opening, copies in memory checked against it), waiting up to
    `timeout`; the partitions whose state could not be read, with why. One still loading then is
    no error: it has nothing to acquire yet (as Kafka's share-partition initializing)."""
    resolved = [(key, partition) for key in keys if (partition := resolve(ctx, key[0], key[1], readable)[0])]
    loads = {key: asyncio.ensure_future(_load(ctx, group_id, partition, verify)) for key, partition in resolved}
    if loads:
        await asyncio.wait(loads.values(), timeout=timeout)
    failed = {}
    for key, load in loads.items():
        if not load.done():
            load.cancel()  # (the load itself goes on: it is shielded)
        elif load.result() is not OK:
            failed[key] = load.result()
    return failed


async def _load(ctx: RequestContext, group_id: str, partition: Partition, verify: bool) -> Outcome:
    try:
        await ctx.broker.share_partitions.load(group_id, partition, verify)
    except KafkaApiError as exc:
        return Outcome(exc.code, exc.message)
    return OK


def _count(counts: ShareAcknowledgements, acks: list[AckBatch]) -> None:
    """Acknowledged records per type, a batch at a time (one type for all its records, or one each)."""
    for batch in acks:
        if len(batch.types) == 1:
            counts.acknowledged(batch.types[0], batch.last_offset - batch.first_offset + 1)
        else:
            for ack_type, records in Counter(batch.types).items():
                counts.acknowledged(ack_type, records)


def count_requests(ctx: RequestContext, kind: str, outcomes: Iterable[tuple[SessionPartition, Outcome]]) -> None:
    """A share `kind` ("fetch", "acknowledgement") request's topics in the metrics: each once, and
    as failed when a partition of it failed."""
    if ctx.broker.metrics is None:
        return
    topics, failed = set(), set()
    for (topic_id, _), outcome in outcomes:
        name = topic_name(ctx, topic_id)
        if name is not None:
            topics.add(name)
            if outcome.code != ErrorCode.none:
                failed.add(name)
    ctx.broker.metrics.share_requests.mark(kind, topics, failed)


def current_leader(ctx: RequestContext, module: Any, topic_id: uuid.UUID | None, index: int) -> Any:
    """The partition's leader and epoch as this broker knows them (-1, -1: unknown)."""
    name = topic_name(ctx, topic_id)
    state = ctx.broker.metadata.partition_state(name, index) if name is not None else None
    if state is None:
        return make(module.LeaderIdAndEpoch, leader_id=-1, leader_epoch=-1)
    return make(module.LeaderIdAndEpoch, leader_id=state.leader, leader_epoch=state.leader_epoch)


def node_endpoints(ctx: RequestContext, module: Any, leaders: Iterable[int]) -> tuple:
    """Where the leaders named in NOT_LEADER_OR_FOLLOWER answers are, on this request's listener."""
    endpoints = []
    brokers = {b.broker_id: b for b in ctx.broker.metadata.brokers()}
    for broker_id in sorted(set(leaders)):
        info = brokers.get(broker_id)
        endpoint = info.endpoint(ctx.listener_name) if info is not None else None
        if endpoint is not None:
            endpoints.append(make(module.NodeEndpoint, node_id=broker_id, host=endpoint.host, port=endpoint.port,
                                  rack=info.rack))
    return tuple(endpoints)
