"""Consumer groups of the next-generation protocol (KIP-848): a sans-I/O state machine.

The broker, not a member, computes the assignment. Each group has a *group epoch*, bumped when
what the assignment depends on changes (a member joins or leaves, a subscription or a subscribed
topic's partition count changes); the target assignment is then recomputed at once by the
group's server-side assignor (`assignors.py`), so the *assignment epoch* equals the group epoch.

Each member has a *member epoch* and reconciles towards its target incrementally, as Kafka's
CurrentAssignmentBuilder does:
- it keeps the partitions it owns that stay in its target (never losing one it keeps);
- partitions it owns that leave its target are revoked first: the member stays at its epoch in
  state `unrevoked_partitions` until a heartbeat's owned partitions show none of them (within its
  rebalance timeout, or it is removed);
- a new partition is given only once no other member holds it (assigned or being revoked); until
  then the member is at the target epoch in state `unreleased_partitions`;
- otherwise it is `stable` at the target epoch.

A member subscribes to topic names and/or a regular expression (`subscribed_regex`, matched
whole against the names of the non-internal topics, as Kafka's Pattern.matches, with RE2 (linear
time, so no regex a client sends can stall the broker; Kafka uses RE2/J); resolved again at every
heartbeat, so a new matching topic bumps the group epoch). A member leaves with epoch -1; a
static member (group.instance.id) leaves temporarily with -2: its assignment is kept for the next
member with that instance id, until its session expires.
Members expire after the session timeout without a heartbeat. Group states: Empty, Assigning
(never observed here: the target is computed at once), Reconciling, Stable (Kafka's names).

Time and timers come from a `Clock`; topic partition counts from a callable; refusals are
`KafkaApiError`s with Kafka's error codes.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

import re2
from kio.schema.errors import ErrorCode

from ..errors import IllegalGeneration, KafkaApiError, StaleMemberEpoch, UnknownMemberId
from .assignors import ASSIGNORS, Assignment
from .clock import Clock, Timer

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat with topics by name (None: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topics: tuple[str, ...] | None = None
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None = None  # None: unchanged, not sent


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    """What a member of the classic protocol inside a consumer group joined with (Kafka's
    ClassicMemberMetadata): its session timeout and its JoinGroup protocols, first preferred."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0]


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topics: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    regex_topics: tuple[str, ...] = ()  # the topics the regex matches now
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    session_timer: Timer | None = None
    revocation_timer: Timer | None = None
    classic: ClassicProtocol | None = None  # a classic-protocol member (JoinGroup/SyncGroup/Heartbeat)
    classic_timer: Timer | None = None  # a classic member's join or sync deadline (`classic_members.py`)

    @property
    def topics(self) -> frozenset[str]:
        """Every topic the member subscribes to: by name and through its regex."""
        return frozenset(self.subscribed_topics) | frozenset(self.regex_topics)

    def cancel_timers(self) -> None:
        for timer in (self.session_timer, self.revocation_timer, self.classic_timer):
            if timer is not None:
                timer.cancel()
        self.session_timer = self.revocation_timer = self.classic_timer = None


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target assignment
    partition_counts: dict[str, int] = field(default_factory=dict)  # of the subscribed topics
    assignor: str = "uniform"
    dead: bool = False

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        return {topic for member in self.members.values() for topic in member.topics}

    def owner_of(self, topic: str, partition: int, other_than: str) -> str | None:
        """The member other than `other_than` that holds this partition (assigned or revoking)."""
        for member in self.members.values():
            if member.member_id != other_than and (
                    partition in member.assigned.get(topic, ()) or partition in member.revoking.get(topic, ())):
                return member.member_id
        return None


