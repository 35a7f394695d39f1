"""Which replica a consumer should read a partition from (KIP-392, `replica.selector.class`).

The leader asks the selector on each consumer fetch (v11+, which carries the client's rack);
when it picks another replica the leader answers with that replica as the partition's
`preferred_read_replica` and no records, and the consumer fetches from it from then on. As
Kafka's: unset (the default) or `LeaderSelector`, consumers read from the leader;
`RackAwareReplicaSelector` picks the leader when it is in the client's rack (or the client names
no rack, or no replica is in it), else the replica of the client's rack that has the most of
the log (ties: the one caught up most recently). The candidates are the leader and the in-sync
followers that hold the fetch offset (see `Partition.read_replica_candidates`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTORS = (LEADER_SELECTOR, RACK_AWARE_SELECTOR)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A replica as the leader sees it (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up: float  # seconds; 0 for the leader


ReplicaSelector = Callable[[str, ReplicaView, list[ReplicaView]], ReplicaView]


def select_leader(_client_rack: str, leader: ReplicaView, _replicas: list[ReplicaView]) -> ReplicaView:
    return leader


def select_rack_aware(client_rack: str, leader: ReplicaView, replicas: list[ReplicaView]) -> ReplicaView:
    """Kafka's RackAwareReplicaSelector.select over `replicas` (the leader among them)."""
    if not client_rack:
        return leader
    same_rack = [replica for replica in replicas if replica.rack == client_rack]
    if not same_rack or leader in same_rack:
        return leader
    return max(same_rack, key=lambda replica: (replica.log_end_offset, -replica.time_since_caught_up))


def replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """The selector `replica.selector.class` names; None when unset (the leader always serves)."""
    if class_name == RACK_AWARE_SELECTOR:
        return select_rack_aware
    if class_name == LEADER_SELECTOR:
        return select_leader
    return None
