"""Committed offsets: OffsetCommit/OffsetFetch/OffsetDelete, group deletion and offset expiry.

Semantics follow Kafka's GroupCoordinator for classic groups:
- A commit is a record in __consumer_offsets (OffsetCommitKey/Value, as Kafka writes them) and
  then in the group's memory; metadata over `offset.metadata.max.bytes` is refused per
  partition. A member's commit must carry the group's current generation (not while the group
  completes a rebalance) and keeps the member alive; a commit without one (generation -1: admin
  tools, `assign()`) is taken by an Empty group, or creates the group.
- DeleteGroups and OffsetDelete write tombstones; only an Empty group is deleted, and OffsetDelete
  keeps the offsets of the topics a consumer group's members subscribe to.
- Offsets of Empty groups expire after `offsets.retention.minutes` (counted from when the group
  became Empty; for groups without a protocol, from each commit), then the group is deleted; a
  Stable consumer group loses the offsets of topics it no longer subscribes to (KIP-496). The
  check runs every `offsets.retention.check.interval.ms`.
- TxnOffsetCommit (Kafka's commitTransactionalOffset) writes its offsets as one batch of the
  producer's transaction; they stay pending for that producer (group.py) until its marker. The
  group checks are OffsetCommit's, except that an unknown group is created only for generation
  -1, a request without member id, instance id and generation is taken by any group, and neither
  a rebalance in progress nor a session is concerned. OffsetFetch with `require_stable` answers
  UNSTABLE_OFFSET_COMMIT for a partition with pending offsets; an offset with pending ones does
  not expire, a group with an open transaction is not deleted by expiry, and OffsetDelete and
  DeleteGroups write tombstones for pending offsets too (Kafka's OffsetMetadataManager).

Depends on: the retention config values; the `Clock` (commit timestamps, the expiry check's
timer); the groups dict it shares with `membership.py` and `loading.py`; a
`check_coordinator(group_id)` and `serves(group_id)` callables and `partition_for(group_id)`
(`loading.py`: may this broker serve the group, and which __consumer_offsets partition holds it); `append(index,
entries)` and `append_txn(index, entries, producer, on_appended)`, the offsets topic's writes;
from `membership.py`, `reset_session` (a commit is a sign of life) and `cancel_timers` (a deleted
group's); and a `spawn` for the expiry checks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupIdNotFound,
    GroupSubscribedToTopic,
    IllegalGeneration,
    InvalidGroupId,
    InvalidProducerIdMapping,
    KafkaApiError,
    NonEmptyGroup,
    RebalanceInProgress,
    UnknownMemberId,
    code_of,
)
from .clock import Clock, Timer
from .group import ClassicGroup, CommittedOffset, GroupState, Member, TopicPartition
from .internal_topic import ProducerFields
from .records import GroupKey, OffsetKey, OffsetValue
from .store import Entry

log = logging.getLogger(__name__)

OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes default


@dataclass(slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


AppendTxn = Callable[[int, list[Entry], ProducerFields, Callable[[int], None]], Coroutine[Any, Any, int]]


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode = ErrorCode.none


class Offsets:
    def __init__(self, clock: Clock, groups: dict[str, ClassicGroup], *, retention_ms: int,
                 retention_check_ms: int, check_coordinator: Callable[[str], None],
                 serves: Callable[[str], bool],
                 partition_for: Callable[[str], int],
                 append: Callable[[int, list[Entry]], Coroutine[Any, Any, int]], append_txn: AppendTxn,
                 reset_session: Callable[[ClassicGroup, Member], None],
                 cancel_timers: Callable[[ClassicGroup], None],
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task]) -> None:
        self.clock = clock
        self.groups = groups
        self.retention_ms = retention_ms
        self.retention_check_ms = retention_check_ms
        self.check_coordinator = check_coordinator
        self.serves = serves
        self.partition_for = partition_for
        self.append = append
        self.append_txn = append_txn
        self.reset_session = reset_session
        self.cancel_timers = cancel_timers
        self.spawn = spawn
        self._expiry_timer: Timer | None = None
        # a consumer group (KIP-848) with members keeps its offsets (set by the coordinator)
        self.consumer_group_active: Callable[[str], bool] = lambda _group_id: False

    def start(self) -> None:
        self._schedule_expiry()

    def stop(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()

    # ================================================================ OffsetCommit

    async def commit_offsets(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                             commits: list[OffsetCommit], expire_timestamp: int = -1) -> list[ErrorCode]:
        """Write the offsets; an error per commit, in order."""
        error = code_of(lambda: self._check_commit(group_id, generation, member_id, instance_id))
        if error is not ErrorCode.none:
            return [error] * len(commits)
        group = self.groups[group_id]
        errors, entries = self._entries(group_id, commits, expire_timestamp)
        if not entries:
            return errors
        try:
            record_offset = await self.append(self.partition_for(group_id), entries)
        except KafkaApiError as exc:
            return [exc.code if e is ErrorCode.none else e for e in errors]
        for key, offset in _committed(entries, record_offset).items():
            group.put_offset(key, offset)
        return errors

    def _entries(self, group_id: str, commits: list[OffsetCommit], expire_timestamp: int
                 ) -> tuple[list[ErrorCode], list[Entry]]:
        """The records of the commits whose metadata fits, and an error per commit, in order."""
        now = self.clock.now_ms()
        errors: list[ErrorCode] = []
        entries: list[Entry] = []
        for commit in commits:
            metadata = commit.metadata or ""
            if len(metadata.encode("utf-8")) > OFFSET_METADATA_MAX_BYTES:
                errors.append(ErrorCode.offset_metadata_too_large)
                continue
            errors.append(ErrorCode.none)
            value = OffsetValue(commit.offset, commit.leader_epoch, metadata, now, expire_timestamp)
            entries.append((OffsetKey(group_id, commit.topic, commit.partition), value))
        return errors, entries

    def _commit_group(self, group_id: str, generation: int) -> ClassicGroup | None:
        """What every commit checks first: may this broker take it, and which group it goes to.
        Refused, or None when it creates the group (generation -1 only: admin tools, `assign()`),
        or the group for the member checks that follow."""
        if not group_id:
            raise InvalidGroupId
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                raise IllegalGeneration
            self.groups[group_id] = ClassicGroup(group_id, state_timestamp=self.clock.now_ms())
            return None
        if group.is_in(GroupState.DEAD):
            raise CoordinatorNotAvailable
        return group

    def _check_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        group = self._commit_group(group_id, generation)
        if group is None:
            return
        if group.is_fenced(member_id, instance_id):
            raise FencedInstanceId
        if generation < 0 and group.is_in(GroupState.EMPTY):
            return  # a commit outside group management (admin tools, assign())
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            raise RebalanceInProgress
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId
        if generation != group.generation:
            raise IllegalGeneration
        self.reset_session(group, member)

    # ================================================================ TxnOffsetCommit

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                                 member_id: str, instance_id: str | None, commits: list[OffsetCommit]
                                 ) -> list[ErrorCode]:
        """Write the offsets as part of `producer_id`'s transaction: pending until its marker. An
        error per commit, in order."""
        error = code_of(lambda: self._check_txn_commit(group_id, producer_id, generation, member_id, instance_id))
        if error is not ErrorCode.none:
            return [error] * len(commits)
        group = self.groups[group_id]
        errors, entries = self._entries(group_id, commits, -1)
        if not entries:
            return errors
        pending: dict[TopicPartition, CommittedOffset] = {}

        def appended(record_offset: int) -> None:
            pending.update(_committed(entries, record_offset))
            group.add_pending(producer_id, pending)

        try:
            await self.append_txn(self.partition_for(group_id), entries,
                                  ProducerFields(producer_id, producer_epoch), appended)
        except KafkaApiError as exc:
            group.drop_pending(producer_id, pending)  # Kafka's failPendingTxnOffsetCommit
            return [exc.code if e is ErrorCode.none else e for e in errors]
        return errors

    def _check_txn_commit(self, group_id: str, producer_id: int, generation: int, member_id: str,
                          instance_id: str | None) -> None:
        """Kafka's validateTransactionalOffsetCommit and ClassicGroup.validateOffsetCommit(isTransactional)."""
        if producer_id < 0 and group_id and self.serves(group_id):
            raise InvalidProducerIdMapping  # what the transaction coordinator says of it
        group = self._commit_group(group_id, generation)
        if group is None:
            return
        if generation < 0 and group.is_in(GroupState.EMPTY):
            return
        if generation < 0 and not member_id and instance_id is None:
            return  # TxnOffsetCommit v0-v2 carry no member: taken by any group
        _check_member(group, member_id, instance_id)
        if generation != group.generation:
            raise IllegalGeneration

    # ================================================================ OffsetFetch

    def fetch_offsets(self, group_id: str, wanted: list[tuple[str, list[int]]] | None, require_stable: bool = False
                      ) -> list[FetchedOffset]:
        """Committed offsets of `wanted` partitions (None: all the group has committed); -1 when
        none. With `require_stable`, a partition with pending transactional offsets answers
        UNSTABLE_OFFSET_COMMIT instead (the group's error stays NONE, as in Kafka). Refused when
        this broker cannot serve the group."""
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            group = ClassicGroup(group_id)
        keys = sorted(group.offsets) if wanted is None else [
            (topic, partition) for topic, partitions in wanted for partition in partitions]
        return [_fetched(group, key, require_stable) for key in keys]

    # ================================================================ OffsetDelete, DeleteGroups

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> list[ErrorCode]:
        """OffsetDelete: an error per partition; a refusal of the whole group is raised."""
        group = self._deletable_group(group_id)
        subscribed = set() if group.is_in(GroupState.EMPTY) else group.subscribed_topics()
        if subscribed is None:
            raise NonEmptyGroup
        errors = [GroupSubscribedToTopic.code if topic in subscribed else ErrorCode.none for topic, _ in partitions]
        doomed = [key for key, e in zip(partitions, errors, strict=True)
                  if e is ErrorCode.none and (key in group.offsets or group.has_pending_offset(key))]
        if doomed:
            await self.append(self.partition_for(group_id), [(OffsetKey(group_id, *k), None) for k in doomed])
            group.remove_offsets(doomed)
        return errors

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups of a classic group: refused unless it is Empty."""
        group = self._deletable_group(group_id)
        if not group.is_in(GroupState.EMPTY):
            raise NonEmptyGroup
        await self._delete_group(group)

    def _deletable_group(self, group_id: str) -> ClassicGroup:
        """The group OffsetDelete and DeleteGroups act on, once this broker may serve it."""
        if not group_id:
            raise InvalidGroupId
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            raise GroupIdNotFound
        return group

    async def _delete_group(self, group: ClassicGroup) -> None:
        """Tombstones for its offsets, committed or pending, and its metadata; then the group is Dead
        and forgotten (the open transactions' markers find nothing of it)."""
        keys = set(group.offsets) | group.pending_offset_keys()
        entries: list[Entry] = [(OffsetKey(group.group_id, *key), None) for key in sorted(keys)]
        entries.append((GroupKey(group.group_id), None))
        await self.append(self.partition_for(group.group_id), entries)
        group.transition(GroupState.DEAD, self.clock.now_ms())
        self.cancel_timers(group)
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    # ================================================================ expiry

    def _schedule_expiry(self) -> None:
        self._expiry_timer = self.clock.call_later(
            self.retention_check_ms, lambda: self.spawn(self._expire_offsets())
        )

    async def _expire_offsets(self) -> None:
        try:
            now = self.clock.now_ms()
            for group in list(self.groups.values()):
                await self._expire_group_offsets(group, now)
        finally:
            self._schedule_expiry()

    async def _expire_group_offsets(self, group: ClassicGroup, now: int) -> None:
        expired = self._expired_offsets(group, now)
        # an Empty group left with no offsets goes too, as in Kafka, unless a transaction is open
        deletable = group.is_in(GroupState.EMPTY) and not group.pending_members and not group.pending_txn_offsets
        if not expired and not (deletable and not group.offsets):
            return
        try:
            if deletable and len(expired) == len(group.offsets):
                await self._delete_group(group)
                return
            await self.append(self.partition_for(group.group_id),
                              [(OffsetKey(group.group_id, *key), None) for key in expired])
        except KafkaApiError as exc:
            log.warning("could not expire offsets of group %s: %s", group.group_id, exc)
            return
        group.remove_offsets(expired)

    def _expired_offsets(self, group: ClassicGroup, now: int) -> list[TopicPartition]:
        """Kafka's rules: every offset of an Empty group (counted from when it became Empty, or from
        each commit for groups without a protocol); in a Stable consumer group, the offsets of topics
        no member subscribes to any more, counted from their commit (KIP-496). Never an offset an
        open transaction commits."""
        if self.consumer_group_active(group.group_id):
            return []
        if group.is_in(GroupState.EMPTY) and not group.pending_members:
            since_empty = group.state_timestamp if group.protocol_type and group.state_timestamp >= 0 else None
            candidates = [key for key, offset in group.offsets.items()
                          if self._is_expired(offset.value, since_empty, now)]
        elif group.is_in(GroupState.STABLE) and (subscribed := group.subscribed_topics()) is not None:
            candidates = [key for key, offset in group.offsets.items()
                          if key[0] not in subscribed and self._is_expired(offset.value, None, now)]
        else:
            return []
        return [key for key in candidates if not group.has_pending_offset(key)]

    def _is_expired(self, value: OffsetValue, since: int | None, now: int) -> bool:
        if value.expire_timestamp >= 0:
            return now >= value.expire_timestamp
        return now - (value.commit_timestamp if since is None else since) >= self.retention_ms


def _committed(entries: list[Entry], record_offset: int) -> dict[TopicPartition, CommittedOffset]:
    """The offsets of a batch written at `record_offset`."""
    return {(key.topic, key.partition): CommittedOffset(value, record_offset)
            for key, value in entries if isinstance(key, OffsetKey) and isinstance(value, OffsetValue)}


def _check_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> None:
    """Kafka's ClassicGroup.validateMember: a static member's instance id must map to this member id."""
    if instance_id is not None:
        current = group.static_members.get(instance_id)
        if current is None:
            raise UnknownMemberId
        if current != member_id:
            raise FencedInstanceId
    if member_id not in group.members:
        raise UnknownMemberId


def _fetched(group: ClassicGroup, key: TopicPartition, require_stable: bool) -> FetchedOffset:
    topic, partition = key
    if require_stable and group.has_pending_offset(key):
        return FetchedOffset(topic, partition, -1, -1, "", ErrorCode.unstable_offset_commit)
    committed = group.offsets.get(key)
    if committed is None:
        return FetchedOffset(topic, partition, -1, -1, "")
    value = committed.value
    return FetchedOffset(topic, partition, value.offset, value.leader_epoch, value.metadata)
