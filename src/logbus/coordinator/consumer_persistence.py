"""KIP-848 consumer groups kept in `__consumer_offsets`: every change written before it counts.

A group is described by its records (consumer_records.py): its epoch, the partition counts of its
subscribed topics, the target assignment's epoch, and per member its metadata, its target
assignment and its current assignment (epochs, state, partitions owned and being revoked).
`group_records` maps a group to them and `group_from_records` back, so one pair of functions
serves the three uses:
- a change (a heartbeat, a member's session or revocation running out, the group's deletion) runs
  the sans-I/O state machine (consumer_group.py), then writes the records that differ from the
  group's records before it (tombstones for the members gone, all of them for a deleted group),
  one batch through the offsets store's append pipeline, acks=all. Only then is the heartbeat
  answered; when the write fails, the group is rebuilt from its records before the change, so a
  failed append changes nothing (Kafka's coordinator reverts its timeline the same way). The
  changes of a group are serialized, each one waiting for the previous one's write.
- a load of a `__consumer_offsets` partition rebuilds its groups from their records: members
  keep their ids, epochs and assignments, their sessions (and pending revocations' rebalance
  timeouts) start afresh, and their next heartbeat continues where they were: no rebalance.
- a heartbeat that changes nothing persistent (the usual one) writes nothing.

Topics are kept by id in the records and by name in memory (a topic deleted meanwhile drops out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from ..errors import KafkaApiError
from .assignors import Assignment
from .consumer_group import ConsumerGroup, ConsumerGroups, ConsumerMember, Heartbeat, HeartbeatResult, MemberState
from .consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    AssignmentEpochValue,
    ConsumerGroupKey,
    ConsumerGroupValue,
    CurrentAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    TargetAssignmentValue,
    TopicIdPartitions,
    TopicMetadataValue,
)
from .store import Entry, OffsetsTopic

log = logging.getLogger(__name__)

GroupRecords = dict[ConsumerGroupKey, ConsumerGroupValue]
TopicIdOf = Callable[[str], uuid.UUID | None]
TopicNameOf = Callable[[uuid.UUID], str | None]
T = TypeVar("T")

STATE_CODES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}
STATES = {code: state for state, code in STATE_CODES.items()}
# the order of a batch's records (Kafka's): a member's subscription, the group's epoch, the target
# assignment, then the members' current assignments; tombstones in the opposite order
WRITE_ORDER = (MEMBER_METADATA, PARTITION_METADATA, GROUP_METADATA, TARGET_ASSIGNMENT_MEMBER,
               TARGET_ASSIGNMENT_METADATA, CURRENT_MEMBER_ASSIGNMENT)


# ---------------------------------------------------------------- group <-> records


def group_records(group: ConsumerGroup | None, topic_id: TopicIdOf, member_id: str | None = None) -> GroupRecords:
    """The records that describe `group` (none for no group); with `member_id`, only the group's
    own records and that member's."""
    if group is None or group.dead:
        return {}
    group_id = group.group_id
    topics = tuple(TopicMetadataValue(tid, name, count) for name, count in sorted(group.partition_counts.items())
                   if (tid := topic_id(name)) is not None)
    records: GroupRecords = {
        ConsumerGroupKey(GROUP_METADATA, group_id): GroupEpochValue(group.group_epoch),
        ConsumerGroupKey(PARTITION_METADATA, group_id): PartitionMetadataValue(topics),
        ConsumerGroupKey(TARGET_ASSIGNMENT_METADATA, group_id): AssignmentEpochValue(group.assignment_epoch),
    }
    members = group.members.values() if member_id is None else filter(None, [group.members.get(member_id)])
    for member in members:
        records.update(_member_records(group, member, topic_id))
    return records


def _member_records(group: ConsumerGroup, member: ConsumerMember, topic_id: TopicIdOf) -> GroupRecords:
    group_id, member_id = group.group_id, member.member_id
    return {
        ConsumerGroupKey(MEMBER_METADATA, group_id, member_id): MemberMetadataValue(
            member.instance_id, member.rack_id, member.client_id, member.client_host, member.subscribed_topics,
            member.subscribed_regex, member.rebalance_timeout_ms, member.server_assignor),
        ConsumerGroupKey(TARGET_ASSIGNMENT_MEMBER, group_id, member_id): TargetAssignmentValue(
            _by_id(group.target.get(member_id, {}), topic_id)),
        ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id): CurrentAssignmentValue(
            member.member_epoch, member.previous_member_epoch, STATE_CODES[member.state],
            _by_id(member.assigned, topic_id), _by_id(member.revoking, topic_id)),
    }


