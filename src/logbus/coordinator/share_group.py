"""Share groups (KIP-932): their membership, a sans-I/O state machine on the group coordinator.

A share group's members subscribe to topics by name; the coordinator assigns with Kafka's
SimpleAssignor (`simple_assignor`): a partition may go to several members (records, not
partitions, are what the members share: the partition leaders hand each record to one member at
a time), each member gets at least one partition when there are any, and every partition gets a
member. There is no revocation: a heartbeat that finds a new group epoch (a member joined or
left, a subscription or a partition count changed) moves the member to it with its new
assignment at once. Members expire after the group's `share.session.timeout.ms` without a
heartbeat. The records a member holds are not released here: the end of its share session on
each partition leader releases them, as in Kafka (a client leaves the group before it sends its
last acknowledgements: librdkafka's close does). Group states: Empty, Stable (Kafka's names; a
share group never waits for a reconciliation).

Time and timers come from a `Clock`; refusals are `KafkaApiError`s with Kafka's error codes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from kio.schema.errors import ErrorCode

from ..errors import KafkaApiError
from .assignors import Assignment
from .clock import Clock, Timer
from .consumer_group import LEAVE_EPOCH, HeartbeatResult
from .records import java_string_hash

log = logging.getLogger(__name__)

ASSIGNOR = "simple"


class ShareGroupState(Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class ShareHeartbeat:
    """A ShareGroupHeartbeat (subscribed topics None: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topics: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """A share group's timing: its group configs, else the broker's defaults."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000


@dataclass(slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...] = ()
    member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    session_timer: Timer | None = None

    def cancel_timer(self) -> None:
        if self.session_timer is not None:
            self.session_timer.cancel()
            self.session_timer = None


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)  # in the order they joined
    partition_counts: dict[str, int] = field(default_factory=dict)  # of the subscribed topics
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> assignment at the group epoch
    dead: bool = False
    topics_seen: set[str] = field(default_factory=set)  # every topic subscribed to: whose share state it may have

    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    @property
    def assignment_epoch(self) -> int:
        return self.group_epoch  # the assignment is computed with the epoch

    def subscribed_topics(self) -> set[str]:
        return {topic for member in self.members.values() for topic in member.subscribed_topics}


class ShareGroups:
    """Every share group of this coordinator and the heartbeat that drives them."""

    def __init__(self, clock: Clock, partition_count: Callable[[str], int | None],
                 settings: Callable[[str], ShareGroupSettings] = lambda _group_id: ShareGroupSettings(),
                 max_size: int = 200,
                 held_by_other_type: Callable[[str], bool] = lambda _group_id: False) -> None:
        self.clock = clock
        self.partition_count = partition_count
        self.settings = settings
        self.max_size = max_size
        self.held_by_other_type = held_by_other_type  # a classic or consumer group holds this id
        self.groups: dict[str, ShareGroup] = {}
        self.rebalances = 0  # group epoch bumps since start (Kafka's share-group-rebalance-count)

    # ================================================================ heartbeat

    def validate(self, request: ShareHeartbeat) -> None:
        """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""
        def invalid(message: str) -> KafkaApiError:
            return KafkaApiError(ErrorCode.invalid_request, message)
        if not request.group_id:
            raise invalid("GroupId can't be empty.")
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
        if request.member_epoch == 0 and not request.subscribed_topics:
            raise invalid("SubscribedTopicNames must be set in first request.")
        if request.member_epoch < LEAVE_EPOCH:
            raise invalid(f"MemberEpoch {request.member_epoch} is invalid.")

    def heartbeat(self, request: ShareHeartbeat) -> HeartbeatResult:
        self.validate(request)
        settings = self.settings(request.group_id)
        if request.member_epoch == LEAVE_EPOCH:
            self._leave(request)
            return HeartbeatResult(request.member_id, LEAVE_EPOCH, settings.heartbeat_interval_ms)
        group = self._group_for(request)
        member, joined = self._member_for(group, request)
        before = dict(member.assigned)
        changed = joined
        if request.subscribed_topics is not None:
            topics = tuple(sorted(set(request.subscribed_topics)))
            changed |= topics != member.subscribed_topics
            member.subscribed_topics = topics
            group.topics_seen.update(topics)
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if changed or self._partition_counts(group) != group.partition_counts:
            self._bump(group)
        member.member_epoch = group.group_epoch
        member.assigned = group.target.get(member.member_id, {})
        self._reset_session(group, member, settings)
        sent = joined or member.assigned != before
        return HeartbeatResult(member.member_id, member.member_epoch, settings.heartbeat_interval_ms,
                               dict(member.assigned) if sent else None)

    def _group_for(self, request: ShareHeartbeat) -> ShareGroup:
        group = self.groups.get(request.group_id)
        if group is not None and not group.dead:
            return group
        if self.held_by_other_type(request.group_id):
            raise KafkaApiError(ErrorCode.group_id_not_found, f"Group {request.group_id} is not a share group.")
        if request.member_epoch != 0:
            raise KafkaApiError(ErrorCode.unknown_member_id, f"Share group {request.group_id} not found.")
        group = ShareGroup(request.group_id)
        self.groups[request.group_id] = group
        return group

    def _member_for(self, group: ShareGroup, request: ShareHeartbeat) -> tuple[ShareMember, bool]:
        """The member the heartbeat is from, and whether it (re)joins now."""
        member = group.members.get(request.member_id)
        if request.member_epoch == 0:
            if member is not None:  # rejoining after a fence
                member.member_epoch = 0
                return member, True
            if len(group.members) >= self.max_size:
                raise KafkaApiError(ErrorCode.group_max_size_reached,
                                    f"The share group has reached its maximum capacity of {self.max_size} members.")
            member = ShareMember(request.member_id, request.rack_id, request.client_id, request.client_host)
            group.members[member.member_id] = member
            return member, True
        if member is None:
            raise KafkaApiError(ErrorCode.unknown_member_id,
                                f"Member {request.member_id} is not a member of group {group.group_id}.")
        if request.member_epoch != member.member_epoch:
            raise KafkaApiError(ErrorCode.fenced_member_epoch,
                                f"The share group member has a member epoch {request.member_epoch} where "
                                f"{member.member_epoch} is expected.")
        return member, False

    def _partition_counts(self, group: ShareGroup) -> dict[str, int]:
        return {topic: count for topic in sorted(group.subscribed_topics())
                if (count := self.partition_count(topic))}

    def _bump(self, group: ShareGroup) -> None:
        """A new group epoch and at once its assignment."""
        group.partition_counts = self._partition_counts(group)
        group.group_epoch += 1
        self.rebalances += 1
        subscriptions = {m.member_id: m.subscribed_topics for m in group.members.values()}
        group.target = simple_assignor(subscriptions, group.partition_counts, group.target)

    # ================================================================ leaving and expiry

    def _leave(self, request: ShareHeartbeat) -> None:
        group = self.groups.get(request.group_id)
        member = None if group is None or group.dead else group.members.get(request.member_id)
        if group is None or member is None:
            raise KafkaApiError(ErrorCode.unknown_member_id,
                                f"Member {request.member_id} is not a member of group {request.group_id}.")
        self._remove(group, member)

    def _reset_session(self, group: ShareGroup, member: ShareMember, settings: ShareGroupSettings) -> None:
        member.cancel_timer()
        member.session_timer = self.clock.call_later(settings.session_timeout_ms, self._expire, group.group_id,
                                                     member)

    def _expire(self, group_id: str, member: ShareMember) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.members.get(member.member_id) is member:
            log.info("share group %s: member %s fenced at epoch %d: it sent no heartbeat within the session "
                     "timeout", group_id, member.member_id, member.member_epoch)
            self._remove(group, member)

    def _remove(self, group: ShareGroup, member: ShareMember) -> None:
        member.cancel_timer()
        del group.members[member.member_id]
        self._bump(group)

    # ================================================================ admin

    def active(self, group_id: str) -> ShareGroup | None:
        """The share group that holds this id (one with members), if any."""
        group = self.get(group_id)
        return group if group is not None and group.members else None

    def get(self, group_id: str) -> ShareGroup | None:
        group = self.groups.get(group_id)
        return None if group is None or group.dead else group

    def delete(self, group_id: str) -> None:
        """An empty group is deleted (DeleteGroups, or its id taken by a group of another type)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.dead = True

    def unload(self, unloaded: Callable[[str], bool]) -> None:
        """The groups whose ids `unloaded` picks leave this coordinator (its partition moved away)."""
        for group_id in [g for g in self.groups if unloaded(g)]:
            group = self.groups.pop(group_id)
            group.dead = True
            for member in group.members.values():
                member.cancel_timer()

    def stop(self) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                member.cancel_timer()

    def all_groups(self) -> Iterable[ShareGroup]:
        return [group for group in self.groups.values() if not group.dead]


TopicPartition = tuple[str, int]


def simple_assignor(subscriptions: Mapping[str, tuple[str, ...]], partition_counts: Mapping[str, int],
                    current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's SimpleAssignor (KIP-932): member id -> assignment, members in `subscriptions`' order.

    1. Each member gets the partition its id hashes to (Java's String.hashCode, modulo the
       partitions it subscribes to, topics by name, partitions in order).
    2. The partitions no member got in step 1 and no member still in the group holds in `current`
       go round robin to the members subscribed to their topic.
    3. Each member keeps what it holds in `current` of the topics it still subscribes to.
    With the same subscription for all (Kafka's homogeneous case) step 2 runs over all partitions
    at once; otherwise topic by topic over that topic's members, as Kafka does."""
    targets = {member: [(topic, index) for topic in sorted(topics) for index in range(partition_counts.get(topic, 0))]
               for member, topics in subscriptions.items()}
    new: dict[TopicPartition, list[str]] = {}
    for member, partitions in targets.items():  # 1: hashed
        if partitions:
            new.setdefault(partitions[abs(java_string_hash(member)) % len(partitions)], []).append(member)
    held = {(topic, index) for member, assignment in current.items() if member in subscriptions
            for topic, indexes in assignment.items() for index in indexes}
    homogeneous = len({frozenset(topics) for topics in subscriptions.values()}) == 1
    groups = [(list(subscriptions), next(iter(targets.values()), []))] if homogeneous else [
        ([m for m, topics in subscriptions.items() if topic in topics],
         [(topic, index) for index in range(partition_counts.get(topic, 0))])
        for topic in sorted({t for topics in subscriptions.values() for t in topics})]
    for members, partitions in groups:  # 2: round robin
        unassigned = [p for p in partitions if p not in new and p not in held]
        for position, partition in enumerate(unassigned):
            new.setdefault(partition, []).append(members[position % len(members)])
    result: dict[str, dict[str, set[int]]] = {member: {} for member in subscriptions}
    for member, assignment in current.items():  # 3: sticky
        for topic, indexes in assignment.items():
            if member in subscriptions and topic in subscriptions[member]:
                live = {i for i in indexes if i < partition_counts.get(topic, 0)}
                result[member].setdefault(topic, set()).update(live)
    for (topic, index), members in new.items():
        for member in members:
            result[member].setdefault(topic, set()).add(index)
    return {member: {t: frozenset(p) for t, p in topics.items() if p} for member, topics in result.items()}
