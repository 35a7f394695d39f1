"""Leader election rules, sans I/O: what a partition's new state is, given who is alive.

The controller (ZooKeeper) and the embedded store (one broker) decide with the same functions,
so a single broker answers ElectLeaders exactly as a one-broker Kafka does. Kafka's rules:
a new leader comes from the ISR, in replica order, among live brokers; outside the ISR only
when unclean election is allowed; the leader epoch grows with every leader change.
"""

from __future__ import annotations

from dataclasses import replace

from kio.schema.errors import ErrorCode

from ..errors import InvalidReplicaAssignment, NoReassignmentInProgress, UnknownTopicError, code_of
from .metadata import NO_LEADER, PartitionState


def elect_leader(state: PartitionState, live: set[int], unclean: bool = False) -> PartitionState | None:
    """The state after electing a leader when the current one is not alive, or None when the
    current leader is alive (nothing to do). With no live ISR member the partition goes offline
    (leader NO_LEADER, ISR kept so the last leader can come back), unless `unclean` lets a live
    out-of-sync replica lead (its ISR is then itself alone)."""
    if state.leader in live:
        return None
    candidates = [b for b in state.target_replicas if b in state.isr and b in live]
    isr = [b for b in state.isr if b in live]
    if not candidates and unclean:
        candidates = [b for b in state.target_replicas if b in live]
        isr = candidates[:1]
    if not candidates:
        if state.leader == NO_LEADER:
            return None
        return replace(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1,
                       isr=[b for b in state.isr if b == state.leader] or state.isr,
                       partition_epoch=state.partition_epoch + 1)
    return replace(state, leader=candidates[0], leader_epoch=state.leader_epoch + 1, isr=isr,
                   partition_epoch=state.partition_epoch + 1)


def elect_preferred(state: PartitionState, live: set[int]) -> PartitionState | ErrorCode:
    """Preferred-leader election: the first target replica leads if it is alive and in the ISR."""
    preferred = state.target_replicas[0] if state.target_replicas else NO_LEADER
    if state.leader == preferred:
        return ErrorCode.election_not_needed
    if preferred not in live or preferred not in state.isr:
        return ErrorCode.preferred_leader_not_available
    return replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                   partition_epoch=state.partition_epoch + 1)


def elect_unclean(state: PartitionState, live: set[int]) -> PartitionState | ErrorCode:
    """ElectLeaders with UNCLEAN: only for a partition without a live leader."""
    if state.leader in live:
        return ErrorCode.election_not_needed
    elected = elect_leader(state, live, unclean=True)
    if elected is None or elected.leader == NO_LEADER:
        return ErrorCode.eligible_leaders_not_available
    return elected


def without_broker(state: PartitionState, broker_id: int, live: set[int],
                   unclean: bool = False) -> PartitionState | None:
    """The state once `broker_id` is gone (dead, or shutting down under control): a new leader if
    it led, and it leaves the ISR (never the last member: Kafka keeps the last ISR member so that
    it can come back as the leader). None when nothing changes."""
    others = live - {broker_id}
    if state.leader == broker_id:
        return elect_leader(state, others, unclean)
    if broker_id in state.isr and len(state.isr) > 1:
        return replace(state, isr=[b for b in state.isr if b != broker_id], partition_epoch=state.partition_epoch + 1)
    return None


def reassignment_outcome(state: PartitionState | None, target: list[int] | None, live: set[int]) -> int | None:
    """AlterPartitionReassignments' answer for one partition (`state` None: no such partition):
    None when `target` is accepted, else the refusal's code."""
    code = code_of(lambda: check_reassignment(state, target, live))
    return None if code is ErrorCode.none else code


def check_reassignment(state: PartitionState | None, target: list[int] | None, live: set[int]) -> None:
    """Refuse `target` for a partition in `state` unless AlterPartitionReassignments takes it. A
    null target cancels, which needs a reassignment in progress."""
    if state is None:
        raise UnknownTopicError
    if target is None:
        if not (state.adding_replicas or state.removing_replicas):
            raise NoReassignmentInProgress
        return
    if not target or len(set(target)) != len(target) or not set(target) <= live:
        raise InvalidReplicaAssignment
