"""ShareFetch (key 78): serves v1–v2 (Kafka 4.2's range; v0 was KIP-932's early access).

A share group member fetches records of the partitions of its share session (see
broker/share_sessions.py: epoch 0 opens it with the partitions named, later epochs add and
forget partitions, -1 closes it) from this broker, their leader. The records it may take are
*acquired* for it (cluster/share_partition.py): each partition answers the batches that hold
them and the acquired ranges with their delivery counts; the client delivers only those.
Acknowledgements of earlier records may ride along (`acknowledgement_batches`, not on the
opening request: INVALID_REQUEST); they are written while the fetch runs (their records are held,
not acquirable, until written, as in Kafka, which runs both at once), apply once written, and
each partition answers their outcome as `acknowledge_error_code`. v2 adds the Renew acknowledgement (a lock extended)
and `share_acquire_mode` (1, record_limit: no more than `max_records`, not rounded up to whole
batches).

At most `max_records` records are acquired per request (across its partitions) and `max_bytes`
read (the first batch may pass it, as KIP-74 has it for Fetch; `max_bytes` 0 reads nothing).
When nothing can be acquired the request waits up to `max_wait` for new records (the high
watermark moves) or released ones (a lock expired, a share session ended), then answers what it has.
A partition's share state is read from its share coordinator before its first acquisition here
(broker/share_requests.py's `load_all`); acknowledgements are answered once written there.
The opening request answers every partition of the session, later ones only the partitions with
records, an error or acknowledgements. Needs READ on the group (GROUP_AUTHORIZATION_FAILED for
the request) and on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions), as Kafka.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.delayed_fetch import wait_for_data
from ...cluster.partition import Partition
from ...cluster.share_partitions import Acquired
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize
from ..context import RequestContext
from ..share_requests import (
    OK,
    Outcome,
    acknowledge_all,
    check_request,
    count_requests,
    current_leader,
    finish,
    load_all,
    node_endpoints,
    readable_topics,
    resolve,
    session_of,
)
from ..share_sessions import FINAL_EPOCH, INITIAL_EPOCH, SessionPartition, ShareSession

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 2
RECORD_LIMIT = 1  # share_acquire_mode (v2): exactly max_records, not whole batches


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id or ""):
        return _failed(ctx, ErrorCode.group_authorization_failed, None)
    acks = {(t.topic_id, p.partition_index): p.acknowledgement_batches
            for t in request.topics for p in t.partitions if p.acknowledgement_batches}
    try:
        check_request(request.group_id, request.member_id)
        if acks and request.share_session_epoch == INITIAL_EPOCH:
            raise KafkaApiError(ErrorCode.invalid_request, "Acknowledge data present on initial fetch request.")
        named = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
        forgotten = [(t.topic_id, index) for t in request.forgotten_topics_data for index in t.partitions]
        session = session_of(ctx, request.group_id, request.member_id, request.share_session_epoch,
                             named if request.share_session_epoch != FINAL_EPOCH else (), forgotten)
    except KafkaApiError as exc:
        return _failed(ctx, exc.code, exc.message)
    readable = readable_topics(ctx, {topic_id for topic_id, _ in [*session.partitions, *acks]})
    acking = asyncio.ensure_future(acknowledge_all(ctx, session.group_id, session.member_id, acks, readable))
    if request.share_session_epoch == FINAL_EPOCH:
        acked = await acking
        finish(ctx, session, FINAL_EPOCH)
        fetched: dict[SessionPartition, tuple[Outcome, Acquired | None]] = {}
    else:  # the acknowledgements' writes and the fetch at once (their records are not acquirable)
        fetched = await _fetch(ctx, request, session, readable)
        acked = await acking
        count_requests(ctx, "fetch", ((key, outcome) for key, (outcome, _) in fetched.items()))
    if acked:
        count_requests(ctx, "acknowledgement", acked.items())
    return _response(ctx, request, session, acked, fetched)


async def _fetch(ctx: RequestContext, request: Any, session: ShareSession, readable: set[str]
                 ) -> dict[SessionPartition, tuple[Outcome, Acquired | None]]:
    """Acquire from the session's partitions; wait (up to max_wait) while there is nothing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait.total_seconds()
    failed = await load_all(ctx, session.group_id, session.partitions, readable, request.max_wait.total_seconds(),
                            verify=request.share_session_epoch == INITIAL_EPOCH)
    while True:
        fetched, leaders = _acquire_all(ctx, request, session, readable, failed)
        nothing = all(outcome is OK and not acquired.ranges for outcome, acquired in fetched.values()
                      if acquired is not None)
        if not nothing or not leaders or loop.time() >= deadline or ctx.broker.stopping:
            return fetched
        shares = ctx.broker.share_partitions  # released records are news too
        await wait_for_data(leaders, deadline - loop.time(), [(shares.wake_on_release, shares.forget_waiter)])


