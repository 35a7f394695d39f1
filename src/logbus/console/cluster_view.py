"""What the console reads from a Kafka cluster, over the Kafka protocol only (confluent-kafka).

Every method blocks (it waits on AdminClient futures): the web layer calls them in a thread.
Cluster metadata, the group listing and log dir sizes are cached for `CACHE_TTL_S`, so a page
with 1,000 topics, or several pages at once, cost one Metadata request per second, not one each.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from ..client.admin import (
    SharePartitionOffset,
    describe_log_dirs,
    describe_share_group,
    list_share_groups,
    share_group_offsets,
)
from ..client.client import Client
from ..client.errors import KafkaError, RefusedError
from ..client.security import ClientSecurity

T = TypeVar("T")
CACHE_TTL_S = 1.5
NO_LEADER = -1


class ConsoleError(Exception):
    """A failure to show the operator as is (unknown topic, refused action, cluster unreachable)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class NotFound(ConsoleError):
    def __init__(self, message: str) -> None:
        super().__init__(message, 404)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    id: int
    leader: int
    replicas: list[int]
    isr: list[int]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: list[PartitionInfo]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)


@dataclass(frozen=True, slots=True)
class Broker:
    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    cluster_id: str | None
    controller: int | None
    brokers: list[Broker]
    topics: dict[str, TopicInfo]


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str


