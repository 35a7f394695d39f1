"""Prometheus collectors: counters and broker state turned into metric families at scrape time.

Each collector is given the narrow things it reads (a counter object, a callable returning the
hosted partitions, ...), never the broker. Collection runs on the event loop (see `http.py`), so
state is read as the loop leaves it between callbacks: no lock, no copy beyond the families.
Names and labels are those of the JMX exporter's usual Kafka rules (lowercased MBean names,
`...PerSec` counters as `..._total`), plus kafka-exporter's `kafka_consumergroup_lag` and its
share-group counterpart `kafka_sharegroup_lag`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from .counters import LATENCY_BUCKETS_MS, RequestTimes, ShareAcknowledgements, ShareRequests, TopicTraffic


def _per_topic_counter(name: str, documentation: str, total: int, per_topic: dict[str, int]) -> Metric:
    """One family holding the all-topics series (no label) and one series per topic, as the
    JMX exporter exports BrokerTopicMetrics with and without its `topic` key."""
    family = CounterMetricFamily(name, documentation, labels=["topic"])
    family.add_sample(f"{family.name}_total", {}, total)
    for topic, value in per_topic.items():
        family.add_metric([topic], value)
    return family


class TrafficCollector(Collector):
    def __init__(self, traffic: TopicTraffic) -> None:
        self.traffic = traffic

    def collect(self) -> Iterator[Metric]:
        t = self.traffic
        yield _per_topic_counter("kafka_server_brokertopicmetrics_messagesin",
                                 "Records appended by producers (MessagesInPerSec).", t.total_messages_in,
                                 t.messages_in)
        yield _per_topic_counter("kafka_server_brokertopicmetrics_bytesin",
                                 "Record batch bytes appended by producers (BytesInPerSec).", t.total_bytes_in,
                                 t.bytes_in)
        yield _per_topic_counter("kafka_server_brokertopicmetrics_bytesout",
                                 "Record bytes sent to consumers, not followers (BytesOutPerSec).",
                                 t.total_bytes_out, t.bytes_out)


class RequestCollector(Collector):
    def __init__(self, times: RequestTimes) -> None:
        self.times = times

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests answered, by Kafka's request name (RequestsPerSec).",
                                       labels=["request"])
        latency = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                        "Milliseconds from a request's decoding to its encoded answer "
                                        "(TotalTimeMs).", labels=["request"])
        bounds = [*(f"{b:g}" for b in LATENCY_BUCKETS_MS), "+Inf"]
        for name, histogram in self.times.by_name.items():
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, histogram.counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            requests.add_metric([name], cumulative)
            latency.add_metric([name], buckets, histogram.sum_ms)
        yield requests
        yield latency


@dataclass(frozen=True, slots=True)
class HostedPartition:
    """What the replica collector reads of one partition this broker hosts."""

    topic: str
    index: int
    is_leader: bool
    under_replicated: bool  # led here with fewer in-sync replicas than replicas
    size_in_bytes: int


class ReplicaCollector(Collector):
    """ReplicaManager's partition, leader and under-replicated counts, and each log's size."""

    def __init__(self, hosted: Callable[[], Iterable[HostedPartition]]) -> None:
        self.hosted = hosted

    def collect(self) -> Iterator[Metric]:
        partitions = list(self.hosted())
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount",
                                "Partitions hosted by this broker, as leader or follower.", value=len(partitions))
        yield GaugeMetricFamily("kafka_server_replicamanager_leadercount", "Partitions this broker leads.",
                                value=sum(p.is_leader for p in partitions))
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions",
                                "Partitions led here whose ISR is smaller than their replica set.",
                                value=sum(p.under_replicated for p in partitions))
        sizes = GaugeMetricFamily("kafka_log_log_size", "Bytes of a partition's log segments on this broker.",
                                  labels=["topic", "partition"])
        for p in partitions:
            sizes.add_metric([p.topic, str(p.index)], p.size_in_bytes)
        yield sizes


class LogManagerCollector(Collector):
    """LogManager's OfflineLogDirectoryCount: log dirs that failed since the broker started."""

    def __init__(self, offline_dirs: Callable[[], int]) -> None:
        self.offline_dirs = offline_dirs

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("kafka_log_logmanager_offlinelogdirectorycount",
                                "Log dirs offline after a disk error (until the broker restarts).",
                                value=self.offline_dirs())


class ControllerCollector(Collector):
    """KafkaController's gauges: 1 on the active controller; offline partitions counted there only."""

    def __init__(self, is_active: Callable[[], bool], offline_partitions: Callable[[], int]) -> None:
        self.is_active = is_active
        self.offline_partitions = offline_partitions

    def collect(self) -> Iterator[Metric]:
        active = self.is_active()
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the active controller, 0 on other brokers.", value=int(active))
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a live leader (reported by the active controller).",
                                value=self.offline_partitions() if active else 0)