@dataclass(frozen=True, slots=True)
class GroupTimeouts:
    """The session timeout and heartbeat interval of one consumer group."""

    session_timeout_ms: int
    heartbeat_interval_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    assignors: tuple[str, ...] = ("uniform", "range")
    max_size: int = 2**31 - 1
    session_timeout_bounds: tuple[int, int] = (45_000, 60_000)
    heartbeat_interval_bounds: tuple[int, int] = (5_000, 15_000)

    def timeouts(self, overrides: Mapping[str, str]) -> GroupTimeouts:
        """A group's timeouts: its own `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`
        (GROUP configs, KIP-848), else the broker's defaults. IncrementalAlterConfigs keeps them within
        the broker's group.consumer.min/max bounds (Kafka's GroupConfig.validate); they are clamped
        here too, so bounds narrowed after the alter still hold."""
        return GroupTimeouts(
            _bounded(overrides.get("consumer.session.timeout.ms"), self.session_timeout_ms,
                     self.session_timeout_bounds),
            _bounded(overrides.get("consumer.heartbeat.interval.ms"), self.heartbeat_interval_ms,
                     self.heartbeat_interval_bounds))


def _bounded(text: str | None, default: int, bounds: tuple[int, int]) -> int:
    try:
        value = default if text is None else int(text)
    except ValueError:
        value = default
    return min(max(value, bounds[0]), bounds[1])


