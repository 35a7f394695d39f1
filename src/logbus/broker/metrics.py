"""The broker's metrics (`metrics.port`): the counters its request path updates, and the collectors
that read its state at scrape time, each given only the part of the broker it reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from ..metrics.collectors import (
    ConnectionCollector,
    ConsumerLagCollector,
    ControllerCollector,
    GroupCoordinatorCollector,
    GroupOffset,
    HostedPartition,
    LogManagerCollector,
    ReplicaCollector,
    RequestCollector,
    ShareGroupCollector,
    ShareLag,
    TrafficCollector,
)
from ..metrics.counters import RequestTimes, ShareAcknowledgements, ShareRequests, TopicTraffic
from ..metrics.http import MetricsServer

if TYPE_CHECKING:
    from ..cluster.metadata import MetadataStore
    from ..cluster.replica_manager import ReplicaManager
    from ..cluster.share_partitions import SharePartitions
    from ..coordinator import GroupCoordinator
    from .broker import Broker


class BrokerMetrics:
    def __init__(self, broker: Broker) -> None:
        self.traffic = TopicTraffic()
        self.request_times = RequestTimes()
        self.share_acknowledgements = ShareAcknowledgements()
        self.share_requests = ShareRequests()
        self.server = MetricsServer(self._registry(broker), broker.config["metrics.host"],
                                    broker.config["metrics.port"])

    @classmethod
    def of(cls, broker: Broker) -> BrokerMetrics | None:
        """The broker's metrics, or None when `metrics.port` is unset (nothing is counted then)."""
        return None if broker.config["metrics.port"] is None else cls(broker)

    def _registry(self, broker: Broker) -> CollectorRegistry:
        registry = CollectorRegistry()
        replicas, metadata = broker.replicas, broker.metadata
        registry.register(TrafficCollector(self.traffic))
        registry.register(RequestCollector(self.request_times))
        registry.register(ReplicaCollector(lambda: _hosted(replicas)))
        registry.register(LogManagerCollector(lambda: len(broker.logs.offline_dirs)))
        registry.register(ControllerCollector(lambda: broker.controller is None or broker.controller.active,
                                              lambda: _offline_partitions(metadata)))
        registry.register(ConnectionCollector(lambda: (c.listener_name for c in broker.connections),
                                              (e.name for e in broker.listener_settings.listeners)))
        registry.register(ConsumerLagCollector(lambda: _committed(broker.group_coordinator),
                                               lambda topic, index: _high_watermark(replicas, topic, index)))
        coordinator = broker.group_coordinator
        registry.register(GroupCoordinatorCollector(
            lambda: ((g.group_type, g.state) for g in coordinator.list_groups()),
            lambda: coordinator.share_groups.rebalances))
        registry.register(ShareGroupCollector(self.share_acknowledgements, self.share_requests,
                                              lambda: _share_lags(broker.share_partitions)))
        ProcessCollector(registry=registry)
        return registry


def _hosted(replicas: ReplicaManager) -> Iterator[HostedPartition]:
    for p in replicas.partitions.values():
        under = p.is_leader and len(p.state.isr) < len(p.state.target_replicas)
        yield HostedPartition(p.topic, p.index, p.is_leader, under, p.log.size_in_bytes)


def _offline_partitions(metadata: MetadataStore) -> int:
    """Partitions whose leader is not a live broker (NO_LEADER included)."""
    live = {b.broker_id for b in metadata.brokers()}
    return sum(state.leader not in live for topic in metadata.topics().values() for state in topic.partitions)


def _committed(coordinator: GroupCoordinator) -> Iterator[GroupOffset]:
    """The committed offsets of the groups this broker coordinates (loaded from partitions it leads)."""
    for group in coordinator.groups.values():
        for (topic, index), committed in group.offsets.items():
            yield GroupOffset(group.group_id, topic, index, committed.value.offset)


def _share_lags(shares: SharePartitions) -> Iterator[ShareLag]:
    """The lag of every share-partition here (each on a partition this broker leads)."""
    for group_id, partition, share in shares.loaded_shares():
        yield ShareLag(group_id, partition.topic, partition.index, share.lag(partition.high_watermark))


def _high_watermark(replicas: ReplicaManager, topic: str, index: int) -> int | None:
    partition = replicas.get(topic, index)
    return None if partition is None else partition.high_watermark