def _acquire_all(ctx: RequestContext, request: Any, session: ShareSession, readable: set[str],
                 failed: dict[SessionPartition, Outcome]
                 ) -> tuple[dict[SessionPartition, tuple[Outcome, Acquired | None]], list[Partition]]:
    whole_batches = getattr(request, "share_acquire_mode", 0) != RECORD_LIMIT
    budget, records_left = request.max_bytes, request.max_records
    fetched: dict[SessionPartition, tuple[Outcome, Acquired | None]] = {}
    leaders = []
    keys = list(session.partitions)
    start = session.epoch % len(keys) if keys else 0  # round robin, as Kafka's PartitionRotateStrategy
    for key in keys[start:] + keys[:start]:
        partition, outcome = resolve(ctx, key[0], key[1], readable)
        if partition is None or key in failed:
            fetched[key] = (failed.get(key, outcome), None)
            continue
        leaders.append(partition)
        acquired = ctx.broker.share_partitions.read(session.group_id, session.member_id, partition, max(budget, 0),
                                                    records_left,
                                                    min_one_batch=0 < budget == request.max_bytes,
                                                    whole_batches=whole_batches)
        budget -= len(acquired.records)
        records_left -= sum(r.last_offset - r.first_offset + 1 for r in acquired.ranges)
        fetched[key] = (OK, acquired)
    return fetched, leaders


def _response(ctx: RequestContext, request: Any, session: ShareSession, acked: dict[SessionPartition, Outcome],
              fetched: dict[SessionPartition, tuple[Outcome, Acquired | None]]) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    every = request.share_session_epoch == INITIAL_EPOCH
    topics: dict[Any, list[Any]] = {}
    not_leader = []
    for key in dict.fromkeys([*fetched, *acked]):
        outcome, acquired = fetched.get(key, (OK, None))
        ack = acked.get(key)
        if not (every or outcome is not OK or ack is not None or (acquired is not None and acquired.ranges)):
            continue
        leader = current_leader(ctx, module, key[0], key[1])
        if outcome.code == ErrorCode.not_leader_or_follower and leader.leader_id >= 0:
            not_leader.append(leader.leader_id)
        topics.setdefault(key[0], []).append(make(
            module.PartitionData, partition_index=key[1], error_code=outcome.code, error_message=outcome.message,
            acknowledge_error_code=(ack or OK).code, acknowledge_error_message=(ack or OK).message,
            current_leader=leader, records=acquired.records if acquired is not None else b"",
            acquired_records=tuple(make(module.AcquiredRecords, first_offset=r.first_offset,
                                        last_offset=r.last_offset, delivery_count=r.delivery_count)
                                   for r in (acquired.ranges if acquired is not None else ())),
        ))
    lock_ms = ctx.broker.share_partitions.settings(session.group_id).config.lock_duration_ms
    return make(
        response_class(API_KEY, ctx.api_version), error_code=ErrorCode.none,
        acquisition_lock_timeout=timedelta(milliseconds=lock_ms),
        responses=tuple(make(module.ShareFetchableTopicResponse, topic_id=topic_id, partitions=tuple(partitions))
                        for topic_id, partitions in topics.items()),
        node_endpoints=node_endpoints(ctx, module, not_leader),
    )


def _failed(ctx: RequestContext, code: ErrorCode, message: str | None) -> Any:
    return make(response_class(API_KEY, ctx.api_version), error_code=code, error_message=message,
                acquisition_lock_timeout=timedelta(0), responses=(), node_endpoints=())