def _shape(group: ConsumerGroup | None) -> tuple[object, ...] | None:
    """What, unchanged by a member's heartbeat, means only that member's records may have changed:
    the epochs (a new target is a new group epoch) and the members."""
    if group is None or group.dead:
        return None
    return group.group_epoch, group.assignment_epoch, tuple(group.members)


def group_from_records(group_id: str, records: GroupRecords, topic_name: TopicNameOf) -> ConsumerGroup | None:
    """The group its records describe; None without its epoch record (a deleted group's leftovers)."""
    epoch = records.get(ConsumerGroupKey(GROUP_METADATA, group_id))
    if not isinstance(epoch, GroupEpochValue):
        return None
    group = ConsumerGroup(group_id, group_epoch=epoch.epoch)
    assignment_epoch = records.get(ConsumerGroupKey(TARGET_ASSIGNMENT_METADATA, group_id))
    if isinstance(assignment_epoch, AssignmentEpochValue):
        group.assignment_epoch = assignment_epoch.assignment_epoch
    partitions = records.get(ConsumerGroupKey(PARTITION_METADATA, group_id))
    if isinstance(partitions, PartitionMetadataValue):
        group.partition_counts = {name: t.partitions for t in partitions.topics
                                  if (name := topic_name(t.topic_id)) is not None}
    for key, value in records.items():
        if key.kind == MEMBER_METADATA and key.member is not None and isinstance(value, MemberMetadataValue):
            member = _member(key.member, value, records.get(ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, group_id,
                                                                             key.member)), topic_name)
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member.member_id
            target = records.get(ConsumerGroupKey(TARGET_ASSIGNMENT_MEMBER, group_id, key.member))
            if isinstance(target, TargetAssignmentValue):
                group.target[member.member_id] = _by_name(target.partitions, topic_name)
    return group


def _member(member_id: str, value: MemberMetadataValue, current: ConsumerGroupValue | None,
            topic_name: TopicNameOf) -> ConsumerMember:
    member = ConsumerMember(member_id, value.instance_id, value.rack_id, value.client_id, value.client_host,
                            value.rebalance_timeout_ms, value.subscribed_topics, value.subscribed_regex,
                            server_assignor=value.server_assignor)
    if isinstance(current, CurrentAssignmentValue):
        member.member_epoch, member.previous_member_epoch = current.member_epoch, current.previous_member_epoch
        member.state = STATES[current.state]
        member.assigned = _by_name(current.assigned, topic_name)
        member.revoking = _by_name(current.revoking, topic_name)
    return member


def _by_id(assignment: Assignment, topic_id: TopicIdOf) -> TopicIdPartitions:
    return tuple((tid, tuple(sorted(partitions))) for topic, partitions in sorted(assignment.items())
                 if (tid := topic_id(topic)) is not None)


def _by_name(topics: TopicIdPartitions, topic_name: TopicNameOf) -> Assignment:
    assignment: Assignment = {}
    for topic_id, partitions in topics:
        name = topic_name(topic_id)
        if name is not None and partitions:
            assignment[name] = assignment.get(name, frozenset()) | frozenset(partitions)
    return assignment


def changed_records(before: GroupRecords, after: GroupRecords) -> list[Entry]:
    """The records that take a group from `before` to `after`: new or changed values, then
    tombstones for the keys gone."""
    written = sorted((key for key, value in after.items() if before.get(key) != value), key=_write_rank)
    deleted = sorted((key for key in before if key not in after), key=_write_rank, reverse=True)
    return [(key, after[key]) for key in written] + [(key, None) for key in deleted]


def _write_rank(key: ConsumerGroupKey) -> tuple[int, str]:
    return WRITE_ORDER.index(key.kind), key.member or ""


# ---------------------------------------------------------------- changes, written first


