"""Which type holds a group id, classic, consumer (KIP-848) or share (KIP-932), and the APIs that
serve them all.

A group id is either a classic group or a consumer group. A classic group with members is
converted to a consumer group by the first ConsumerGroupHeartbeat when `migration.py` allows it,
else it keeps its id (GROUP_ID_NOT_FOUND); a consumer group with members takes JoinGroup,
SyncGroup, Heartbeat and LeaveGroup of classic members of the "consumer" protocol type
(`classic_members.py`; another type: INCONSISTENT_GROUP_PROTOCOL), and becomes a classic group
again when its last consumer-protocol member goes (`migration.py`). An empty group of either
type gives its id up to the other. A consumer group's committed offsets live in
an Empty `ClassicGroup` of its id (`offsets.py` writes, fetches and expires them as for classic
groups; while the consumer group has members they do not expire). DescribeGroups answers a
consumer group as an unknown group, as Kafka does (ConsumerGroupDescribe describes it). A share
group keeps its id the same way from both (GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL) and
takes it from an empty group of either type; DescribeGroups answers it as an unknown group too.

`GroupCoordinator` inherits these methods; they reach its groups, `consumer_groups`,
`membership`, `offsets`, `check_coordinator` and `serves`.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..errors import KafkaApiError, NonEmptyGroup, code_of
from .classic_members import ClassicMembers
from .consumer_group import ConsumerGroup, ConsumerGroups, ConsumerMember, Heartbeat, HeartbeatResult
from .group import ClassicGroup, GroupState, JoinResult
from .migration import MigrationPolicy, consumer_group_from, fill_classic_group, may_downgrade
from .offsets import FetchedOffset, OffsetCommit
from .share_group import ShareGroup, ShareGroups, ShareHeartbeat

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .clock import Clock
    from .consumer_persistence import ConsumerGroupWrites
    from .membership import JoinRequest, Membership
    from .offsets import Offsets
    from .share_group_persistence import ShareGroupWrites

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ListedGroup:
    """A group as ListGroups answers it."""

    group_id: str
    state: str
    protocol_type: str
    group_type: str


class GroupTypes:
    groups: dict[str, ClassicGroup]
    consumer_groups: ConsumerGroups
    consumer_writes: ConsumerGroupWrites
    share_groups: ShareGroups
    share_writes: ShareGroupWrites
    membership: Membership
    offsets: Offsets
    check_coordinator: Callable[[str], None]
    serves: Callable[[str], bool]
    clock: Clock
    classic_members: ClassicMembers
    migration_policy: MigrationPolicy
    # a deleted share group's state on its share coordinators (group id, topics); the broker sets it
    delete_share_state: Callable[[str, set[str]], Awaitable[None]]

    # ------------------------------------------------------------ classic or consumer group

    def _is_classic(self, group_id: str) -> bool:
        """Does a classic group with members hold this id?"""
        group = self.groups.get(group_id)
        return group is not None and not group.is_empty and not group.is_in(GroupState.DEAD)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group that holds `group_id`, if one does."""
        return None if self._is_classic(group_id) else self.consumer_groups.get(group_id)

    def _is_consumer(self, group_id: str) -> bool:
        """Does a consumer group hold this id (else it is classic or unknown)?"""
        return self.consumer_group(group_id) is not None

    async def consumer_heartbeat(self, request: Heartbeat) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: the request's checks, then may this broker serve the group; answered
        once its changes are written."""
        self.consumer_groups.validate(request)
        self.check_coordinator(request.group_id)
        def upgrade_and_heartbeat() -> HeartbeatResult:
            self._take_from_share_group(request.group_id, ErrorCode.group_id_not_found)
            if request.member_epoch == 0 and self._is_classic(request.group_id):
                self._upgrade(self.groups[request.group_id])
            return self.consumer_groups.heartbeat(request)
        return await self.consumer_writes.change(request.group_id, upgrade_and_heartbeat, request.member_id)

    def _upgrade(self, classic: ClassicGroup) -> None:
        """Convert a classic group with members to a consumer group, if it may be (else it stays
        and the heartbeat is refused as before)."""
        converted = consumer_group_from(classic, self.consumer_groups.config.max_size)
        if converted is None or not self.migration_policy.upgrades:
            log.info("group %s: not upgraded to a consumer group (policy %s, protocol type %s)", classic.group_id,
                     self.migration_policy.value, classic.protocol_type)
            return
        self.membership.release_members(classic)
        converted.partition_counts = self.consumer_groups._partition_counts(converted)
        self.consumer_groups.groups[converted.group_id] = converted
        for member in converted.members.values():
            self.consumer_groups._reset_session(converted, member)
        log.info("group %s: upgraded from classic to consumer group at epoch %d with %d members",
                 converted.group_id, converted.group_epoch, len(converted.members))

    def _downgrade(self, group: ConsumerGroup, leaving: ConsumerMember) -> bool:
        """The last consumer-protocol member leaves: the classic members go on in a classic group."""
        if (leaving.classic is not None or not self.migration_policy.downgrades
                or not may_downgrade(group, leaving, self.membership.max_group_size)):
            return False
        self.consumer_groups.unload(lambda group_id: group_id == group.group_id)
        classic = self.groups.get(group.group_id)
        if classic is None or classic.is_in(GroupState.DEAD):
            classic = self.groups[group.group_id] = ClassicGroup(group.group_id)
        fill_classic_group(classic, group, leaving, self.clock.now_ms())
        self.membership.rebalance_adopted(classic)
        log.info("group %s: downgraded from consumer to classic group at generation %d with %d members",
                 group.group_id, classic.generation, len(classic.members))
        return True

    def _take_from_share_group(self, group_id: str, refusal: ErrorCode) -> None:
        """A share group with members keeps its id (KafkaApiError `refusal`); an empty one gives it up."""
        share = self.share_groups.get(group_id)
        if share is not None and share.members:
            raise KafkaApiError(refusal, f"Group {group_id} is a share group.")
        if share is not None:
            self.share_groups.delete(group_id)

    def share_group(self, group_id: str) -> ShareGroup | None:
        """The share group that holds `group_id`, if one does."""
        return None if self._is_classic(group_id) else self.share_groups.get(group_id)

    async def share_heartbeat(self, request: ShareHeartbeat) -> HeartbeatResult:
        """ShareGroupHeartbeat (KIP-932): the request's checks, may this broker serve the group; an
        empty consumer group gives its id up to the share group."""
        self.share_groups.validate(request)
        self.check_coordinator(request.group_id)
        consumer = self.consumer_groups.get(request.group_id)
        if consumer is not None and consumer.is_empty and self.share_groups.get(request.group_id) is None:
            await self.consumer_writes.delete(request.group_id)
        return await self.share_writes.heartbeat(request)

    async def join(self, request: JoinRequest) -> JoinResult:
        """JoinGroup. A consumer group with members takes the member in as a classic member; an
        empty one gives its id up to the classic group, as an empty share group does (one with
        members keeps it). Refused with the member id it came with."""
        if self.serves(request.group_id):
            self._take_from_share_group(request.group_id, ErrorCode.inconsistent_group_protocol)
        consumer = self.consumer_groups.get(request.group_id)
        if consumer is not None and self.serves(request.group_id):
            if not consumer.is_empty:
                return await self.consumer_writes.change(request.group_id,
                                                         lambda: self._classic_join(consumer, request))
            await self.consumer_writes.delete(request.group_id)
        return await self.membership.join(request)

    def _classic_join(self, consumer: ConsumerGroup, request: JoinRequest) -> JoinResult:
        self.membership.check_session_timeout(request)
        return self.classic_members.join(consumer, request)

    def _mixed(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group with members that serves the classic requests of this id, if one does."""
        if not group_id or not self.serves(group_id):
            return None
        return self.consumer_groups.active(group_id)

    async def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> tuple[bytes, ClassicGroup | None]:
        """SyncGroup (for a classic member of a consumer group: its assignment, and no classic group)."""
        consumer = self._mixed(group_id)
        if consumer is None:
            return await self.membership.sync(group_id, generation, member_id, instance_id, protocol_type,
                                              protocol_name, assignments)
        return self.classic_members.sync(consumer, generation, member_id, instance_id, protocol_type,
                                         protocol_name), None

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        consumer = self._mixed(group_id)
        if consumer is None:
            self.membership.heartbeat(group_id, generation, member_id, instance_id)
        else:
            self.classic_members.heartbeat(consumer, generation, member_id, instance_id)

    async def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """LeaveGroup: an error per leaving member (classic members of a consumer group leave
        through its write path); a refusal of the whole group is raised."""
        consumer = self._mixed(group_id)
        if consumer is None:
            return self.membership.leave(group_id, leaving)
        return await self.consumer_writes.change(group_id, lambda: [
            code_of(functools.partial(self.classic_members.leave, consumer, member_id, instance_id))
            for member_id, instance_id in leaving])

    def describe(self, group_id: str) -> ClassicGroup | None:
        """DescribeGroups: a consumer group is not a classic group (answered as an unknown one)."""
        group = self.membership.describe(group_id)
        if self._is_consumer(group_id) or self.share_group(group_id) is not None:
            return None
        return group

    def list_groups(self) -> list[ListedGroup]:
        consumer = {g.group_id: ListedGroup(g.group_id, g.state.value, "consumer", "consumer")
                    for g in self.consumer_groups.all_groups() if not self._is_classic(g.group_id)}
        share = {g.group_id: ListedGroup(g.group_id, g.state.value, "share", "share")
                 for g in self.share_groups.all_groups() if not self._is_classic(g.group_id)}
        classic = [ListedGroup(g.group_id, g.state.value, g.protocol_type or "", "classic")
                   for g in self.membership.list_groups() if g.group_id not in consumer and g.group_id not in share]
        return classic + list(consumer.values()) + list(share.values())

    async def commit_offsets(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                             commits: list[OffsetCommit], expire_timestamp: int = -1) -> list[ErrorCode]:
        """OffsetCommit; in a consumer group `generation` is the member epoch."""
        if not self._is_consumer(group_id):
            return await self.offsets.commit_offsets(group_id, generation, member_id, instance_id, commits,
                                                     expire_timestamp)
        error = code_of(lambda: self._check_consumer_commit(group_id, member_id, generation))
        if error is not ErrorCode.none:
            return [error] * len(commits)
        return await self.offsets.commit_offsets(group_id, -1, "", None, commits, expire_timestamp)

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                                 member_id: str, instance_id: str | None, commits: list[OffsetCommit]
                                 ) -> list[ErrorCode]:
        """TxnOffsetCommit; in a consumer group `generation` is the member epoch, checked as OffsetCommit's."""
        if self._is_consumer(group_id) and (member_id or generation >= 0):
            error = code_of(lambda: self._check_consumer_commit(group_id, member_id, generation))
            if error is not ErrorCode.none:
                return [error] * len(commits)
            generation, member_id, instance_id = -1, "", None
        return await self.offsets.commit_txn_offsets(group_id, producer_id, producer_epoch, generation, member_id,
                                                     instance_id, commits)

    def fetch_offsets(self, group_id: str, wanted: list[tuple[str, list[int]]] | None, require_stable: bool = False,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> list[FetchedOffset]:
        """OffsetFetch; v9 names the member of a consumer group, whose epoch must be current."""
        if self._is_consumer(group_id) and self.serves(group_id) and (
                member_id is not None or member_epoch >= 0):
            self.consumer_groups.check_commit(group_id, member_id or "", member_epoch)
        return self.offsets.fetch_offsets(group_id, wanted, require_stable)

    def _check_consumer_commit(self, group_id: str, member_id: str, member_epoch: int) -> None:
        """May this broker take a commit of this consumer group's member at this epoch?"""
        self.check_coordinator(group_id)
        self.consumer_groups.check_commit(group_id, member_id, member_epoch)

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups: an empty consumer or share group goes with its offsets (a non-empty one: NON_EMPTY_GROUP)."""
        if self.share_group(group_id) is not None and self.serves(group_id):
            if self.share_groups.active(group_id) is not None:
                raise NonEmptyGroup
            # its share state first: if that fails, the group stays for a retry
            await self.share_writes.delete(group_id, self.delete_share_state)
            return
        if not self._is_consumer(group_id) or not self.serves(group_id):
            await self.offsets.delete_group(group_id)
            return
        if self.consumer_groups.active(group_id) is not None:
            raise NonEmptyGroup
        # its records first: if the offsets' deletion fails, a retry finds them in a classic group
        await self.consumer_writes.delete(group_id)
        if group_id in self.groups:  # the holder of its offsets
            await self.offsets.delete_group(group_id)
