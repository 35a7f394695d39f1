"""Coordinators: consumer groups (classic protocol) and, later, transactions.

`group_coordinator(broker)` is how API handlers reach the broker's group coordinator. It is
created and started (its __consumer_offsets partitions loaded, offset expiry scheduled) by the
broker at start-up, or on the first group request when the broker did not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .coordinator import GroupCoordinator

if TYPE_CHECKING:
    from ..broker.broker import Broker

__all__ = ["GroupCoordinator", "group_coordinator"]


def group_coordinator(broker: Broker) -> GroupCoordinator:
    coordinator: GroupCoordinator | None = getattr(broker, "group_coordinator", None)
    if coordinator is None:
        coordinator = GroupCoordinator(broker)
        broker.group_coordinator = coordinator
        coordinator.start()
    return coordinator
