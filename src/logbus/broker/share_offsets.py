"""What DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets share: the
checks of the group they name and where a share-partition's state is.

A share-partition's state is persisted by its share coordinator (`__share_group_state`,
cluster/share_persister.py); its leader holds a copy with the records in flight
(cluster/share_partitions.py). These APIs go to the group's coordinator, which reads the
persisted state (ReadShareGroupStateSummary) and re-initializes or deletes it
(InitializeShareGroupState, DeleteShareGroupState) wherever the partition is led. The topics a
group has state of are those its members ever subscribed to (`ShareGroup.topics_seen`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from ..cluster.partition import Partition
from ..coordinator import group_coordinator
from ..coordinator.share_records import ShareKey, ShareState
from ..errors import KafkaApiError
from ..security.acl import AclOperation, ResourceType
from .authorization import authorized_names, require
from .context import RequestContext

ZERO_UUID = uuid.UUID(int=0)
UNINITIALIZED = -1  # the start offset (and lag) of a share-partition without state


def check_alterable(ctx: RequestContext, operation: AclOperation, group_id: str | None) -> None:
    """Alter (READ) and Delete (DELETE) of a group's offsets: `operation` on the group
    (GROUP_AUTHORIZATION_FAILED), then an empty share group (check_empty_share_group)."""
    require(ctx, operation, ResourceType.GROUP, group_id or "")
    check_empty_share_group(ctx, group_id)


def readable_topics(ctx: RequestContext, topics: Iterable[Any]) -> set[str]:
    """The names of the request's topics the principal may READ."""
    return authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.topic_name for t in topics))


def check_empty_share_group(ctx: RequestContext, group_id: str | None) -> None:
    """Alter and Delete need an empty share group (Kafka's validateEmptyGroup): KafkaApiError
    INVALID_GROUP_ID, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, GROUP_ID_NOT_FOUND (unknown,
    or a group of another type) or NON_EMPTY_GROUP."""
    if not group_id:
        raise KafkaApiError(ErrorCode.invalid_group_id, "The group id is empty.")
    coordinator = group_coordinator(ctx.broker)
    coordinator.check_coordinator(group_id)
    group = coordinator.share_group(group_id)
    if group is None:
        raise KafkaApiError(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
    if group.members:
        raise KafkaApiError(ErrorCode.non_empty_group, f"Share group {group_id} is not empty.")


def led_here(ctx: RequestContext, topic: str, index: int) -> Partition | None:
    """The partition, when this broker leads it."""
    try:
        return ctx.broker.replicas.partition_to_read(topic, index)
    except KafkaApiError:
        return None


def group_topics(ctx: RequestContext, group_id: str) -> set[str]:
    """The topics the share group may have state of (those its members subscribed to), that exist."""
    group = group_coordinator(ctx.broker).share_group(group_id)
    seen = group.topics_seen if group is not None else set()
    return {name for name in seen if ctx.broker.metadata.topic(name) is not None}


async def persisted_state(ctx: RequestContext, group_id: str, topic: str, index: int) -> ShareState | None:
    """The share-partition's persisted state (None: never initialized, or an unknown topic);
    KafkaApiError when its share coordinator cannot answer."""
    metadata = ctx.broker.metadata.topic(topic)
    if metadata is None:
        return None
    return await ctx.broker.share_partitions.persister.summary(ShareKey(group_id, metadata.uuid, index))
