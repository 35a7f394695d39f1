"""Online migration between a classic group and a consumer group (KIP-848), as Kafka 4.1's
GroupMetadataManager (convertToConsumerGroup / convertToClassicGroup).

- Upgrade: the first ConsumerGroupHeartbeat to a classic group with members converts it when
  `group.consumer.migration.policy` allows upgrades, the group uses the "consumer" protocol type,
  every member's subscription and assignment parse, and it has no more members than
  `group.consumer.max.size` (else GROUP_ID_NOT_FOUND, as before). Its members become classic
  members of the consumer group at epoch = the classic generation, each holding (and targeted
  to) the partitions the classic assignment gave it; the joining member then bumps the group
  epoch, and the classic members rejoin and reconcile (`classic_members.py`).
- Downgrade: when the last consumer-protocol member leaves or is fenced, the policy allows
  downgrades, classic members remain and they fit `group.max.size`, the group becomes a classic
  group again at generation = the group epoch, each member holding its target assignment, and a
  rebalance starts (its members see REBALANCE_IN_PROGRESS and rejoin).
Empty groups need no conversion: an empty group of either type gives its id to the other
(`group_types.py`), whatever the policy. Committed offsets stay where they are (the `ClassicGroup`
of the id holds them in both cases).
"""

from __future__ import annotations

from enum import Enum

from ..protocol.consumer_protocol import encode_assignment, parse_assignment, parse_subscription, protocol_version
from .consumer_group import ClassicProtocol, ConsumerGroup, ConsumerMember
from .group import ClassicGroup, GroupState, Member

PROTOCOL_TYPE = "consumer"


class MigrationPolicy(Enum):
    """group.consumer.migration.policy (Kafka's ConsumerGroupMigrationPolicy)."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    @classmethod
    def parse(cls, name: str) -> MigrationPolicy:
        return cls(name.strip().lower())

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


def consumer_group_from(classic: ClassicGroup, max_size: int) -> ConsumerGroup | None:
    """The consumer group a classic group with members becomes (Kafka's
    ConsumerGroup.fromClassicGroup), or None when it may not be converted."""
    if classic.protocol_type != PROTOCOL_TYPE or classic.protocol_name is None or len(classic.members) > max_size:
        return None
    group = ConsumerGroup(classic.group_id, group_epoch=classic.generation, assignment_epoch=classic.generation)
    for old in classic.members.values():
        try:
            subscription = parse_subscription(old.metadata_for(classic.protocol_name))
            assigned = parse_assignment(old.assignment)
        except ValueError:
            return None
        member = ConsumerMember(
            old.member_id, old.group_instance_id, subscription.rack_id, old.client_id, old.client_host,
            old.rebalance_timeout_ms, subscribed_topics=tuple(sorted(set(subscription.topics))),
            member_epoch=classic.generation, previous_member_epoch=classic.generation,
            assigned={t: p for t, p in assigned.items() if p},
            classic=ClassicProtocol(old.session_timeout_ms, tuple(old.protocols)))
        group.members[member.member_id] = member
        group.target[member.member_id] = dict(member.assigned)
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
    return group


def may_downgrade(group: ConsumerGroup, leaving: ConsumerMember, max_size: int) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMember (the policy aside): every other member is
    classic, there is one, and they fit a classic group."""
    others = [m for m in group.members.values() if m is not leaving]
    return bool(others) and all(m.classic is not None for m in others) and len(others) <= max_size


def fill_classic_group(classic: ClassicGroup, group: ConsumerGroup, leaving: ConsumerMember, now_ms: int) -> None:
    """Make `classic` (Empty, the holder of the offsets) the group the consumer group's classic
    members go on in (Kafka's ClassicGroup.fromConsumerGroup): Stable at generation = the group
    epoch, each member with its target assignment, before the rebalance the caller starts."""
    classic.generation = group.group_epoch
    classic.protocol_type = PROTOCOL_TYPE
    classic.leader_id = None
    for member in group.members.values():
        if member is leaving or member.classic is None:
            continue
        classic.add(Member(member.member_id, member.instance_id, member.client_id, member.client_host,
                           member.rebalance_timeout_ms, member.classic.session_timeout_ms, PROTOCOL_TYPE,
                           list(member.classic.protocols)))
    classic.protocol_name = classic.select_protocol()
    for member in classic.members.values():
        target = group.target.get(member.member_id, {})
        member.assignment = encode_assignment(target, protocol_version(member.metadata_for(classic.protocol_name)))
    classic.transition(GroupState.STABLE, now_ms)