class ConsumerGroups:
    """Every consumer group of this coordinator and the heartbeat that drives them."""

    def __init__(self, clock: Clock, config: ConsumerGroupConfig,
                 partition_count: Callable[[str], int | None],
                 is_classic_group: Callable[[str], bool] = lambda _group_id: False,
                 topic_names: Callable[[], Iterable[str]] = tuple,
                 group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {}) -> None:
        self.clock = clock
        self.config = config
        self.partition_count = partition_count
        self.is_classic_group = is_classic_group  # a non-empty classic group holds this id
        self.topic_names = topic_names  # the non-internal topics, for regex subscriptions
        self.group_configs = group_configs  # a group's own configs (GROUP resource), read at each heartbeat
        # called before a member is removed; True when it converted the group to a classic group
        # (the last consumer-protocol member left: `migration.py`)
        self.downgrade: Callable[[ConsumerGroup, ConsumerMember], bool] = lambda _group, _member: False
        self.groups: dict[str, ConsumerGroup] = {}
        # how a timer's change of a group runs: at once here; the coordinator writes it first
        self.run_change: Callable[[str, Callable[[], None]], None] = lambda _group_id, change: change()

    # ================================================================ heartbeat

    def heartbeat(self, request: Heartbeat) -> HeartbeatResult:
        try:
            return self._heartbeat(request)
        except KafkaApiError as exc:
            _log_refused(request, exc)
            raise

    def _heartbeat(self, request: Heartbeat) -> HeartbeatResult:
        self._validate(request)
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(request)
        group = self._group_for(request)
        members_before = len(group.members)
        member, full = self._member_for(group, request)
        member.classic = None  # it speaks the consumer protocol now
        added = len(group.members) > members_before  # a static member's replacement is not new
        before = dict(member.assigned)
        changed = self._update_subscription(member, request)
        changed = self._resolve_regexes(group) or changed or added
        # a subscribed topic created, deleted or grown changes the target too
        if changed or self._partition_counts(group) != group.partition_counts:
            self._bump(group)
        self._reconcile(group, member, request.owned)
        self._reset_session(group, member)
        sent = full or member.assigned != before  # Kafka sends it on a full request or a change
        interval = self.timeouts(group.group_id).heartbeat_interval_ms
        return HeartbeatResult(member.member_id, member.member_epoch, interval, dict(member.assigned) if sent else None)

    def timeouts(self, group_id: str) -> GroupTimeouts:
        """The group's session timeout and heartbeat interval now (a changed group config counts
        from the next heartbeat)."""
        overrides = self.group_configs(group_id)
        if not overrides:
            return GroupTimeouts(self.config.session_timeout_ms, self.config.heartbeat_interval_ms)
        return self.config.timeouts(overrides)

    def validate(self, request: Heartbeat) -> None:
        try:
            self._validate(request)
        except KafkaApiError as exc:
            _log_refused(request, exc)
            raise

    def _validate(self, request: Heartbeat) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        def invalid(message: str) -> KafkaApiError:
            return KafkaApiError(ErrorCode.invalid_request, message)
        if not request.group_id:
            raise invalid("GroupId can't be empty.")
        if request.instance_id is not None and not request.instance_id:
            raise invalid("InstanceId can't be empty.")
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
        if request.member_epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or any(request.owned.values()):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topics is None and request.subscribed_regex is None:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif request.member_epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
            raise invalid("InstanceId can't be null.")
        elif request.member_epoch < STATIC_LEAVE_EPOCH:
            raise invalid(f"MemberEpoch {request.member_epoch} is invalid.")
        if request.subscribed_regex:  # an empty one (librdkafka sends it) is no regex
            try:
                _compiled(request.subscribed_regex)
            except re2.error as exc:
                raise KafkaApiError(ErrorCode.invalid_regular_expression,
                                    f"SubscribedTopicRegex `{request.subscribed_regex}` is not a valid regular "
                                    f"expression: {exc}.") from None
        if request.server_assignor is not None and request.server_assignor not in self.config.assignors:
            raise KafkaApiError(ErrorCode.unsupported_assignor,
                                f"ServerAssignor {request.server_assignor} is not supported. Supported "
                                f"assignors: {', '.join(self.config.assignors)}.")

    def _group_for(self, request: Heartbeat) -> ConsumerGroup:
        group = self.groups.get(request.group_id)
        if group is not None and not group.dead:
            return group
        if self.is_classic_group(request.group_id):
            raise KafkaApiError(ErrorCode.group_id_not_found, f"Group {request.group_id} is not a consumer group.")
        if request.member_epoch != 0:
            raise KafkaApiError(ErrorCode.unknown_member_id, f"Consumer group {request.group_id} not found.")
        group = ConsumerGroup(request.group_id, assignor=self.config.assignors[0])
        self.groups[request.group_id] = group
        return group

    def _member_for(self, group: ConsumerGroup, request: Heartbeat) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is from (created on a join), and whether it is a full request."""
        if request.member_epoch == 0:
            return self._join(group, request), True
        member = group.members.get(request.member_id)
        if member is None:
            raise KafkaApiError(ErrorCode.unknown_member_id,
                                f"Member {request.member_id} is not a member of group {group.group_id}.")
        if request.instance_id is not None and group.static_members.get(request.instance_id) != member.member_id:
            raise KafkaApiError(ErrorCode.fenced_instance_id,
                                f"Static member {request.instance_id} was replaced by another member.")
        _check_epoch(member, request.member_epoch, request.owned)
        full = (request.rebalance_timeout_ms != -1 and request.subscribed_topics is not None
                and request.owned is not None)
        return member, full

    def _join(self, group: ConsumerGroup, request: Heartbeat) -> ConsumerMember:
        if request.instance_id is not None:
            return self._join_static(group, request)
        member = group.members.get(request.member_id)
        if member is not None:  # rejoining (after a fence): it let go of everything it owned
            member.assigned, member.revoking, member.member_epoch = {}, {}, 0
            member.state = MemberState.STABLE
            return member
        return self._add_member(group, request)

    def _join_static(self, group: ConsumerGroup, request: Heartbeat) -> ConsumerMember:
        """A static member joins, or takes the place (and assignment) of its instance's member that
        left temporarily (epoch -2); while that one is still in, UNRELEASED_INSTANCE_ID."""
        assert request.instance_id is not None
        previous_id = group.static_members.get(request.instance_id)
        if previous_id is None or previous_id not in group.members:
            return self._add_member(group, request)
        previous = group.members[previous_id]
        if previous.member_epoch != STATIC_LEAVE_EPOCH:
            raise KafkaApiError(ErrorCode.unreleased_instance_id,
                                f"Static member {request.instance_id} is in use by member {previous_id}.")
        previous.cancel_timers()
        del group.members[previous_id]
        member = self._new_member(request)
        member.assigned, member.subscribed_topics = previous.assigned, previous.subscribed_topics
        member.subscribed_regex, member.regex_topics = previous.subscribed_regex, previous.regex_topics
        member.server_assignor = previous.server_assignor
        member.member_epoch = previous.previous_member_epoch
        member.previous_member_epoch = previous.previous_member_epoch
        group.members[member.member_id] = member
        group.static_members[request.instance_id] = member.member_id
        group.target[member.member_id] = group.target.pop(previous_id, {})
        return member

    def _add_member(self, group: ConsumerGroup, request: Heartbeat) -> ConsumerMember:
        if len(group.members) >= self.config.max_size:
            raise KafkaApiError(ErrorCode.group_max_size_reached,
                                f"The consumer group has reached its maximum capacity of "
                                f"{self.config.max_size} members.")
        member = self._new_member(request)
        group.members[member.member_id] = member
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
        return member

    def _new_member(self, request: Heartbeat) -> ConsumerMember:
        return ConsumerMember(request.member_id, request.instance_id, request.rack_id, request.client_id,
                              request.client_host, request.rebalance_timeout_ms)

    @staticmethod
    def _update_subscription(member: ConsumerMember, request: Heartbeat) -> bool:
        """Take the heartbeat's changes; whether the subscription (or assignor) changed."""
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        changed = False
        if request.subscribed_topics is not None:
            topics = tuple(sorted(set(request.subscribed_topics)))
            changed = topics != member.subscribed_topics
            member.subscribed_topics = topics
        if request.subscribed_regex is not None and (request.subscribed_regex or None) != member.subscribed_regex:
            member.subscribed_regex = request.subscribed_regex or None
            changed = True
        if request.server_assignor is not None and request.server_assignor != member.server_assignor:
            member.server_assignor = request.server_assignor
            changed = True
        return changed

    def _resolve_regexes(self, group: ConsumerGroup) -> bool:
        """Match the members' regexes against the topics now; whether any member's topics changed."""
        patterns = {m.subscribed_regex for m in group.members.values() if m.subscribed_regex}
        if not patterns and not any(m.regex_topics for m in group.members.values()):
            return False
        names = sorted(self.topic_names())
        matches = {p: tuple(n for n in names if _compiled(p).fullmatch(n)) for p in patterns}
        changed = False
        for member in group.members.values():
            topics = matches[member.subscribed_regex] if member.subscribed_regex else ()
            if topics != member.regex_topics:
                member.regex_topics = topics
                changed = True
        return changed

    def _partition_counts(self, group: ConsumerGroup) -> dict[str, int]:
        return {topic: count for topic in sorted(group.subscribed_topics())
                if (count := self.partition_count(topic))}

    def _bump(self, group: ConsumerGroup) -> None:
        """A new group epoch and at once its target assignment (so assignment epoch = group epoch)."""
        group.partition_counts = self._partition_counts(group)
        group.group_epoch += 1
        group.assignor = self._group_assignor(group)
        subscriptions = {m.member_id: m.topics for m in group.members.values()}
        group.target = ASSIGNORS[group.assignor](subscriptions, group.partition_counts, group.target)
        group.assignment_epoch = group.group_epoch

    def _group_assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for (Kafka's ConsumerGroup.computePreferredServerAssignor),
        else the first of group.consumer.assignors."""
        votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        if not votes:
            return self.config.assignors[0]
        return max(sorted(votes), key=lambda name: votes[name])

    # ================================================================ reconciliation

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None) -> None:
        """Kafka's CurrentAssignmentBuilder: move the member one step towards its target."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or _overlaps(owned, member.revoking):
                return  # still owns partitions it must give up
            member.revoking = {}
            self._cancel_revocation_timer(member)
        elif member.member_epoch == group.assignment_epoch and member.state is MemberState.STABLE:
            return
        self._next_assignment(group, member)

    def _next_assignment(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        target = group.target.get(member.member_id, {})
        topics = set(target) | set(member.assigned)
        kept = {t: member.assigned.get(t, frozenset()) & target.get(t, frozenset()) for t in topics}
        revoking = {t: member.assigned.get(t, frozenset()) - target.get(t, frozenset()) for t in topics}
        revoking = {t: p for t, p in revoking.items() if p}
        if revoking:
            member.assigned, member.revoking = _nonempty(kept), revoking
            member.state = MemberState.UNREVOKED_PARTITIONS
            self._start_revocation_timer(group, member)
            _log_reconciled(group, member)
            return
        unreleased = False
        assigned = {t: set(p) for t, p in kept.items()}
        for topic, partitions in target.items():
            for partition in partitions - kept.get(topic, frozenset()):
                if group.owner_of(topic, partition, member.member_id) is None:
                    assigned.setdefault(topic, set()).add(partition)
                else:
                    unreleased = True
        member.assigned = _nonempty({t: frozenset(p) for t, p in assigned.items()})
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
        _log_reconciled(group, member)

    def _start_revocation_timer(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        self._cancel_revocation_timer(member)
        member.revocation_timer = self.clock.call_later(
            member.rebalance_timeout_ms, self._expire, group.group_id, member.member_id, member, "revocation_timer",
            "did not revoke its partitions within its rebalance timeout")

    @staticmethod
    def _cancel_revocation_timer(member: ConsumerMember) -> None:
        if member.revocation_timer is not None:
            member.revocation_timer.cancel()
            member.revocation_timer = None

    # ================================================================ leaving and expiry

    def _leave(self, request: Heartbeat) -> HeartbeatResult:
        group = self.groups.get(request.group_id)
        member = None if group is None or group.dead else group.members.get(request.member_id)
        if group is None or member is None:
            raise KafkaApiError(ErrorCode.unknown_member_id,
                                f"Member {request.member_id} is not a member of group {request.group_id}.")
        if request.instance_id is not None and group.static_members.get(request.instance_id) != member.member_id:
            raise KafkaApiError(ErrorCode.fenced_instance_id,
                                f"Static member {request.instance_id} was replaced by another member.")
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            self._reset_session(group, member)
        else:
            self._remove(group, member)
        return HeartbeatResult(member.member_id, request.member_epoch,
                               self.timeouts(group.group_id).heartbeat_interval_ms)

    def _reset_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout = (member.classic.session_timeout_ms if member.classic is not None
                   else self.timeouts(group.group_id).session_timeout_ms)
        member.session_timer = self.clock.call_later(
            timeout, self._expire, group.group_id, member.member_id, member, "session_timer",
            "sent no heartbeat within the session timeout")

    def _expire(self, group_id: str, member_id: str, member: ConsumerMember, timer_name: str, why: str) -> None:
        """A session or a revocation ran out: the member is removed, through `run_change`."""
        fired = getattr(member, timer_name)
        self.run_change(group_id, functools.partial(self._expire_now, group_id, member_id, member, timer_name,
                                                    fired, why))

    def _expire_now(self, group_id: str, member_id: str, member: ConsumerMember, timer_name: str,
                    fired: Timer | None, why: str) -> None:
        """The member is removed if it is still that member and its timer was not restarted meanwhile
        (a heartbeat while the change waited for the group's previous write)."""
        group = self.groups.get(group_id)
        if group is not None and group.members.get(member_id) is member and getattr(member, timer_name) is fired:
            log.info("consumer group %s: member %s fenced at epoch %d: it %s", group_id, member_id,
                     member.member_epoch, why)
            self._remove(group, member)

    def _remove(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if self.downgrade(group, member):
            return
        log.debug("consumer group %s: member %s removed at epoch %d", group.group_id, member.member_id,
                  member.member_epoch)
        member.cancel_timers()
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        if member.instance_id is not None and group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]
        self._bump(group)

    # ================================================================ offsets and admin

    def check_commit(self, group_id: str, member_id: str, member_epoch: int) -> None:
        """Refuse this member's offset commit at this epoch unless Kafka's
        ConsumerGroup.validateOffsetCommit takes it. A commit with epoch -1 (admin tools,
        `assign()`) is taken by an empty group only."""
        group = self.groups[group_id]
        if member_epoch < 0 and group.is_empty:
            return
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId
        if member_epoch != member.member_epoch:  # a classic member's epoch is its generation
            raise IllegalGeneration if member.classic is not None else StaleMemberEpoch

    def active(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group that holds this id (one with members), if any."""
        group = self.groups.get(group_id)
        return group if group is not None and not group.dead and not group.is_empty else None

    def get(self, group_id: str) -> ConsumerGroup | None:
        group = self.groups.get(group_id)
        return None if group is None or group.dead else group

    def delete(self, group_id: str) -> None:
        """An empty group is deleted (DeleteGroups, or its id taken by a classic group)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.dead = True

    def adopt(self, group: ConsumerGroup) -> None:
        """A group rebuilt from its records (loaded, or restored after a failed write) replaces any of
        its id; its members' sessions, and the rebalance timeouts of pending revocations, start now."""
        previous = self.groups.pop(group.group_id, None)
        if previous is not None:
            previous.dead = True
            for member in previous.members.values():
                member.cancel_timers()
        self.groups[group.group_id] = group
        self._resolve_regexes(group)
        group.assignor = self._group_assignor(group)
        for member in group.members.values():
            self._reset_session(group, member)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._start_revocation_timer(group, member)

    def unload(self, unloaded: Callable[[str], bool]) -> None:
        """The groups whose ids `unloaded` picks leave this coordinator (its partition moved away)."""
        for group_id in [g for g in self.groups if unloaded(g)]:
            group = self.groups.pop(group_id)
            group.dead = True
            for member in group.members.values():
                member.cancel_timers()

    def stop(self) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                member.cancel_timers()

    def all_groups(self) -> Iterable[ConsumerGroup]:
        return [group for group in self.groups.values() if not group.dead]


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re2._Regexp:
    """RE2, quietly (it would log every bad pattern to stderr)."""
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


def _check_epoch(member: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
    """Kafka's throwIfMemberEpochIsInvalid: an epoch ahead is fenced; one behind only if it is the
    previous epoch and the member owns no more than its assignment (the response was lost)."""
    if epoch > member.member_epoch or (epoch < member.member_epoch and (
            epoch != member.previous_member_epoch or owned is None or not _subset(owned, member.assigned))):
        raise KafkaApiError(ErrorCode.fenced_member_epoch,
                            f"The consumer group member has a member epoch ({epoch}) different from the "
                            f"one known by the group coordinator ({member.member_epoch}).")


def _log_refused(request: Heartbeat, error: KafkaApiError) -> None:
    log.debug("consumer group %s: heartbeat of member %s at epoch %d refused: %s %s", request.group_id,
              request.member_id, request.member_epoch, error.code.name, error.message)


def _log_reconciled(group: ConsumerGroup, member: ConsumerMember) -> None:
    """What a member holds after a step of its reconciliation (to trace who owned what when)."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug("consumer group %s epoch %d: member %s at epoch %d %s: assigned %s, revoking %s",
                  group.group_id, group.group_epoch, member.member_id, member.member_epoch, member.state.value,
                  _show(member.assigned), _show(member.revoking))


def _show(assignment: Assignment) -> str:
    return " ".join(f"{topic}{sorted(partitions)}" for topic, partitions in sorted(assignment.items())) or "-"


def _overlaps(a: Assignment, b: Assignment) -> bool:
    return any(a.get(topic, frozenset()) & partitions for topic, partitions in b.items())


def _subset(a: Assignment, b: Assignment) -> bool:
    return all(partitions <= b.get(topic, frozenset()) for topic, partitions in a.items())


def _nonempty(assignment: dict[str, frozenset[int]]) -> Assignment:
    return {topic: partitions for topic, partitions in assignment.items() if partitions}
