"""Coordinators: consumer groups (classic protocol) and, later, transactions.

The broker creates its `GroupCoordinator` and starts it (starting the background load of the
groups of its __consumer_offsets partitions, scheduling offset expiry) before it listens; API handlers reach
it through `group_coordinator(broker)`.
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
