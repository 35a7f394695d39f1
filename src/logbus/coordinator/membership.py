"""Group membership: JoinGroup/SyncGroup/Heartbeat/LeaveGroup, rebalances and sessions; the
groups DescribeGroups and ListGroups show.

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

Depends on: the `group.*` config values; the `Clock` (sessions and rebalance timers); the groups
dict it shares with `offsets.py` and `loading.py` (which add and remove groups); a
`check_coordinator(group_id)` callable (`loading.py`: refuses unless this broker is the
group's coordinator, with its partition loaded); a `store_group` coroutine (writes a group's
metadata record to __consumer_offsets: the leader's assignment, a static member's new id, a
group a rebalance left Empty); and a `spawn` for the writes nobody waits for. It exposes `reset_session`,
`cancel_timers`, `adopt` and `evict` to the other two: a commit keeps a member alive, a deletion
stops a group's timers, a loaded group's members start their sessions, an unloaded group's
waiting requests are answered.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupMaxSizeReached,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    KafkaApiError,
    RebalanceInProgress,
    UnknownMemberId,
    code_of,
)
from .clock import Clock
from .group import ClassicGroup, GroupState, JoinResult, Member

log = logging.getLogger(__name__)


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


class Membership:
    def __init__(self, clock: Clock, groups: dict[str, ClassicGroup], *, min_session_ms: int,
                 max_session_ms: int, initial_delay_ms: int, max_group_size: int,
                 check_coordinator: Callable[[str], None],
                 store_group: Callable[[ClassicGroup], Coroutine[Any, Any, None]],
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task]) -> None:
        self.clock = clock
        self.groups = groups
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self.initial_delay_ms = initial_delay_ms
        self.max_group_size = max_group_size
        self.check_coordinator = check_coordinator
        self.store_group = store_group
        self.spawn = spawn

    def stop(self) -> None:
        for group in self.groups.values():
            self.cancel_timers(group)

    # ================================================================ JoinGroup

    async def join(self, request: JoinRequest) -> JoinResult:
        """The member's JoinGroup answer once the rebalance completes (or MEMBER_ID_REQUIRED with
        the id to join with); refused with the member id it came with."""
        self._check_group_id(request.group_id)
        self.check_session_timeout(request)
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_id:
                raise UnknownMemberId
            group = self.groups[request.group_id] = ClassicGroup(request.group_id, state_timestamp=self.clock.now_ms())
        if group.is_in(GroupState.DEAD):
            raise CoordinatorNotAvailable
        if not group.supports(request.protocol_type, request.protocols):
            raise InconsistentGroupProtocol
        if request.member_id:
            return await self._join_known(group, request)
        return await self._join_unknown(group, request)

    def check_session_timeout(self, request: JoinRequest) -> None:
        if not self.min_session_ms <= request.session_timeout_ms <= self.max_session_ms:
            raise InvalidSessionTimeout

    async def _join_unknown(self, group: ClassicGroup, request: JoinRequest) -> JoinResult:
        new_id = f"{request.client_id}-{uuid.uuid4()}"
        instance_id = request.group_instance_id
        if instance_id is not None and group.static_member_id(instance_id) is not None:
            return await self._rejoin_static(group, request, new_id)
        if len(group.members) >= self.max_group_size:
            raise GroupMaxSizeReached  # answered with the request's member id: none
        if instance_id is None and request.require_known_member_id:
            group.pending_members.add(new_id)
            self._schedule_pending_expiry(group, new_id, request.session_timeout_ms)
            return JoinResult(ErrorCode.member_id_required, new_id)
        return await self._add_and_rebalance(group, request, new_id)

    async def _join_known(self, group: ClassicGroup, request: JoinRequest) -> JoinResult:
        member_id = request.member_id
        if group.is_fenced(member_id, request.group_instance_id):
            raise FencedInstanceId
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            return await self._add_and_rebalance(group, request, member_id)
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId
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
            self.reset_session(group, member)
            await self._store_group_quietly(group)
            is_leader = group.leader_id == new_id
            result = self._current_generation(group, member)
            result.skip_assignment = is_leader
            return result
        return await self._update_and_rebalance(group, member, request)

    def _current_generation(self, group: ClassicGroup, member: Member) -> JoinResult:
        self.reset_session(group, member)
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
            self.spawn(self._store_group_quietly(group))
            return
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, now)
        for member in group.members.values():
            member.is_new = False
            member.assignment = b""
            member.join_waiter.set_result(self._join_result(group, member))
            self.reset_session(group, member)
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
                   assignments: dict[str, bytes]) -> tuple[bytes, ClassicGroup]:
        """The member's assignment, once the leader's is written, and its group; refused with
        the checks' refusal, or the code the rebalance answered its waiting request with."""
        self._check_group_id(group_id)
        group = self._member_group(self.groups.get(group_id), member_id, instance_id, generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name):
            raise InconsistentGroupProtocol
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            raise RebalanceInProgress
        self.reset_session(group, member)
        self._mark_synced(group, member_id)
        if group.is_in(GroupState.STABLE):
            return member.assignment, group
        waiter = member.sync_waiter = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            await self._apply_assignment(group, assignments)
        error, assignment = await asyncio.shield(waiter)
        if error is not ErrorCode.none:
            raise KafkaApiError(error)  # the refusal a rebalance, fencing or unloading answered it with
        return assignment, group

    async def _apply_assignment(self, group: ClassicGroup, assignments: dict[str, bytes]) -> None:
        generation = group.generation
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        try:
            await self.store_group(group)
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

    def _check_group_id(self, group_id: str) -> None:
        """What every classic group request checks first: an id, that this broker may serve."""
        if not group_id:
            raise InvalidGroupId
        self.check_coordinator(group_id)

    @staticmethod
    def _member_group(group: ClassicGroup | None, member_id: str, instance_id: str | None,
                      generation: int) -> ClassicGroup:
        """The group, once the checks SyncGroup and Heartbeat share pass, in Kafka's order."""
        if group is None:
            raise UnknownMemberId
        if group.is_in(GroupState.DEAD):
            raise CoordinatorNotAvailable
        if group.is_fenced(member_id, instance_id):
            raise FencedInstanceId
        if member_id not in group.members or group.is_in(GroupState.EMPTY):
            raise UnknownMemberId
        if generation != group.generation:
            raise IllegalGeneration
        return group

    # ================================================================ Heartbeat

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        """The member is alive; refused (REBALANCE_IN_PROGRESS: rejoin) while the group rebalances."""
        self._check_group_id(group_id)
        group = self._member_group(self.groups.get(group_id), member_id, instance_id, generation)
        self.reset_session(group, group.members[member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            raise RebalanceInProgress

    # ================================================================ LeaveGroup

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """An error per leaving member; a refusal of the whole group is raised."""
        self._check_group_id(group_id)
        group = self.groups.get(group_id)
        if group is None:
            return [UnknownMemberId.code] * len(leaving)
        if group.is_in(GroupState.DEAD):
            raise CoordinatorNotAvailable
        return [code_of(functools.partial(self._leave_one, group, member_id, instance_id))
                for member_id, instance_id in leaving]

    def _leave_one(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> None:
        if instance_id is not None:
            current = group.static_member_id(instance_id)
            if current is None:
                raise UnknownMemberId
            if member_id and member_id != current:
                raise FencedInstanceId
            member_id = current
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId
        self._remove_member_and_rebalance(group, member)

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

    # ================================================================ DescribeGroups, ListGroups

    def describe(self, group_id: str) -> ClassicGroup | None:
        """The group, None when unknown; refused when this broker cannot serve it."""
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        return group if group is not None and not group.is_in(GroupState.DEAD) else None

    def list_groups(self) -> list[ClassicGroup]:
        return [g for g in self.groups.values() if not g.is_in(GroupState.DEAD)]

    # ================================================================ sessions

    def reset_session(self, group: ClassicGroup, member: Member) -> None:
        """The member is alive: its session timeout runs from now."""
        self._cancel_session(member)
        member.session_timer = self.clock.call_later(
            member.session_timeout_ms, self._on_session_expired, group, member.member_id
        )

    def adopt(self, group: ClassicGroup) -> None:
        """A group just loaded from __consumer_offsets: its members' sessions run from now."""
        for member in group.members.values():
            self.reset_session(group, member)

    def release_members(self, group: ClassicGroup) -> None:
        """The group's members moved into a consumer group (an online upgrade): its waiting
        JoinGroup and SyncGroup requests get REBALANCE_IN_PROGRESS (they rejoin the consumer
        group), and it stays Empty, holding the offsets; its record is written so."""
        self.evict(group, ErrorCode.rebalance_in_progress)
        group.members.clear()
        group.static_members.clear()
        group.pending_members.clear()
        group.leader_id = group.protocol_name = None
        group.transition(GroupState.EMPTY, self.clock.now_ms())
        self.spawn(self._store_group_quietly(group))

    def rebalance_adopted(self, group: ClassicGroup) -> None:
        """A Stable group just built from a consumer group (an online downgrade): sessions start
        and a rebalance begins, as Kafka's convertToClassicGroup."""
        self.adopt(group)
        self._prepare_rebalance(group)

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
            self.reset_session(group, member)  # a request of it is in flight: it is alive
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

    def cancel_timers(self, group: ClassicGroup) -> None:
        """Stop the group's rebalance, pending-sync and session timers (it is deleted or unloaded)."""
        self._cancel_join_timer(group)
        self._cancel_sync_timer(group)
        for member in group.members.values():
            self._cancel_session(member)

    def evict(self, group: ClassicGroup, code: ErrorCode) -> None:
        """The group left this coordinator's memory: stop its timers; its waiting JoinGroup and
        SyncGroup requests get `code`."""
        self.cancel_timers(group)
        for member in group.members.values():
            if member.awaiting_join:
                member.join_waiter.set_result(JoinResult(code, member.member_id))
        self._fail_sync_waiters(group, code)

    # ================================================================ persistence

    async def _store_group_quietly(self, group: ClassicGroup) -> None:
        try:
            await self.store_group(group)
        except KafkaApiError as exc:
            log.warning("could not store group %s: %s", group.group_id, exc)
