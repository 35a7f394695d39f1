"""The classic group coordinator: JoinGroup/SyncGroup/Heartbeat/LeaveGroup and committed offsets.

Semantics follow Kafka's GroupCoordinator for classic groups (see `group.py` for the states):
- A member's first JoinGroup (v4+) gets MEMBER_ID_REQUIRED with an id to join with; static
  members (`group.instance.id`) skip that and keep their assignment across restarts: a static
  member rejoining a Stable group with the same protocols gets its old assignment back without
  a rebalance, and its previous member id is fenced (FENCED_INSTANCE_ID).
- A rebalance waits for every known member to rejoin, at most the largest rebalance timeout;
  a new (Empty) group first waits `group.initial.rebalance.delay.ms` for more members, extended
  while members keep arriving (Kafka's InitialDelayedJoin). Members that did not rejoin are
  removed. The leader gets every member's subscription and hands the assignment out through
  SyncGroup; the group is Stable once the leader's SyncGroup is written to __consumer_offsets.
- Sessions are timers of the injected `Clock` (no polling; the event loop's in production): a
  member silent for its session timeout is removed and the group rebalances. Once a join
  completes, members that have not sent SyncGroup within the rebalance timeout are removed too
  (Kafka's pending-sync expiry), so one member that heartbeats but never syncs cannot hold the
  group. Requests waiting for a rebalance are futures.
- State lives in memory and in `__consumer_offsets` (records as Kafka writes them); a
  partition's groups are rebuilt from its records when the coordinator starts.
- Offsets of Empty groups expire after `offsets.retention.minutes` (counted from when the group
  became Empty; for groups without a protocol, from each commit), then the group is deleted; a
  Stable consumer group loses the offsets of topics it no longer subscribes to (KIP-496).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..errors import KafkaApiError
from .clock import Clock, Timer
from .group import ClassicGroup, GroupState, JoinResult, Member
from .records import GroupKey, GroupValue, OffsetKey, OffsetValue, partition_for_group
from .store import TOPIC as OFFSETS_TOPIC
from .store import Entry, OffsetsTopic

if TYPE_CHECKING:
    from ..cluster.partition import Partition
    from ..config import BrokerConfig

log = logging.getLogger(__name__)

OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes default


@dataclass(slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool


@dataclass(slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker config values the coordinator uses (Kafka's keys, in ms)."""

    min_session_ms: int
    max_session_ms: int
    initial_delay_ms: int
    max_group_size: int
    retention_ms: int
    retention_check_ms: int

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> GroupConfig:
        return cls(
            min_session_ms=config["group.min.session.timeout.ms"],
            max_session_ms=config["group.max.session.timeout.ms"],
            initial_delay_ms=config["group.initial.rebalance.delay.ms"],
            max_group_size=config["group.max.size"],
            retention_ms=config["offsets.retention.minutes"] * 60_000,
            retention_check_ms=config["offsets.retention.check.interval.ms"],
        )


