"""Which type holds a group id, classic, consumer (KIP-848) or share (KIP-932), and the APIs that
serve them all.

A group id is either a classic group or a consumer group. A classic group with members keeps its
id from consumer members (GROUP_ID_NOT_FOUND); a consumer group with members keeps it from
JoinGroup (INCONSISTENT_GROUP_PROTOCOL, or GROUP_ID_NOT_FOUND for the "consumer" protocol type:
classic members inside consumer groups, which Kafka 4.1 serves, are not served here). An empty
group of either type gives its id up to the other. A consumer group's committed offsets live in
an Empty `ClassicGroup` of its id (`offsets.py` writes, fetches and expires them as for classic
groups; while the consumer group has members they do not expire). DescribeGroups answers a
consumer group as an unknown group, as Kafka does (ConsumerGroupDescribe describes it). A share
group keeps its id the same way from both (GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL) and
takes it from an empty group of either type; DescribeGroups answers it as an unknown group too.

`GroupCoordinator` inherits these methods; they reach its groups, `consumer_groups`,
`membership`, `offsets` and `coordinator_error`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..errors import KafkaApiError
from .consumer_group import ConsumerGroup, ConsumerGroups, Heartbeat, HeartbeatResult
from .group import ClassicGroup, GroupState, JoinResult
from .offsets import FetchedOffset, OffsetCommit
from .share_group import ShareGroup, ShareGroups, ShareHeartbeat

if TYPE_CHECKING:
    from collections.abc import Callable

    from .membership import JoinRequest, Membership
    from .offsets import Offsets


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
    share_groups: ShareGroups
    membership: Membership
    offsets: Offsets
    coordinator_error: Callable[[str], ErrorCode | None]

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

    def consumer_heartbeat(self, request: Heartbeat) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: the request's checks, then may this broker serve the group."""
        self.consumer_groups.validate(request)
        error = self.coordinator_error(request.group_id)
        if error is not None:
            raise KafkaApiError(error)
        self._take_from_share_group(request.group_id, ErrorCode.group_id_not_found)
        return self.consumer_groups.heartbeat(request)

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

    def share_heartbeat(self, request: ShareHeartbeat) -> HeartbeatResult:
        """ShareGroupHeartbeat (KIP-932): the request's checks, may this broker serve the group; an
        empty consumer group gives its id up to the share group."""
        self.share_groups.validate(request)
        error = self.coordinator_error(request.group_id)
        if error is not None:
            raise KafkaApiError(error)
        consumer = self.consumer_groups.get(request.group_id)
        if consumer is not None and consumer.is_empty and self.share_groups.get(request.group_id) is None:
            self.consumer_groups.delete(request.group_id)
        return self.share_groups.heartbeat(request)

    async def join(self, request: JoinRequest) -> JoinResult:
        """JoinGroup. A consumer group with members keeps its id (classic members are not served in
        consumer groups); an empty one gives it up to the classic group."""
        if self.coordinator_error(request.group_id) is None:
            try:
                self._take_from_share_group(request.group_id, ErrorCode.inconsistent_group_protocol)
            except KafkaApiError as exc:
                return JoinResult(exc.code, request.member_id)
        consumer = self.consumer_groups.get(request.group_id)
        if consumer is not None and self.coordinator_error(request.group_id) is None:
            if not consumer.is_empty:
                code = (ErrorCode.group_id_not_found if request.protocol_type == "consumer"
                        else ErrorCode.inconsistent_group_protocol)
                return JoinResult(code, request.member_id)
            self.consumer_groups.delete(request.group_id)
        return await self.membership.join(request)

    def describe(self, group_id: str) -> tuple[ErrorCode | None, ClassicGroup | None]:
        """DescribeGroups: a consumer group is not a classic group (answered as an unknown one)."""
        error, group = self.membership.describe(group_id)
        if error is None and (self._is_consumer(group_id) or self.share_group(group_id) is not None):
            return None, None
        return error, group

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
        error = self.coordinator_error(group_id) or self.consumer_groups.commit_error(group_id, member_id, generation)
        if error is not None:
            return [error] * len(commits)
        return await self.offsets.commit_offsets(group_id, -1, "", None, commits, expire_timestamp)

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                                 member_id: str, instance_id: str | None, commits: list[OffsetCommit]
                                 ) -> list[ErrorCode]:
        """TxnOffsetCommit; in a consumer group `generation` is the member epoch, checked as OffsetCommit's."""
        if self._is_consumer(group_id) and (member_id or generation >= 0):
            error = self.coordinator_error(group_id) or self.consumer_groups.commit_error(group_id, member_id,
                                                                                          generation)
            if error is not None:
                return [error] * len(commits)
            generation, member_id, instance_id = -1, "", None
        return await self.offsets.commit_txn_offsets(group_id, producer_id, producer_epoch, generation, member_id,
                                                     instance_id, commits)

    def fetch_offsets(self, group_id: str, wanted: list[tuple[str, list[int]]] | None, require_stable: bool = False,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """OffsetFetch; v9 names the member of a consumer group, whose epoch must be current."""
        if self._is_consumer(group_id) and self.coordinator_error(group_id) is None and (
                member_id is not None or member_epoch >= 0):
            error = self.consumer_groups.commit_error(group_id, member_id or "", member_epoch)
            if error is not None:
                return error, []
        return self.offsets.fetch_offsets(group_id, wanted, require_stable)

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups: an empty consumer or share group goes with its offsets (a non-empty one: NON_EMPTY_GROUP)."""
        if self.share_group(group_id) is not None and self.coordinator_error(group_id) is None:
            if self.share_groups.active(group_id) is not None:
                return ErrorCode.non_empty_group
            self.share_groups.delete(group_id)
            return ErrorCode.none
        if not self._is_consumer(group_id) or self.coordinator_error(group_id) is not None:
            return await self.offsets.delete_group(group_id)
        if self.consumer_groups.active(group_id) is not None:
            return ErrorCode.non_empty_group
        error = ErrorCode.none
        if group_id in self.groups:  # the holder of its offsets
            error = await self.offsets.delete_group(group_id)
        if error is ErrorCode.none:
            self.consumer_groups.delete(group_id)
        return error
