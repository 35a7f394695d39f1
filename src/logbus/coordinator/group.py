"""A classic consumer group: its members, generation, state, committed and pending offsets.

States follow Kafka's ClassicGroupState:

    Empty ──join──> PreparingRebalance ──all joined──> CompletingRebalance ──leader syncs──> Stable
      ^                    ^   |                               |                              |
      |                    |   └──everyone left──> Empty       └──join/leave/expiry───────────┤
      └──── last member leaves / expires (via PreparingRebalance) <──────────── join/leave ───┘
    Dead: deleted (DeleteGroups, or emptied with no offsets left); kept only while requests drain.

Offsets a transaction commits (TxnOffsetCommit) stay pending, per producer, until that
producer's COMMIT or ABORT marker lands on the group's __consumer_offsets partition: a COMMIT
makes them committed, an ABORT drops them (Kafka's pendingTransactionalOffsetCommits). Every
offset keeps the log offset of its record, so that of a plain and a transactional commit of one
partition the later record wins, whichever completes first (Kafka's CommitRecordMetadataAndOffset).

This module holds state and the pure rules (protocol selection, which members rejoined, which
offset wins); timers, waiting requests and persistence belong to the coordinator
(`membership.py`, `offsets.py` and `loading.py`).
"""

from __future__ import annotations

import asyncio
import struct
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from .clock import Timer
from .records import GroupValue, MemberValue, OffsetValue


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


TopicPartition = tuple[str, int]  # topic, partition


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """An offset and the base offset of the batch that holds its record in __consumer_offsets."""

    value: OffsetValue
    record_offset: int


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup response carries for one member."""

    error: int
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # for the leader: id, instance id, metadata


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[tuple[int, bytes]] | None = None
    session_timer: Timer | None = None
    is_new: bool = False  # joined during the current rebalance (new-member join timeout applies)

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((metadata for name, metadata in self.protocols if name == protocol), b"")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def to_record(self, protocol: str | None) -> MemberValue:
        return MemberValue(
            self.member_id, self.group_instance_id, self.client_id, self.client_host,
            self.rebalance_timeout_ms, self.session_timeout_ms, self.metadata_for(protocol), self.assignment,
        )


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)  # ids handed out with MEMBER_ID_REQUIRED
    state_timestamp: int = -1  # ms when the state last changed (Kafka's currentStateTimestamp)
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    pending_txn_offsets: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)  # by producer
    join_timer: Timer | None = None
    pending_sync: set[str] = field(default_factory=set)  # joined this generation, no SyncGroup yet
    sync_timer: Timer | None = None  # removes `pending_sync` members after the rebalance timeout
    new_member_added: bool = False  # during the initial delayed join
    in_initial_delay: bool = False  # waiting group.initial.rebalance.delay.ms: no early completion

    # ------------------------------------------------------------ state

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def is_empty(self) -> bool:
        return not self.members

    # ------------------------------------------------------------ members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.pending_sync.discard(member_id)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = self._next_leader()
        return member

    def _next_leader(self) -> str | None:
        """Prefer a member that already rejoined this rebalance (it will get the join response)."""
        rejoined = [m.member_id for m in self.members.values() if m.awaiting_join]
        candidates = rejoined or list(self.members)
        return candidates[0] if candidates else None

    def replace_static_member(self, instance_id: str, new_member_id: str) -> Member:
        """A static member rejoined with a fresh member id: the old id is fenced from now on."""
        old_id = self.static_members[instance_id]
        member = self.members.pop(old_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_member_id)
        if self.leader_id == old_id:
            self.leader_id = new_member_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static member's request with a member id that is no longer its current one."""
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    # ------------------------------------------------------------ protocols

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Can a member with these protocols join? (same type, and a protocol in common)."""
        if not protocols or not protocol_type:
            return False
        if self.is_empty:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & {name for name, _ in protocols})

    def candidate_protocols(self) -> set[str]:
        names = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*names) if names else set()

    def select_protocol(self) -> str | None:
        """The protocol supported by all members that most of them prefer (each votes once)."""
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(name for name, _ in member.protocols if name in candidates)] += 1
        first = next(iter(self.members.values()))
        preference = [name for name, _ in first.protocols if name in candidates]
        return max(preference, key=lambda name: (votes[name], -preference.index(name)))

    # ------------------------------------------------------------ rebalance bookkeeping

    def all_rejoined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), or None if unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    # ------------------------------------------------------------ offsets

    def put_offset(self, key: TopicPartition, offset: CommittedOffset) -> None:
        """Commit `offset` unless the one held comes from a later record."""
        current = self.offsets.get(key)
        if current is None or current.record_offset < offset.record_offset:
            self.offsets[key] = offset

    def add_pending(self, producer_id: int, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Offsets of `producer_id`'s open transaction (a later commit of a partition replaces its earlier one)."""
        self.pending_txn_offsets.setdefault(producer_id, {}).update(offsets)

    def drop_pending(self, producer_id: int, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Forget these pending offsets (their write failed), unless a later commit replaced them."""
        pending = self.pending_txn_offsets.get(producer_id, {})
        for key, offset in offsets.items():
            if pending.get(key) is offset:
                del pending[key]
        if not pending:
            self.pending_txn_offsets.pop(producer_id, None)

    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """`producer_id`'s transaction ended: COMMIT makes its pending offsets committed (each one
        unless a later record committed that partition), ABORT drops them (Kafka's
        completePendingTxnOffsetCommit)."""
        pending = self.pending_txn_offsets.pop(producer_id, {})
        if commit:
            for key, offset in pending.items():
                self.put_offset(key, offset)

    def has_pending_offset(self, key: TopicPartition) -> bool:
        """Does an open transaction commit an offset of this partition?"""
        return any(key in offsets for offsets in self.pending_txn_offsets.values())

    def pending_offset_keys(self) -> set[TopicPartition]:
        return {key for offsets in self.pending_txn_offsets.values() for key in offsets}

    def remove_offsets(self, keys: list[TopicPartition]) -> None:
        """Tombstones written: these partitions lose their committed and their pending offsets; the
        transactions stay open (a group with one open is not deleted)."""
        for key in keys:
            self.offsets.pop(key, None)
            for offsets in self.pending_txn_offsets.values():
                offsets.pop(key, None)

    # ------------------------------------------------------------ persistence

    def to_record(self) -> GroupValue:
        return GroupValue(
            self.protocol_type or "", self.generation, self.protocol_name, self.leader_id,
            self.state_timestamp, tuple(m.to_record(self.protocol_name) for m in self.members.values()),
        )


def parse_subscription_topics(metadata: bytes) -> set[str] | None:
    """Topic names of a ConsumerProtocolSubscription (v0-v3 share the leading topic array)."""
    try:
        position = 2  # version
        (count,) = _unpack(">i", metadata, position)
        position += 4
        topics = set()
        for _ in range(max(count, 0)):
            (length,) = _unpack(">h", metadata, position)
            position += 2
            topics.add(metadata[position : position + length].decode("utf-8"))
            position += length
        return topics
    except (ValueError, UnicodeDecodeError):
        return None


def _unpack(fmt: str, data: bytes, position: int) -> tuple[int, ...]:
    try:
        return struct.unpack_from(fmt, data, position)
    except struct.error as exc:
        raise ValueError(str(exc)) from None