class GroupCoordinator:
    def __init__(self, config: GroupConfig, store: OffsetsTopic, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.groups: dict[str, ClassicGroup] = {}
        self.loaded_partitions: set[int] = set()
        self.min_session_ms = config.min_session_ms
        self.max_session_ms = config.max_session_ms
        self.initial_delay_ms = config.initial_delay_ms
        self.max_group_size = config.max_group_size
        self.retention_ms = config.retention_ms
        self.retention_check_ms = config.retention_check_ms
        self._expiry_timer: Timer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._loading: dict[int, asyncio.Task] = {}  # partition index -> its load

    # ================================================================ lifecycle

    def start(self) -> None:
        """Rebuild the groups of every __consumer_offsets partition this broker leads; start expiry."""
        if self.store.exists():
            for index in range(self.store.partition_count()):
                self._ensure_loaded(index)
        self._schedule_expiry()

    def stop(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        for task in list(self._loading.values()):
            task.cancel()
        for group in self.groups.values():
            self._cancel_timers(group)

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.store.partition_count())

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """Why this broker cannot serve `group_id` now, or None when it can."""
        if not self.store.exists():
            return ErrorCode.coordinator_not_available
        index = self.partition_for(group_id)
        partition = self.store.partition(index)
        if partition is None or not partition.is_leader:
            return ErrorCode.not_coordinator
        if not self._ensure_loaded(index):
            return ErrorCode.coordinator_load_in_progress
        return None

    # ================================================================ JoinGroup

    async def join(self, request: JoinRequest) -> JoinResult:
        if not request.group_id:
            return JoinResult(ErrorCode.invalid_group_id, request.member_id)
        error = self.coordinator_error(request.group_id)
        if error is not None:
            return JoinResult(error, request.member_id)
        if not self.min_session_ms <= request.session_timeout_ms <= self.max_session_ms:
            return JoinResult(ErrorCode.invalid_session_timeout, request.member_id)
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_id:
                return JoinResult(ErrorCode.unknown_member_id, request.member_id)
            group = self.groups[request.group_id] = ClassicGroup(request.group_id, state_timestamp=self.clock.now_ms())
        if group.is_in(GroupState.DEAD):
            return JoinResult(ErrorCode.coordinator_not_available, request.member_id)
        if not group.supports(request.protocol_type, request.protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id)
        if request.member_id:
            return await self._join_known(group, request)
        return await self._join_unknown(group, request)

    async def _join_unknown(self, group: ClassicGroup, request: JoinRequest) -> JoinResult:
        new_id = f"{request.client_id}-{uuid.uuid4()}"
        instance_id = request.group_instance_id
        if instance_id is not None and group.static_member_id(instance_id) is not None:
            return await self._rejoin_static(group, request, new_id)
        if len(group.members) >= self.max_group_size:
            return JoinResult(ErrorCode.group_max_size_reached, "")
        if instance_id is None and request.require_known_member_id:
            group.pending_members.add(new_id)
            self._schedule_pending_expiry(group, new_id, request.session_timeout_ms)
            return JoinResult(ErrorCode.member_id_required, new_id)
        return await self._add_and_rebalance(group, request, new_id)

    async def _join_known(self, group: ClassicGroup, request: JoinRequest) -> JoinResult:
        member_id = request.member_id
        if group.is_fenced(member_id, request.group_instance_id):
            return JoinResult(ErrorCode.fenced_instance_id, member_id)
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            return await self._add_and_rebalance(group, request, member_id)
        member = group.members.get(member_id)
        if member is None:
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        if group.is_in(GroupState.COMPLETING_REBALANCE) and member.matches(request.protocols):
            return self._current_generation(group, member)  # the join response got lost: send it again
        if (group.is_in(GroupState.STABLE) and member_id != group.leader_id
                and member.matches(request.protocols)):
            return self._current_generation(group, member)
        return await self._update_and_rebalance(group, member, request)

    async def _add_and_rebalance(self, group: ClassicGroup, request: JoinRequest, member_id: str) -> JoinResult:
        member = Member(
            member_id, request.group_instance_id, request.client_id, request.client_host,
            request.rebalance_timeout_ms, request.session_timeout_ms, request.protocol_type,
            request.protocols, is_new=True,
        )
        waiter = member.join_waiter = asyncio.get_running_loop().create_future()
        group.add(member)
        if group.generation == 0:  # only a brand-new group's initial delay is extended (as Kafka does)
            group.new_member_added = True
        self._rebalance_or_complete(group)
        return await asyncio.shield(waiter)

    async def _update_and_rebalance(self, group: ClassicGroup, member: Member, request: JoinRequest) -> JoinResult:
        self._update_member(member, request)
        waiter = member.join_waiter = asyncio.get_running_loop().create_future()
        self._cancel_session(member)
        self._rebalance_or_complete(group)
        return await asyncio.shield(waiter)

    @staticmethod
    def _update_member(member: Member, request: JoinRequest) -> None:
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host

    async def _rejoin_static(self, group: ClassicGroup, request: JoinRequest, new_id: str) -> JoinResult:
        """A known group.instance.id joins with no member id: it takes over the old member."""
        old_id = group.static_members[request.group_instance_id]
        old = group.members[old_id]
        if old.awaiting_join:
            old.join_waiter.set_result(JoinResult(ErrorCode.fenced_instance_id, old_id))
        if old.awaiting_sync:
            old.sync_waiter.set_result((ErrorCode.fenced_instance_id, b""))
        unchanged = old.matches(request.protocols)
        member = group.replace_static_member(request.group_instance_id, new_id)
        if group.is_in(GroupState.STABLE) and unchanged:
            self._update_member(member, request)
            self._reset_session(group, member)
            await self._store_group_quietly(group)
            is_leader = group.leader_id == new_id
            result = self._current_generation(group, member)
            result.skip_assignment = is_leader
            return result
        return await self._update_and_rebalance(group, member, request)

    def _current_generation(self, group: ClassicGroup, member: Member) -> JoinResult:
        self._reset_session(group, member)
        return self._join_result(group, member)

    def _join_result(self, group: ClassicGroup, member: Member) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        members = tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name)) for m in group.members.values()
        ) if is_leader else ()
        return JoinResult(
            ErrorCode.none, member.member_id, group.generation, group.protocol_type, group.protocol_name,
            group.leader_id or "", False, members,
        )

    # ---------------------------------------------------------------- rebalancing

    def _rebalance_or_complete(self, group: ClassicGroup) -> None:
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            for member in group.members.values():
                if member.awaiting_sync:
                    member.sync_waiter.set_result((ErrorCode.rebalance_in_progress, b""))
        was_empty = group.is_in(GroupState.EMPTY)
        group.transition(GroupState.PREPARING_REBALANCE, self.clock.now_ms())
        self._cancel_join_timer(group)
        self._cancel_sync_timer(group)
        if was_empty and self.initial_delay_ms > 0:
            group.new_member_added = False
            group.in_initial_delay = True
            remaining = max(group.max_rebalance_timeout_ms() - self.initial_delay_ms, 0)
            group.join_timer = self.clock.call_later(self.initial_delay_ms, self._on_initial_delay, group, remaining)
            return
        group.join_timer = self.clock.call_later(group.max_rebalance_timeout_ms(), self._complete_join, group)
        self._maybe_complete_join(group)

    def _on_initial_delay(self, group: ClassicGroup, remaining_ms: int) -> None:
        """Kafka's InitialDelayedJoin: keep waiting while new members arrive, up to the rebalance timeout."""
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.initial_delay_ms, remaining_ms)
            group.join_timer = self.clock.call_later(
                delay, self._on_initial_delay, group, max(remaining_ms - delay, 0)
            )
            return
        group.join_timer = None
        group.in_initial_delay = False
        self._complete_join(group)

    def _maybe_complete_join(self, group: ClassicGroup) -> None:
        """Complete the join early once everyone rejoined (never during the initial delay)."""
        if group.is_in(GroupState.PREPARING_REBALANCE) and not group.in_initial_delay and group.all_rejoined():
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        self._cancel_join_timer(group)
        for member in group.not_yet_rejoined():
            self._cancel_session(member)
            group.remove(member.member_id)
        group.generation += 1
        now = self.clock.now_ms()
        if group.is_empty:
            group.protocol_name = None
            group.transition(GroupState.EMPTY, now)
            self._spawn(self._store_group_quietly(group))
            return
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, now)
        for member in group.members.values():
            member.is_new = False
            member.assignment = b""
            member.join_waiter.set_result(self._join_result(group, member))
            self._reset_session(group, member)
        self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        """Kafka's DelayedSync: who has not sent SyncGroup within the rebalance timeout is removed."""
        self._cancel_sync_timer(group)
        group.pending_sync = set(group.members)
        group.sync_timer = self.clock.call_later(
            group.max_rebalance_timeout_ms(), self._on_pending_sync_expired, group, group.generation
        )

    def _on_pending_sync_expired(self, group: ClassicGroup, generation: int) -> None:
        group.sync_timer = None
        if group.generation != generation or not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        missing = [group.members[member_id] for member_id in group.pending_sync if member_id in group.members]
        if not missing:
            return
        log.info("group %s: members %s did not sync generation %d in time", group.group_id,
                 [m.member_id for m in missing], generation)
        for member in missing:
            self._remove_member_and_rebalance(group, member)

    @staticmethod
    def _cancel_sync_timer(group: ClassicGroup) -> None:
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.pending_sync.clear()

    # ================================================================ SyncGroup

    async def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> tuple[ErrorCode, bytes, ClassicGroup | None]:
        error = self.coordinator_error(group_id) if group_id else ErrorCode.invalid_group_id
        if error is not None:
            return error, b"", None
        group = self.groups.get(group_id)
        error = self._member_error(group, member_id, instance_id, generation)
        if error is not None:
            return error, b"", group
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name):
            return ErrorCode.inconsistent_group_protocol, b"", group
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress, b"", group
        self._reset_session(group, member)
        self._mark_synced(group, member_id)
        if group.is_in(GroupState.STABLE):
            return ErrorCode.none, member.assignment, group
        waiter = member.sync_waiter = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            await self._apply_assignment(group, assignments)
        error, assignment = await asyncio.shield(waiter)
        return error, assignment, group

    async def _apply_assignment(self, group: ClassicGroup, assignments: dict[str, bytes]) -> None:
        generation = group.generation
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        try:
            await self._store_group(group)
        except KafkaApiError as exc:
            if group.is_in(GroupState.COMPLETING_REBALANCE) and group.generation == generation:
                self._fail_sync_waiters(group, exc.code)
                self._prepare_rebalance(group)
            return
        if group.is_in(GroupState.COMPLETING_REBALANCE) and group.generation == generation:
            for member in group.members.values():
                if member.awaiting_sync:
                    member.sync_waiter.set_result((ErrorCode.none, member.assignment))
            group.transition(GroupState.STABLE, self.clock.now_ms())

    def _mark_synced(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel_sync_timer(group)

    @staticmethod
    def _fail_sync_waiters(group: ClassicGroup, code: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync:
                member.sync_waiter.set_result((code, b""))

    def _member_error(self, group: ClassicGroup | None, member_id: str, instance_id: str | None,
                      generation: int) -> ErrorCode | None:
        """The checks SyncGroup and Heartbeat share, in Kafka's order."""
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if member_id not in group.members or group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return None

    # ================================================================ Heartbeat

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        error = self.coordinator_error(group_id) if group_id else ErrorCode.invalid_group_id
        if error is not None:
            return error
        group = self.groups.get(group_id)
        error = self._member_error(group, member_id, instance_id, generation)
        if error is not None:
            return error
        self._reset_session(group, group.members[member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ================================================================ LeaveGroup

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group-level error, an error per leaving member)."""
        error = self.coordinator_error(group_id) if group_id else ErrorCode.invalid_group_id
        if error is not None:
            return error, [error] * len(leaving)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(leaving)
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, [ErrorCode.coordinator_not_available] * len(leaving)
        return ErrorCode.none, [self._leave_one(group, member_id, instance_id) for member_id, instance_id in leaving]

    def _leave_one(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            current = group.static_member_id(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != current:
                return ErrorCode.fenced_instance_id
            member_id = current
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join(group)
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        self._remove_member_and_rebalance(group, member)
        return ErrorCode.none

    def _remove_member_and_rebalance(self, group: ClassicGroup, member: Member) -> None:
        self._cancel_session(member)
        if member.awaiting_join:
            member.join_waiter.set_result(JoinResult(ErrorCode.unknown_member_id, member.member_id))
        if member.awaiting_sync:
            member.sync_waiter.set_result((ErrorCode.unknown_member_id, b""))
        group.remove(member.member_id)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    # ================================================================ sessions

    def _reset_session(self, group: ClassicGroup, member: Member) -> None:
        self._cancel_session(member)
        member.session_timer = self.clock.call_later(
            member.session_timeout_ms, self._on_session_expired, group, member.member_id
        )

    @staticmethod
    def _cancel_session(member: Member) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None

    def _on_session_expired(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or self.groups.get(group.group_id) is not group:
            return
        member.session_timer = None
        if member.awaiting_join or member.awaiting_sync:
            self._reset_session(group, member)  # a request of it is in flight: it is alive
            return
        log.info("group %s: member %s expired after %d ms", group.group_id, member_id, member.session_timeout_ms)
        self._remove_member_and_rebalance(group, member)

    def _schedule_pending_expiry(self, group: ClassicGroup, member_id: str, session_ms: int) -> None:
        def expire() -> None:
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._maybe_complete_join(group)

        self.clock.call_later(session_ms, expire)

    def _cancel_join_timer(self, group: ClassicGroup) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.in_initial_delay = False

    def _cancel_timers(self, group: ClassicGroup) -> None:
        self._cancel_join_timer(group)
        self._cancel_sync_timer(group)
        for member in group.members.values():
            self._cancel_session(member)

    # ================================================================ offsets

    async def commit_offsets(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                             commits: list[OffsetCommit], expire_timestamp: int = -1) -> list[ErrorCode]:
        """Write the offsets; an error per commit, in order."""
        error = self._commit_error(group_id, generation, member_id, instance_id)
        if error is not None:
            return [error] * len(commits)
        group = self.groups[group_id]
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
        if not entries:
            return errors
        try:
            await self.store.append(self.partition_for(group_id), entries)
        except KafkaApiError as exc:
            return [exc.code if e is ErrorCode.none else e for e in errors]
        for key, value in entries:
            group.offsets[(key.topic, key.partition)] = value
        return errors

    def _commit_error(self, group_id: str, generation: int, member_id: str,
                      instance_id: str | None) -> ErrorCode | None:
        if not group_id:
            return ErrorCode.invalid_group_id
        error = self.coordinator_error(group_id)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return ErrorCode.illegal_generation
            self.groups[group_id] = ClassicGroup(group_id, state_timestamp=self.clock.now_ms())
            return None
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if generation < 0 and group.is_in(GroupState.EMPTY):
            return None  # a commit outside group management (admin tools, assign())
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        self._reset_session(group, member)
        return None

    def fetch_offsets(self, group_id: str, wanted: list[tuple[str, list[int]]] | None
                      ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """Committed offsets of `wanted` partitions (None: all the group has); -1 when none."""
        error = self.coordinator_error(group_id)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None and not group.is_in(GroupState.DEAD) else {}
        if wanted is None:
            return ErrorCode.none, [_fetched(topic, partition, value) for (topic, partition), value
                                    in sorted(offsets.items())]
        return ErrorCode.none, [
            _fetched(topic, partition, offsets.get((topic, partition)))
            for topic, partitions in wanted for partition in partitions
        ]

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[ErrorCode, list[ErrorCode]]:
        """OffsetDelete: (group error, an error per partition)."""
        error = self.coordinator_error(group_id) if group_id else ErrorCode.invalid_group_id
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.group_id_not_found, []
        subscribed = set() if group.is_in(GroupState.EMPTY) else group.subscribed_topics()
        if subscribed is None:
            return ErrorCode.non_empty_group, []
        errors = [ErrorCode.group_subscribed_to_topic if topic in subscribed else ErrorCode.none
                  for topic, _ in partitions]
        doomed = [key for key, e in zip(partitions, errors, strict=True)
                  if e is ErrorCode.none and key in group.offsets]
        if doomed:
            try:
                await self.store.append(self.partition_for(group_id), [(OffsetKey(group_id, *k), None) for k in doomed])
            except KafkaApiError as exc:
                return exc.code, []
            for key in doomed:
                group.offsets.pop(key, None)
        return ErrorCode.none, errors

    # ================================================================ admin

    def describe(self, group_id: str) -> tuple[ErrorCode | None, ClassicGroup | None]:
        """(coordinator error, the group or None when unknown)."""
        error = self.coordinator_error(group_id)
        if error is not None:
            return error, None
        group = self.groups.get(group_id)
        return None, group if group is not None and not group.is_in(GroupState.DEAD) else None

    def list_groups(self) -> list[ClassicGroup]:
        return [g for g in self.groups.values() if not g.is_in(GroupState.DEAD)]

    async def delete_group(self, group_id: str) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        error = self.coordinator_error(group_id)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.group_id_not_found
        if not group.is_in(GroupState.EMPTY):
            return ErrorCode.non_empty_group
        try:
            await self._delete_group(group)
        except KafkaApiError as exc:
            return exc.code
        return ErrorCode.none

    async def _delete_group(self, group: ClassicGroup) -> None:
        """Tombstones for its offsets and its metadata; then the group is Dead and forgotten."""
        entries: list[Entry] = [(OffsetKey(group.group_id, *key), None) for key in group.offsets]
        entries.append((GroupKey(group.group_id), None))
        await self.store.append(self.partition_for(group.group_id), entries)
        group.transition(GroupState.DEAD, self.clock.now_ms())
        self._cancel_timers(group)
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    # ================================================================ expiry

    def _schedule_expiry(self) -> None:
        self._expiry_timer = self.clock.call_later(
            self.retention_check_ms, lambda: self._spawn(self._expire_offsets())
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
        empty = group.is_in(GroupState.EMPTY) and not group.pending_members
        if not expired and not (empty and not group.offsets):
            return
        try:
            if empty and len(expired) == len(group.offsets):  # nothing left: the group goes too, as in Kafka
                await self._delete_group(group)
                return
            await self.store.append(self.partition_for(group.group_id),
                                    [(OffsetKey(group.group_id, *key), None) for key in expired])
        except KafkaApiError as exc:
            log.warning("could not expire offsets of group %s: %s", group.group_id, exc)
            return
        for key in expired:
            group.offsets.pop(key, None)

    def _expired_offsets(self, group: ClassicGroup, now: int) -> list[tuple[str, int]]:
        """Kafka's rules: every offset of an Empty group (counted from when it became Empty, or from
        each commit for groups without a protocol); in a Stable consumer group, the offsets of topics
        no member subscribes to any more, counted from their commit (KIP-496)."""
        if group.is_in(GroupState.EMPTY) and not group.pending_members:
            since_empty = group.state_timestamp if group.protocol_type and group.state_timestamp >= 0 else None
            return [key for key, value in group.offsets.items() if self._is_expired(value, since_empty, now)]
        if group.is_in(GroupState.STABLE):
            subscribed = group.subscribed_topics()
            if subscribed is not None:
                return [key for key, value in group.offsets.items()
                        if key[0] not in subscribed and self._is_expired(value, None, now)]
        return []

    def _is_expired(self, value: OffsetValue, since: int | None, now: int) -> bool:
        if value.expire_timestamp >= 0:
            return now >= value.expire_timestamp
        return now - (value.commit_timestamp if since is None else since) >= self.retention_ms

    # ================================================================ persistence

    async def _store_group(self, group: ClassicGroup) -> None:
        await self.store.append(self.partition_for(group.group_id), [(GroupKey(group.group_id), group.to_record())])

    async def _store_group_quietly(self, group: ClassicGroup) -> None:
        try:
            await self._store_group(group)
        except KafkaApiError as exc:
            log.warning("could not store group %s: %s", group.group_id, exc)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _ensure_loaded(self, index: int) -> bool:
        """True once partition `index`'s groups are in memory; otherwise start loading it (once).

        An empty partition is loaded at once; others load in the background, a chunk at a time,
        and their groups' requests get COORDINATOR_LOAD_IN_PROGRESS meanwhile, as in Kafka.
        """
        if index in self.loaded_partitions:
            return True
        partition = self.store.partition(index)
        if partition is None or not partition.is_leader:
            return False
        if self.store.is_empty(index):
            self.loaded_partitions.add(index)
            return True
        if index not in self._loading:
            task = self._spawn(self._load(index))
            self._loading[index] = task
            task.add_done_callback(functools.partial(self._on_load_done, index))
        return False

    def on_leadership(self, partition: Partition, leads: bool) -> None:
        """A `__consumer_offsets` partition this broker stopped leading: its groups leave memory
        (timers cancelled, waiting JoinGroup/SyncGroup answered NOT_COORDINATOR), so its clients
        find the new coordinator, and a later leadership loads them afresh from the log. A
        partition it starts leading is loaded at its first request (`_ensure_loaded`)."""
        if leads or partition.topic != OFFSETS_TOPIC:
            return
        index = partition.index
        self.loaded_partitions.discard(index)
        loading = self._loading.pop(index, None)
        if loading is not None:
            loading.cancel()
        for group_id in [g for g in self.groups if self.partition_for(g) == index]:
            group = self.groups.pop(group_id)
            self._cancel_timers(group)
            for member in group.members.values():
                if member.join_waiter is not None and not member.join_waiter.done():
                    member.join_waiter.set_result(JoinResult(ErrorCode.not_coordinator, member.member_id))
            self._fail_sync_waiters(group, ErrorCode.not_coordinator)

    def _on_load_done(self, index: int, task: asyncio.Task) -> None:
        """A failed load (a read error) is logged; the next request for one of its groups retries it."""
        self._loading.pop(index, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("cannot load the groups of %s: %r", self.store.partition(index), task.exception())

    @property
    def loading(self) -> bool:
        """Is any partition's group state still being read (ListGroups answers LOAD_IN_PROGRESS)."""
        return bool(self._loading)

    async def _load(self, index: int) -> None:
        """Rebuild the groups of partition `index` from its records."""
        offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
        metadata: dict[str, GroupValue | None] = {}
        async for entries in self.store.read_latest(index):
            for key, value in entries:
                if isinstance(key, OffsetKey):
                    group_offsets = offsets.setdefault(key.group, {})
                    if value is None:
                        group_offsets.pop((key.topic, key.partition), None)
                    else:
                        group_offsets[(key.topic, key.partition)] = value
                else:
                    metadata[key.group] = value
        for group_id in set(offsets) | set(metadata):
            record = metadata.get(group_id)
            if record is None and not offsets.get(group_id):
                continue
            group = self._group_from_record(group_id, record)
            group.offsets = offsets.get(group_id, {})
            self.groups[group_id] = group
        self.loaded_partitions.add(index)
        log.info("loaded %s: %d groups in total", self.store.partition(index), len(self.groups))

    def _group_from_record(self, group_id: str, record: GroupValue | None) -> ClassicGroup:
        group = ClassicGroup(group_id, state_timestamp=self.clock.now_ms())
        if record is None:
            return group
        group.generation = record.generation
        group.protocol_type = record.protocol_type or None
        group.protocol_name = record.protocol
        if record.state_timestamp >= 0:
            group.state_timestamp = record.state_timestamp
        for value in record.members:
            member = Member(
                value.member_id, value.group_instance_id, value.client_id, value.client_host,
                value.rebalance_timeout_ms, value.session_timeout_ms, group.protocol_type or "",
                [(record.protocol or "", value.subscription)], value.assignment,
            )
            group.add(member)
            self._reset_session(group, member)
        group.leader_id = record.leader if record.leader in group.members else group.leader_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group


def _fetched(topic: str, partition: int, value: OffsetValue | None) -> FetchedOffset:
    if value is None:
        return FetchedOffset(topic, partition, -1, -1, "")
    return FetchedOffset(topic, partition, value.offset, value.leader_epoch, value.metadata)

