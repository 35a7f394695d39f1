"""What DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets share: the
checks of the group they name and where a share-partition's state is.

A share-partition's state (its start offset, the records in flight) lives on the partition's
leader (cluster/share_partitions.py). These APIs go to the group's coordinator, which reads and
changes the state of the partitions it leads; a partition another broker leads has none here:
Describe answers it as uninitialized (start offset -1), Alter refuses it with
NOT_LEADER_OR_FOLLOWER (docs/operations.md). On one broker, every partition is here.
"""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from ..cluster.partition import Partition
from ..cluster.share_partition import SharePartition
from ..coordinator import group_coordinator
from ..errors import KafkaApiError
from .context import RequestContext

ZERO_UUID = uuid.UUID(int=0)
UNINITIALIZED = -1  # the start offset (and lag) of a share-partition without state


def check_empty_share_group(ctx: RequestContext, group_id: str | None) -> None:
    """Alter and Delete need an empty share group (Kafka's validateEmptyGroup): KafkaApiError
    INVALID_GROUP_ID, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, GROUP_ID_NOT_FOUND (unknown,
    or a group of another type) or NON_EMPTY_GROUP."""
    if not group_id:
        raise KafkaApiError(ErrorCode.invalid_group_id, "The group id is empty.")
    coordinator = group_coordinator(ctx.broker)
    error = coordinator.coordinator_error(group_id)
    if error is not None:
        raise KafkaApiError(error)
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


def share_state(ctx: RequestContext, group_id: str, topic: str, index: int
                ) -> tuple[Partition, SharePartition] | None:
    """The group's share-partition of a partition this broker leads, if it has one."""
    partition = led_here(ctx, topic, index)
    share = ctx.broker.share_partitions.get(group_id, partition) if partition is not None else None
    return (partition, share) if partition is not None and share is not None else None
