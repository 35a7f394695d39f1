"""DescribeShareGroupOffsets (key 90): serves v0–v1 (Kafka 4.2's range; v1 adds the lag, KIP-1226).

Each share group's share-partition start offsets (SPSO) as its share coordinator persisted them
(ReadShareGroupStateSummary), with the leader epoch and (v1) the lag: the records from the SPSO
to the high watermark not yet delivered for good, known where this broker leads the partition
(-1 elsewhere: the high watermark is the leader's). Topics null: every share-partition the
group has state of, the topics the principal may not Describe left out;
empty: none. Named topics: an unknown topic, or a partition without state, answers start offset
-1 (as Kafka's OffsetFetch answers no offset, not an error); a topic the principal may not
Describe answers TOPIC_AUTHORIZATION_FAILED for its partitions. The group need not exist, as in
Kafka. Needs DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED); NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS for the group; a share coordinator that cannot answer, its code
for the partition. See broker/share_offsets.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import group_coordinator
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, authorized_names
from ..context import RequestContext
from ..share_offsets import UNINITIALIZED, ZERO_UUID, group_topics, led_here, persisted_state

API_KEY = 90
MIN_VERSION = 0
MAX_VERSION = 1

DEFAULT_LEADER_EPOCH = 0  # Kafka's PartitionFactory.DEFAULT_LEADER_EPOCH, for a partition without state


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    groups = await asyncio.gather(*(_group(ctx, module, group.group_id, group.topics) for group in request.groups))
    return make(response_class(API_KEY, ctx.api_version), groups=tuple(groups))


async def _group(ctx: RequestContext, module: Any, group_id: str, topics: tuple[Any, ...] | None) -> Any:
    def answer(described: tuple[Any, ...], code: ErrorCode = ErrorCode.none, message: str | None = None) -> Any:
        return make(module.DescribeShareGroupOffsetsResponseGroup, group_id=group_id, topics=described,
                    error_code=code, error_message=message)

    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return answer((), ErrorCode.group_authorization_failed)
    try:
        group_coordinator(ctx.broker).check_coordinator(group_id)
    except KafkaApiError as exc:
        return answer((), exc.code, exc.message)
    wanted = _all_partitions(ctx, group_id) if topics is None else {t.topic_name: list(t.partitions) for t in topics}
    describable = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, wanted)
    if topics is None:
        wanted = {name: indexes for name, indexes in wanted.items() if name in describable}
    described = await asyncio.gather(*(_topic(ctx, module, group_id, name, indexes, name in describable,
                                              only_with_state=topics is None)
                                       for name, indexes in wanted.items()))
    if topics is None:  # every share-partition the group has state of
        described = [topic for topic in described if topic.partitions]
    return answer(tuple(described))


def _all_partitions(ctx: RequestContext, group_id: str) -> dict[str, list[int]]:
    """Every partition of the topics the group may have share state of, by topic."""
    return {name: list(range(len(ctx.broker.metadata.topic(name).partitions)))
            for name in sorted(group_topics(ctx, group_id))}


async def _topic(ctx: RequestContext, module: Any, group_id: str, name: str, indexes: list[int],
                 describable: bool, only_with_state: bool) -> Any:
    metadata = ctx.broker.metadata.topic(name) if describable else None
    if not describable:
        partitions = [_partition(module, index, error=ErrorCode.topic_authorization_failed) for index in indexes]
    else:
        partitions = await asyncio.gather(*(_described(ctx, module, group_id, name, index) for index in indexes))
        if only_with_state:
            partitions = [p for p in partitions if p.start_offset != UNINITIALIZED or p.error_code != ErrorCode.none]
    return make(module.DescribeShareGroupOffsetsResponseTopic, topic_name=name,
                topic_id=metadata.uuid if metadata is not None else ZERO_UUID, partitions=tuple(partitions))


async def _described(ctx: RequestContext, module: Any, group_id: str, topic: str, index: int) -> Any:
    try:
        state = await persisted_state(ctx, group_id, topic, index)
    except KafkaApiError as exc:
        return _partition(module, index, error=exc.code)
    if state is None:
        return _partition(module, index)
    return _partition(module, index, state.start_offset, state.leader_epoch, _lag(ctx, group_id, topic, index,
                                                                                   state.start_offset))


def _lag(ctx: RequestContext, group_id: str, topic: str, index: int, start_offset: int) -> int:
    """Records from the start offset to the high watermark not yet delivered for good, where this
    broker leads the partition (its copy in flight counted when loaded); else unknown (-1)."""
    partition = led_here(ctx, topic, index)
    if partition is None:
        return UNINITIALIZED
    share = ctx.broker.share_partitions.get(group_id, partition)
    if share is not None:
        return share.lag(partition.high_watermark)
    return max(partition.high_watermark - start_offset, 0)


def _partition(module: Any, index: int, start_offset: int = UNINITIALIZED, leader_epoch: int = DEFAULT_LEADER_EPOCH,
               lag: int = UNINITIALIZED, error: ErrorCode = ErrorCode.none) -> Any:
    return make(module.DescribeShareGroupOffsetsResponsePartition, partition_index=index, start_offset=start_offset,
                leader_epoch=leader_epoch, lag=lag, error_code=error)
