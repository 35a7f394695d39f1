"""Share groups (KIP-932) kept in `__consumer_offsets`: what their coordinator must remember over
a restart or a failover, written before it counts (share_group_records.py).

That is the group's epoch and, above all, which topics may hold its share state
(ShareGroupStatePartitionMetadata), so that DeleteGroups deletes the persisted state of exactly
those topics after a coordinator restart too. In logbus a share-partition's state is initialized
by its leader (at its first fetch), not by the coordinator as in Kafka, so the coordinator
records a topic as initialized, with the partitions it has then, before a heartbeat first
subscribes the group to it (the deletion covers the topic's partitions as they are then).
Deleting follows Kafka's steps: the topics move to the record's deleting list, their state is
deleted (DeleteShareGroupState), then the group's records are tombstoned; a failure on the way
leaves the group, with the topics still to delete, for a retry. A load rebuilds each group,
Empty (its members rejoin), with its epoch and topics.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from ..errors import KafkaApiError
from .clock import Clock
from .consumer_group import HeartbeatResult
from .share_group import ShareGroup, ShareGroups, ShareHeartbeat
from .share_group_records import (
    SHARE_GROUP_METADATA,
    SHARE_STATE_PARTITION_METADATA,
    ShareGroupEpochValue,
    ShareGroupKey,
    ShareGroupValue,
    StatePartitionMetadataValue,
    StateTopic,
)
from .store import Entry, OffsetsTopic

ShareGroupRecords = dict[ShareGroupKey, ShareGroupValue]
DeleteState = Callable[[str, set[str]], Awaitable[None]]


def group_from_records(group_id: str, records: ShareGroupRecords,
                       topic_name: Callable[[uuid.UUID], str | None]) -> ShareGroup | None:
    """The (Empty) group its records describe; None without its epoch record."""
    epoch = records.get(ShareGroupKey(SHARE_GROUP_METADATA, group_id))
    if not isinstance(epoch, ShareGroupEpochValue):
        return None
    group = ShareGroup(group_id, group_epoch=epoch.epoch)
    metadata = records.get(ShareGroupKey(SHARE_STATE_PARTITION_METADATA, group_id))
    if isinstance(metadata, StatePartitionMetadataValue):
        group.topics_seen = {name for topic in metadata.topics() if (name := topic_name(topic.topic_id)) is not None}
    return group


class ShareGroupWrites:
    def __init__(self, groups: ShareGroups, store: OffsetsTopic, clock: Clock, *,
                 partition_for: Callable[[str], int], check_coordinator: Callable[[str], None],
                 partition_count: Callable[[str], int | None], topic_id: Callable[[str], uuid.UUID | None],
                 topic_name: Callable[[uuid.UUID], str | None]) -> None:
        self.groups = groups
        self.store = store
        self.clock = clock
        self.partition_for = partition_for
        self.check_coordinator = check_coordinator
        self.partition_count = partition_count
        self.topic_id = topic_id
        self.topic_name = topic_name
        self._writing = asyncio.Lock()  # (rare: a new topic for a group, a deletion)

    def _new_topics(self, request: ShareHeartbeat) -> set[str]:
        """Topics the heartbeat subscribes the group to for the first time."""
        group = self.groups.get(request.group_id)
        if group is None and request.member_epoch != 0:
            return set()  # refused: no such group
        seen = group.topics_seen if group is not None else set()
        return set(request.subscribed_topics or ()) - seen

    async def heartbeat(self, request: ShareHeartbeat) -> HeartbeatResult:
        """ShareGroupHeartbeat; one that brings new topics is answered once they are written."""
        if not self._new_topics(request):
            return self.groups.heartbeat(request)
        return await asyncio.shield(self._heartbeat_written(request))

    async def _heartbeat_written(self, request: ShareHeartbeat) -> HeartbeatResult:
        async with self._writing:
            self.check_coordinator(request.group_id)
            new = self._new_topics(request)
            if new:
                group = self.groups.get(request.group_id)
                seen = group.topics_seen if group is not None else set()
                epoch = (group.group_epoch if group is not None else 0) + 1  # (the epoch the heartbeat moves to)
                await self._write(request.group_id, [
                    (ShareGroupKey(SHARE_GROUP_METADATA, request.group_id), ShareGroupEpochValue(epoch)),
                    (ShareGroupKey(SHARE_STATE_PARTITION_METADATA, request.group_id),
                     StatePartitionMetadataValue(initialized=self._initialized(seen | new))),
                ])
            return self.groups.heartbeat(request)

    async def delete(self, group_id: str, delete_state: DeleteState) -> None:
        """DeleteGroups of an empty share group: its share state, then its records, then the group."""
        async with self._writing:
            group = self._group(group_id)
            await self._delete_state(group, set(group.topics_seen), delete_state)
            await self._write(group_id, [(ShareGroupKey(SHARE_STATE_PARTITION_METADATA, group_id), None),
                                         (ShareGroupKey(SHARE_GROUP_METADATA, group_id), None)])
            self.groups.delete(group_id)

    async def delete_topics(self, group_id: str, topics: set[str], delete_state: DeleteState) -> None:
        """The group's share state of `topics` is deleted (DeleteShareGroupOffsets), and the group
        no longer counts them among its topics; KafkaApiError (GROUP_ID_NOT_FOUND for no share
        group, the coordinator's or the deletion's error) leaves them counted."""
        async with self._writing:
            group = self._group(group_id)
            deleting = topics & group.topics_seen
            await self._delete_state(group, deleting, delete_state)
            remaining = group.topics_seen - deleting
            await self._write(group_id, [(ShareGroupKey(SHARE_STATE_PARTITION_METADATA, group_id),
                                          StatePartitionMetadataValue(initialized=self._initialized(remaining)))])
            group.topics_seen = remaining

    async def _delete_state(self, group: ShareGroup, topics: set[str], delete_state: DeleteState) -> None:
        """Kafka's steps: the topics move to the deleting list (written), then their state goes."""
        kept = self._initialized(group.topics_seen - topics)
        deleting = tuple(StateTopic(t.topic_id, t.name) for t in self._initialized(topics))
        await self._write(group.group_id, [(ShareGroupKey(SHARE_STATE_PARTITION_METADATA, group.group_id),
                                            StatePartitionMetadataValue(initialized=kept, deleting=deleting))])
        await delete_state(group.group_id, topics)

    async def add_topics(self, group_id: str, topics: set[str]) -> None:
        """State was initialized for `topics` (AlterShareGroupOffsets): the group counts them among
        its topics, written first, so that deleting it deletes their state too; KafkaApiError
        (GROUP_ID_NOT_FOUND for no share group, the coordinator's or the write's error)."""
        async with self._writing:
            group = self._group(group_id)
            if topics <= group.topics_seen:
                return
            seen = group.topics_seen | topics
            await self._write(group_id, [(ShareGroupKey(SHARE_STATE_PARTITION_METADATA, group_id),
                                          StatePartitionMetadataValue(initialized=self._initialized(seen)))])
            group.topics_seen = seen

    def _group(self, group_id: str) -> ShareGroup:
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise KafkaApiError(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
        return group

    def adopt(self, group_id: str, records: ShareGroupRecords) -> None:
        """A group loaded from its partition's records."""
        group = group_from_records(group_id, records, self.topic_name)
        if group is not None:
            self.groups.groups[group_id] = group

    def _initialized(self, topics: set[str]) -> tuple[StateTopic, ...]:
        now = self.clock.now_ms()
        return tuple(StateTopic(topic_id, name, tuple(range(self.partition_count(name) or 0)), now)
                     for name in sorted(topics) if (topic_id := self.topic_id(name)) is not None)

    async def _write(self, group_id: str, entries: list[Entry]) -> None:
        await self.store.write(self.partition_for(group_id), entries)