class ConsumerGroupWrites:
    """Runs each change of a consumer group and writes its records before it counts.

    Each group's records as last written (or loaded) are kept, so that a change is compared with
    them rather than with a second picture of the group; after a member's heartbeat that changed
    neither the epochs nor the members, only that member's records are pictured again (a
    heartbeat costs what the member holds, not what the group holds)."""

    def __init__(self, groups: ConsumerGroups, store: OffsetsTopic, *, partition_for: Callable[[str], int],
                 check_coordinator: Callable[[str], None],
                 serves: Callable[[str], bool], topic_id: TopicIdOf, topic_name: TopicNameOf,
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task]) -> None:
        self.groups = groups
        self.store = store
        self.partition_for = partition_for
        self.check_coordinator = check_coordinator
        self.serves = serves
        self.topic_id = topic_id
        self.topic_name = topic_name
        self.spawn = spawn
        self._written: dict[str, GroupRecords] = {}  # group id -> its records in the log
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # group id -> its lock, and who holds or waits
        groups.run_change = self.run_in_background

    async def heartbeat(self, request: Heartbeat) -> HeartbeatResult:
        """ConsumerGroupHeartbeat, answered once its changes are written."""
        return await self.change(request.group_id, lambda: self.groups.heartbeat(request), request.member_id)

    async def delete(self, group_id: str) -> None:
        """The group's records are tombstoned, then it is gone."""
        await self.change(group_id, lambda: self.groups.delete(group_id))

    def adopt(self, group_id: str, records: GroupRecords) -> None:
        """A group loaded from its partition's records (or put back as they describe it)."""
        group = group_from_records(group_id, records, self.topic_name)
        if group is not None:
            self.groups.adopt(group)
            self._written[group_id] = records

    def unload(self, unloaded: Callable[[str], bool]) -> None:
        """The groups whose ids `unloaded` picks leave this coordinator (their partition moved away)."""
        self.groups.unload(unloaded)
        for group_id in [g for g in self._written if unloaded(g)]:
            del self._written[group_id]

    def run_in_background(self, group_id: str, apply: Callable[[], None]) -> None:
        """A timer's change (a member expired): written in a task of its own."""
        self.spawn(self._change_logged(group_id, apply))

    async def _change_logged(self, group_id: str, apply: Callable[[], None]) -> None:
        try:
            await self.change(group_id, apply)
        except KafkaApiError as exc:
            log.info("consumer group %s: a member's expiry was not written (%s): it stays", group_id, exc)

    async def change(self, group_id: str, apply: Callable[[], T], member_id: str | None = None) -> T:
        """Run `apply` (a change of the group's state in memory, by `member_id` if it is a member's),
        then write the records it changed; if `apply` refuses or the write fails, the group is back
        as its records describe it, and the error raised. Shielded: a client hanging up must not
        leave a change applied but neither written nor undone."""
        return await asyncio.shield(self._change(group_id, apply, member_id))

    async def _change(self, group_id: str, apply: Callable[[], T], member_id: str | None) -> T:
        async with self._lock(group_id):
            self.check_coordinator(group_id)
            before = self._written.get(group_id, {})
            shape = _shape(self.groups.groups.get(group_id))
            try:
                result = apply()
            except KafkaApiError:
                if self._records_after(group_id, before, shape, member_id) != before:
                    self._restore(group_id, before)
                raise
            after = self._records_after(group_id, before, shape, member_id)
            changes = changed_records(before, after)
            if changes:
                try:
                    await self.store.write(self.partition_for(group_id), changes)
                except KafkaApiError:
                    self._restore(group_id, before)
                    raise
                self._written[group_id] = after
                if not after:
                    del self._written[group_id]
            return result

    def _records_after(self, group_id: str, before: GroupRecords, shape: tuple[object, ...] | None,
                       member_id: str | None) -> GroupRecords:
        group = self.groups.groups.get(group_id)
        if member_id is not None and shape is not None and _shape(group) == shape:
            return {**before, **group_records(group, self.topic_id, member_id)}
        return group_records(group, self.topic_id)

    def _restore(self, group_id: str, before: GroupRecords) -> None:
        """Put the group back as its records describe it (unless its partition has moved away
        meanwhile: then it is not this coordinator's any more)."""
        if not self.serves(group_id):
            return
        if group_from_records(group_id, before, self.topic_name) is not None:
            self.adopt(group_id, before)
        else:
            self.groups.unload(lambda gid: gid == group_id)

    @contextlib.asynccontextmanager
    async def _lock(self, group_id: str) -> AsyncIterator[None]:
        """The group's changes one at a time (the lock goes when nobody holds or awaits it)."""
        lock, users = self._locks.get(group_id, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[group_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[group_id]
            if users == 1:
                del self._locks[group_id]
            else:
                self._locks[group_id] = (lock, users - 1)