class ConnectionCollector(Collector):
    """socket-server-metrics' connection-count, per listener."""

    def __init__(self, listener_names: Callable[[], Iterable[str]], listeners: Iterable[str]) -> None:
        self.listener_names = listener_names
        self.listeners = tuple(listeners)

    def collect(self) -> Iterator[Metric]:
        counts = dict.fromkeys(self.listeners, 0)
        for name in self.listener_names():
            counts[name] = counts.get(name, 0) + 1
        family = GaugeMetricFamily("kafka_server_socketservermetrics_connection_count",
                                   "Open client and broker connections.", labels=["listener"])
        for listener, count in counts.items():
            family.add_metric([listener], count)
        yield family


@dataclass(frozen=True, slots=True)
class GroupOffset:
    group: str
    topic: str
    partition: int
    offset: int


class ConsumerLagCollector(Collector):
    """kafka-exporter's `kafka_consumergroup_lag`: end offset (the high watermark, what consumers
    and kafka-consumer-groups call the log end offset) minus committed offset, for the groups this
    broker coordinates and the partitions it hosts."""

    def __init__(self, committed: Callable[[], Iterable[GroupOffset]],
                 end_offset: Callable[[str, int], int | None]) -> None:
        self.committed = committed
        self.end_offset = end_offset

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("kafka_consumergroup_lag", "End offset minus committed offset.",
                                   labels=["consumergroup", "topic", "partition"])
        for c in self.committed():
            end = self.end_offset(c.topic, c.partition)
            if end is not None:
                family.add_metric([c.group, c.topic, str(c.partition)], max(end - c.offset, 0))
        yield family


GROUP_PROTOCOLS = ("classic", "consumer", "share")
SHARE_GROUP_STATES = ("Empty", "Stable", "Dead")


class GroupCoordinatorCollector(Collector):
    """group-coordinator-metrics of the groups this broker coordinates: `group-count` per protocol,
    `share-group-count` per state and `share-group-rebalance-count` (a cumulative count Kafka's
    JMX exports as a gauge)."""

    def __init__(self, groups: Callable[[], Iterable[tuple[str, str]]], share_rebalances: Callable[[], int]) -> None:
        self.groups = groups  # (group type, state) of each group
        self.share_rebalances = share_rebalances

    def collect(self) -> Iterator[Metric]:
        per_protocol = dict.fromkeys(GROUP_PROTOCOLS, 0)
        share_states = dict.fromkeys(SHARE_GROUP_STATES, 0)
        for group_type, state in self.groups():
            per_protocol[group_type] = per_protocol.get(group_type, 0) + 1
            if group_type == "share":
                share_states[state] = share_states.get(state, 0) + 1
        count = GaugeMetricFamily("kafka_server_groupcoordinatormetrics_group_count",
                                  "Groups this broker coordinates, per protocol.", labels=["protocol"])
        for protocol, value in per_protocol.items():
            count.add_metric([protocol], value)
        yield count
        states = GaugeMetricFamily("kafka_server_groupcoordinatormetrics_share_group_count",
                                   "Share groups this broker coordinates, per state.", labels=["state"])
        for state, value in share_states.items():
            states.add_metric([state], value)
        yield states
        yield GaugeMetricFamily("kafka_server_groupcoordinatormetrics_share_group_rebalance_count",
                                "Share group rebalances (group epoch bumps) since the broker started.",
                                value=self.share_rebalances())


@dataclass(frozen=True, slots=True)
class ShareLag:
    group: str
    topic: str
    partition: int
    lag: int


class ShareGroupCollector(Collector):
    """BrokerTopicMetrics' share request meters, ShareGroupMetrics' RecordAcknowledgementsPerSec,
    and `kafka_sharegroup_lag`: per share
    group and partition this broker leads, the records from the share-partition start offset to the
    high watermark not yet delivered for good (KIP-1226's lag, as DescribeShareGroupOffsets
    answers it)."""

    def __init__(self, acknowledgements: ShareAcknowledgements, requests: ShareRequests,
                 lags: Callable[[], Iterable[ShareLag]]) -> None:
        self.acknowledgements = acknowledgements
        self.requests = requests
        self.lags = lags

    def collect(self) -> Iterator[Metric]:
        for (kind, failed), total in self.requests.total.items():
            name = f"{'Failed' if failed else 'Total'}Share{kind.capitalize()}Requests"  # Kafka's, less PerSec
            yield _per_topic_counter(f"kafka_server_brokertopicmetrics_{name.lower()}",
                                     f"Topics of share {kind} requests{' that failed' if failed else ''} "
                                     f"({name}PerSec).", total, self.requests.per_topic[(kind, failed)])
        acks = CounterMetricFamily("kafka_server_sharegroupmetrics_recordacknowledgements",
                                   "Records acknowledged by share group members, per type "
                                   "(RecordAcknowledgementsPerSec).", labels=["acktype"])
        for name, value in self.acknowledgements.by_type.items():
            acks.add_metric([name], value)
        yield acks
        family = GaugeMetricFamily("kafka_sharegroup_lag", "High watermark minus share-partition start offset, "
                                   "less the records after it already delivered for good.",
                                   labels=["sharegroup", "topic", "partition"])
        for s in self.lags():
            family.add_metric([s.group, s.topic, str(s.partition)], s.lag)
        yield family
