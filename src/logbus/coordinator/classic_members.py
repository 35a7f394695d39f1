"""Members of the classic protocol inside a KIP-848 consumer group (Kafka 4.x's mixed groups).

During a rolling upgrade a consumer group holds members of both protocols. A classic member
speaks JoinGroup/SyncGroup/Heartbeat/LeaveGroup; the coordinator maps them onto the consumer
group's state machine, as Kafka's GroupMetadataManager (classicGroupJoinToConsumerGroup and its
Sync/Heartbeat/Leave siblings):
- JoinGroup takes the subscription and the owned partitions from the embedded consumer protocol,
  bumps the group epoch if the subscription changed, and reconciles the member one step (the
  same CurrentAssignmentBuilder rules as a heartbeat). The answer names no leader and no members:
  generation = the member epoch, protocol = the member's first. MEMBER_ID_REQUIRED first, as a
  classic group asks (v4+, dynamic members).
- SyncGroup answers the member's current assignment, encoded with the consumer protocol at the
  member's version; REBALANCE_IN_PROGRESS while the group epoch is ahead of the member's (unless it
  is still revoking).
- Heartbeat answers REBALANCE_IN_PROGRESS when the member should rejoin: the group epoch moved,
  it must revoke partitions, or partitions it waits for were released.
- A member that does not rejoin within its rebalance timeout after being told to, or does not
  sync within it after a join, is removed; its session is its JoinGroup session timeout.
Errors: UNKNOWN_MEMBER_ID (unknown, or a consumer-protocol member), FENCED_INSTANCE_ID,
ILLEGAL_GENERATION (generation is not the member epoch), INCONSISTENT_GROUP_PROTOCOL (protocol type
not "consumer", or no protocol every classic member supports), GROUP_MAX_SIZE_REACHED.
"""

from __future__ import annotations

import logging
import uuid

from kio.schema.errors import ErrorCode

from ..errors import (
    FencedInstanceId,
    GroupMaxSizeReached,
    IllegalGeneration,
    InconsistentGroupProtocol,
    KafkaApiError,
    RebalanceInProgress,
    UnknownMemberId,
)
from ..protocol.consumer_protocol import encode_assignment, parse_subscription, protocol_version
from .consumer_group import ClassicProtocol, ConsumerGroup, ConsumerGroups, ConsumerMember, MemberState
from .group import JoinResult
from .membership import JoinRequest

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"