@dataclass(frozen=True, slots=True)
class ShareGroupSummary:
    group_id: str
    state: str
    lag: int | None  # summed over its share-partitions; None when it has state of none


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    host: str
    assignment: list[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class GroupInfo:
    group_id: str
    state: str
    assignor: str
    coordinator: int | None
    members: list[Member]
    committed: dict[tuple[str, int], int]
    end_offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.members and self.state in ("EMPTY", "DEAD", "UNKNOWN")


@dataclass(frozen=True, slots=True)
class ShareGroupInfo:
    group_id: str
    state: str
    coordinator: int
    group_epoch: int
    members: list[Member]
    offsets: list[SharePartitionOffset]


class TtlCache:
    """Values computed at most once per `ttl_s` per key; concurrent callers share one load."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self.values: dict[str, tuple[float, Any]] = {}
        self.lock = threading.Lock()

    def get(self, key: str, load: Callable[[], T]) -> T:
        with self.lock:
            cached = self.values.get(key)
            if cached is not None and self.clock() - cached[0] < self.ttl_s:
                return cached[1]
            value = load()
            self.values[key] = (self.clock(), value)
            return value

    def clear(self) -> None:
        with self.lock:
            self.values.clear()


class ClusterView:
    """Reads of one cluster through one AdminClient (thread-safe, as librdkafka is)."""

    def __init__(self, kafka: Any, config: dict[str, Any], timeout_s: float) -> None:
        self.kafka = kafka
        self.config = config
        self.timeout_s = timeout_s
        self.admin = kafka.admin.AdminClient({**config, "socket.timeout.ms": int(timeout_s * 1000)})
        self.cache = TtlCache(CACHE_TTL_S)

    # ------------------------------------------------------------ waiting on futures

    def wait(self, future: Any, what: str) -> Any:
        """A future's result, failures turned into `ConsoleError`s naming `what`."""
        try:
            return future.result(timeout=self.timeout_s + 1)
        except self.kafka.KafkaException as exc:
            error = exc.args[0]
            code = error.code() if hasattr(error, "code") else None
            if code in (self.kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, self.kafka.KafkaError._UNKNOWN_TOPIC):
                raise NotFound(f"{what}: no such topic") from None
            message = error.str() if hasattr(error, "str") else str(error)
            raise ConsoleError(f"{what}: {message}", 502) from None
        except TimeoutError:
            raise ConsoleError(f"{what}: no answer from the cluster within {self.timeout_s:g}s", 504) from None

    # ------------------------------------------------------------ cluster and topics

    def cluster(self) -> ClusterInfo:
        return self.cache.get("cluster", self._load_cluster)

    def _load_cluster(self) -> ClusterInfo:
        description = self.wait(self.admin.describe_cluster(request_timeout=self.timeout_s), "describing the cluster")
        try:
            metadata = self.admin.list_topics(timeout=self.timeout_s)
        except self.kafka.KafkaException as exc:
            raise ConsoleError(f"cluster metadata: {exc.args[0]}", 502) from None
        brokers = sorted((Broker(n.id, n.host, n.port, n.rack) for n in description.nodes), key=lambda b: b.id)
        topics = {name: TopicInfo(name, sorted(
            (PartitionInfo(p.id, p.leader, list(p.replicas), list(p.isrs)) for p in topic.partitions.values()),
            key=lambda p: p.id)) for name, topic in sorted(metadata.topics.items()) if topic.error is None}
        controller = description.controller.id if description.controller is not None else None
        return ClusterInfo(description.cluster_id, controller, brokers, topics)

    def topic(self, name: str) -> TopicInfo:
        found = self.cluster().topics.get(name)
        if found is None:
            raise NotFound(f"topic '{name}' does not exist")
        return found

    def topic_configs(self, name: str) -> list[tuple[str, str, str, bool]]:
        """(name, value, source, is_default) of every config of the topic, sorted by name."""
        admin = self.kafka.admin
        resource = admin.ConfigResource(admin.ResourceType.TOPIC, name)
        futures = self.admin.describe_configs([resource], request_timeout=self.timeout_s)
        entries = self.wait(futures[resource], f"configs of topic '{name}'")
        return sorted((entry.name, "<sensitive>" if entry.is_sensitive else str(entry.value or ""),
                       admin.ConfigSource(entry.source).name, bool(entry.is_default)) for entry in entries.values())

    def offsets(self, keys: list[tuple[str, int]], spec: str | int) -> dict[tuple[str, int], int]:
        """ListOffsets of `keys`: "earliest", "latest" or a timestamp in ms (-1: no record that late)."""
        if not keys:
            return {}
        kafka = self.kafka
        offset_spec = kafka.admin.OffsetSpec
        wanted = offset_spec.for_timestamp(spec) if isinstance(spec, int) else getattr(offset_spec, spec)()
        futures = self.admin.list_offsets({kafka.TopicPartition(t, p): wanted for t, p in keys},
                                          request_timeout=self.timeout_s)
        return {(tp.topic, tp.partition): self.wait(future, f"offsets of {tp.topic}-{tp.partition}").offset
                for tp, future in futures.items()}

    def all_end_offsets(self) -> dict[tuple[str, int], int]:
        keys = [(name, p.id) for name, topic in self.cluster().topics.items() for p in topic.partitions]
        return self.offsets(keys, "latest")

    def partition_sizes(self) -> dict[tuple[str, int], int]:
        """Bytes per partition (summed over brokers' log dirs), from DescribeLogDirs through logbus's
        own client (confluent-kafka has no DescribeLogDirs), secured as the console's other
        clients are; empty when the cluster does not answer it."""
        return self.cache.get("sizes", self._load_sizes)

    def _protocol_client(self) -> Client:
        """logbus's own blocking client (for what confluent-kafka lacks), secured as the console's
        other clients are; KafkaError when the settings are unusable."""
        return Client(self.config["bootstrap.servers"], self.timeout_s, ClientSecurity.from_settings(self.config))

    def _load_sizes(self) -> dict[tuple[str, int], int]:
        try:
            client = self._protocol_client()
        except KafkaError:
            return {}
        try:
            document = describe_log_dirs(client)
        except Exception:  # noqa: BLE001 - sizes are optional: a page without them beats an error page
            return {}
        finally:
            client.close()
        sizes: dict[tuple[str, int], int] = {}
        for broker in document["brokers"]:
            for log_dir in broker["logDirs"]:
                for partition in log_dir["partitions"]:
                    topic, _, index = partition["partition"].rpartition("-")
                    key = (topic, int(index))
                    sizes[key] = max(sizes.get(key, 0), partition["size"])
        return sizes

    # ------------------------------------------------------------ groups

    def groups(self) -> list[GroupSummary]:
        return self.cache.get("groups", self._load_groups)

    def _load_groups(self) -> list[GroupSummary]:
        result = self.wait(self.admin.list_consumer_groups(request_timeout=self.timeout_s), "listing groups")
        return sorted((GroupSummary(g.group_id, _enum_name(g.state)) for g in result.valid),
                      key=lambda g: g.group_id)

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        return self.committed_of([group])[group]

    def committed_of(self, groups: list[str]) -> dict[str, dict[tuple[str, int], int]]:
        """Committed offsets of each group; one OffsetFetch per group, all in flight at once."""
        kafka = self.kafka
        futures = {group: self.admin.list_consumer_group_offsets(
            [kafka.ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s)[group] for group in groups}
        committed = {}
        for group, future in futures.items():
            result = self.wait(future, f"offsets of group '{group}'")
            committed[group] = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}
        return committed

    def group(self, group_id: str) -> GroupInfo:
        futures = self.admin.describe_consumer_groups([group_id], request_timeout=self.timeout_s)
        description = self.wait(futures[group_id], f"group '{group_id}'")
        committed = self.committed(group_id)
        state = _enum_name(description.state)
        if state == "DEAD" and not committed:
            raise NotFound(f"group '{group_id}' does not exist")
        members = [Member(m.member_id, m.client_id, m.host,
                          sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions))
                   for m in description.members]
        keys = sorted(set(committed) | {key for member in members for key in member.assignment})
        coordinator = description.coordinator.id if description.coordinator is not None else None
        return GroupInfo(group_id, state, description.partition_assignor or "-", coordinator, members, committed,
                         self.offsets(keys, "latest"))

    # ------------------------------------------------------------ share groups (KIP-932)

    def share_groups(self) -> list[ShareGroupSummary]:
        """Every share group with its state and lag (DescribeShareGroupOffsets' lag, summed)."""
        return self.cache.get("share-groups", lambda: self._with_client("listing share groups", self._list_shares))

    def _list_shares(self, client: Client) -> list[ShareGroupSummary]:
        summaries = []
        for group_id, state in list_share_groups(client):
            lags = [o.lag for o in share_group_offsets(client, group_id) if o.lag is not None]
            summaries.append(ShareGroupSummary(group_id, state, sum(lags) if lags else None))
        return summaries

    def share_group(self, group_id: str) -> ShareGroupInfo:
        def describe(client: Client) -> ShareGroupInfo:
            coordinator, described = describe_share_group(client, group_id)
            members = [Member(m.member_id, m.client_id, m.client_host,
                              sorted((t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions))
                       for m in described.members]
            return ShareGroupInfo(group_id, described.group_state, coordinator, described.group_epoch, members,
                                  share_group_offsets(client, group_id))
        return self._with_client(f"share group '{group_id}'", describe)

    def _with_client(self, what: str, read: Callable[[Client], T]) -> T:
        """`read` with a blocking client; its failures as `ConsoleError`s naming `what`."""
        try:
            client = self._protocol_client()
        except KafkaError as exc:
            raise ConsoleError(f"{what}: {exc}") from None
        try:
            return read(client)
        except RefusedError as exc:
            if exc.code == ErrorCode.group_id_not_found:
                raise NotFound(f"{what} does not exist") from None
            raise ConsoleError(f"{what}: {exc}", 502) from None
        except KafkaError as exc:
            raise ConsoleError(f"{what}: {exc}", 502) from None
        except OSError as exc:
            raise ConsoleError(f"{what}: {exc}", 502) from None
        finally:
            client.close()

    def sample(self) -> tuple[dict[tuple[str, int], int], dict[str, dict[tuple[str, int], int]]]:
        """What `History.record` takes: every partition's end offset, every group's committed offsets."""
        return self.all_end_offsets(), self.committed_of([g.group_id for g in self.groups()])


def _enum_name(value: Any) -> str:
    """`ConsumerGroupState.EMPTY` -> "EMPTY"."""
    return str(value).rsplit(".", 1)[-1]
