"""Coordinators: consumer groups (classic protocol) and, later, transactions.

The broker creates its `GroupCoordinator` and starts it (starting the background load of the
groups of its __consumer_offsets partitions, scheduling offset expiry) before it listens; API handlers reach
it through `group_coordinator(broker)`. `GroupCoordinator` (`coordinator.py`) wires three parts
that share its groups: `membership.py` (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, rebalances,
sessions), `offsets.py` (committed offsets, transactional ones pending until their marker,
group deletion, offset expiry) and `loading.py` (which __consumer_offsets partitions' groups are
in memory). `group.py` holds a group's state,
`records.py` the record format, `store.py` the topic's reads and writes, `clock.py` time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .clock import Clock, LoopClock
from .coordinator import GroupConfig, GroupCoordinator
from .store import OffsetsTopic

if TYPE_CHECKING:
    from ..broker.broker import Broker

__all__ = ["Clock", "GroupConfig", "GroupCoordinator", "LoopClock", "OffsetsTopic", "group_coordinator"]


def group_coordinator(broker: Broker) -> GroupCoordinator:
    return broker.group_coordinator