def supports(group: ConsumerGroup, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and a protocol
    every classic member of the group supports (any, when there is none)."""
    if protocol_type != PROTOCOL_TYPE or not protocols:
        return False
    names = {name for name, _ in protocols}
    for member in group.members.values():
        if member.classic is not None:
            names &= {name for name, _ in member.classic.protocols}
    return bool(names)


class ClassicMembers:
    """The classic-protocol half of `ConsumerGroups`, kept in its own module: it drives the same
    members, epochs, reconciliation and timers through that object's own steps."""

    def __init__(self, groups: ConsumerGroups) -> None:
        self.groups = groups

    # ================================================================ JoinGroup

    def join(self, group: ConsumerGroup, request: JoinRequest) -> JoinResult:
        try:
            return self._join(group, request)
        except KafkaApiError as exc:
            log.debug("consumer group %s: classic join of %s refused: %s", group.group_id, request.member_id,
                      exc.code.name)
            return JoinResult(exc.code, request.member_id)

    def _join(self, group: ConsumerGroup, request: JoinRequest) -> JoinResult:
        member_id = request.member_id or str(uuid.uuid4())
        if member_id not in group.members and request.group_instance_id not in group.static_members and (
                len(group.members) >= self.groups.config.max_size):
            raise GroupMaxSizeReached
        if not supports(group, request.protocol_type, request.protocols):
            raise InconsistentGroupProtocol
        if not request.member_id and request.group_instance_id is None and request.require_known_member_id:
            return JoinResult(ErrorCode.member_id_required, member_id)
        try:
            subscription = parse_subscription(request.protocols[0][1])
        except ValueError:
            raise InconsistentGroupProtocol from None
        member, added = self._member(group, request, member_id)
        topics = tuple(sorted(set(subscription.topics)))
        changed = added or topics != member.subscribed_topics
        member.subscribed_topics, member.rebalance_timeout_ms = topics, request.rebalance_timeout_ms
        member.rack_id = subscription.rack_id or member.rack_id
        member.client_id, member.client_host = request.client_id, request.client_host
        member.classic = ClassicProtocol(request.session_timeout_ms, tuple(request.protocols))
        changed = self.groups._resolve_regexes(group) or changed
        if changed or self.groups._partition_counts(group) != group.partition_counts:
            self.groups._bump(group)
        owned = {t: p for t, p in subscription.owned.items() if self.groups.partition_count(t)}
        self.groups._reconcile(group, member, owned)
        self.groups._reset_session(group, member)
        self._deadline(group, member, "did not sync within its rebalance timeout", replace=True)
        return JoinResult(ErrorCode.none, member.member_id, member.member_epoch, PROTOCOL_TYPE,
                          member.classic.protocol_name)

    def _member(self, group: ConsumerGroup, request: JoinRequest, member_id: str) -> tuple[ConsumerMember, bool]:
        """The joining member, and whether it is new. A static member joining with no member id
        takes its instance's place (and assignment), whichever protocol the one it replaces
        speaks; with another's id it is fenced (Kafka's getOrMaybeSubscribeStaticConsumerGroupMember)."""
        if request.group_instance_id is not None and request.group_instance_id in group.static_members:
            current = group.members[group.static_members[request.group_instance_id]]
            if request.member_id and request.member_id != current.member_id:
                raise FencedInstanceId
            if current.member_id != member_id:  # Kafka copies it under the new id, at epoch 0
                del group.members[current.member_id]
                group.target[member_id] = group.target.pop(current.member_id, {})
                current.member_id, current.member_epoch, current.previous_member_epoch = member_id, 0, 0
                group.members[member_id] = current
                group.static_members[request.group_instance_id] = member_id
            return current, False
        member = group.members.get(member_id)
        if member is not None:
            if member.classic is None:
                raise UnknownMemberId
            return member, False
        member = ConsumerMember(member_id, request.group_instance_id, None, request.client_id, request.client_host,
                                request.rebalance_timeout_ms)
        group.members[member_id] = member
        if request.group_instance_id is not None:
            group.static_members[request.group_instance_id] = member_id
        return member, True

    # ================================================================ SyncGroup, Heartbeat, LeaveGroup

    def sync(self, group: ConsumerGroup, generation: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> bytes:
        """The member's assignment, encoded for its protocol version."""
        member = self._classic_member(group, member_id, instance_id, generation)
        assert member.classic is not None
        if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != member.classic.protocol_name):
            raise InconsistentGroupProtocol
        if self._must_rejoin_now(group, member):
            raise RebalanceInProgress
        self._cancel_deadline(member)
        self.groups._reset_session(group, member)
        version = protocol_version(member.classic.protocols[0][1])
        return encode_assignment(member.assigned, version)

    def heartbeat(self, group: ConsumerGroup, generation: int, member_id: str, instance_id: str | None) -> None:
        member = self._classic_member(group, member_id, instance_id, generation)
        self.groups._reset_session(group, member)
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(group, member))):
            self._deadline(group, member, "did not rejoin within its rebalance timeout", replace=False)
            raise RebalanceInProgress

    def leave(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> None:
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                raise UnknownMemberId
            if member_id and member_id != current:
                raise FencedInstanceId
            member_id = current
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            raise UnknownMemberId
        self.groups._remove(group, member)

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                        generation: int) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember, then the member must be classic and at this generation."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                raise UnknownMemberId
            if current != member_id:
                raise FencedInstanceId
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            raise UnknownMemberId
        if generation != member.member_epoch:
            raise IllegalGeneration
        return member

    def _must_rejoin_now(self, group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Kafka's throwIfRebalanceInProgress: the group moved on, and the member is not revoking."""
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._deadline(group, member, "did not rejoin within its rebalance timeout", replace=False)
            return True
        return False

    # ================================================================ deadlines

    def _deadline(self, group: ConsumerGroup, member: ConsumerMember, why: str, replace: bool) -> None:
        """Remove the member unless it joins (or syncs) within its rebalance timeout; a join
        deadline already running is kept (`replace` False), a sync deadline replaces it."""
        if member.classic_timer is not None:
            if not replace:
                return
            member.classic_timer.cancel()
        member.classic_timer = self.groups.clock.call_later(
            member.rebalance_timeout_ms, self.groups._expire, group.group_id, member.member_id, member, "classic_timer",
            why)

    @staticmethod
    def _cancel_deadline(member: ConsumerMember) -> None:
        if member.classic_timer is not None:
            member.classic_timer.cancel()
            member.classic_timer = None


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Does a partition of the member's target that it does not hold yet still have another owner?"""
    target = group.target.get(member.member_id, {})
    return any(group.owner_of(topic, partition, member.member_id) is not None
               for topic, partitions in target.items()
               for partition in partitions - member.assigned.get(topic, frozenset()))
