"""One broker process: config, metadata, logs, partitions and the network server.

Start-up order: metadata store, log dirs (recovery happens as each log opens), partitions,
background upkeep, then the listener, so that a client never reaches a half-loaded broker.
Shutdown reverses it: stop accepting, close connections, fsync and checkpoint every log.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from ..cluster.broker_client import BrokerClients
from ..cluster.metadata import BrokerInfo, EmbeddedMetadataStore, MetadataStore, TopicMetadata
from ..cluster.replica_manager import ReplicaManager
from ..cluster.replica_selector import replica_selector
from ..cluster.sasl_login import InterBrokerLogin
from ..cluster.share_partition import SharePartitionConfig
from ..cluster.share_partitions import ShareGroupReadSettings, SharePartitions
from ..cluster.share_persister import SharePersister
from ..cluster.txn_markers import MARKER_TIMEOUT_S, TxnMarkerWriter
from ..config import BrokerConfig, describe_group_configs
from ..coordinator import GroupConfig, GroupCoordinator, LoopClock, OffsetsTopic
from ..coordinator.share_coordinator import ShareCoordinator, ShareStateTopic
from ..coordinator.share_group import ShareGroupSettings
from ..coordinator.share_records import ShareKey
from ..coordinator.txn_coordinator import TransactionCoordinator, TxnConfig
from ..coordinator.txn_store import TxnStateTopic
from ..coordinator.txn_verification import TxnVerifier
from ..security.connection_quotas import ConnectionRateQuotas
from ..security.listeners import WILDCARD_HOSTS, ListenerEndpoint, ListenerSettings
from ..security.quotas import ClientQuotas, WindowConfig
from ..security.tls import ListenerTls, client_context
from ..storage.manager import LogManager
from .apis import registry
from .authorization import make_authorizer
from .context import RawResponse
from .fetch_sessions import FetchSessionCache
from .metrics import BrokerMetrics
from .server import Connections, Listener
from .share_sessions import ShareSessionCache
from .topic_configs import broker_entity, group_entity

if TYPE_CHECKING:
    import uuid

    from ..cluster.controller import Controller

log = logging.getLogger(__name__)


GROUP_CONFIGS_CACHED = 10_000  # groups whose effective configs are kept (all dropped beyond)
SHARE_STATE_TIMEOUT_S = 15.0  # a share state read or write waits this long for its coordinator to answer


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Broker:
    def __init__(self, config: BrokerConfig, broker_id: int, listeners: ListenerSettings, log_dirs: str | list[str],
                 metadata: MetadataStore | None = None) -> None:
        """`listeners`: what to bind and advertise (`listener_settings`, or `ListenerSettings.plaintext`);
        `log_dirs`: absolute paths, one (a str) or several; the first holds the embedded metadata."""
        self.config = config
        self.broker_id = broker_id
        self.listener_settings = listeners
        self.listeners: tuple[ListenerEndpoint, ...] = ()  # as bound, once started
        self.tls = {e.name: ListenerTls.build(config, e.name) for e in listeners.listeners if e.tls}
        inter_broker_tls = client_context(config, listeners.inter_broker_listener) \
            if any(e.tls for e in listeners.listeners if e.name == listeners.inter_broker_listener) else None
        self.log_dirs = [log_dirs] if isinstance(log_dirs, str) else list(log_dirs)
        self.data_dir = self.log_dirs[0]
        self.socket_request_max_bytes: int = config["socket.request.max.bytes"]
        self.socket_sendfile: str = config["socket.sendfile"]
        self.replica_selector = replica_selector(config["replica.selector.class"])  # KIP-392, for consumer fetches
        self.metadata = metadata or self._metadata_store(config, broker_id, self.data_dir)
        self.authorizer = make_authorizer(config, self.metadata.acls)
        self.controller = self._controller(config, self.metadata)
        self.logs = LogManager(self.log_dirs, config["logbus.io.threads"], config["producer.id.expiration.ms"],
                               config["logbus.open.segments.max"])
        inter_broker = listeners.inter_broker_listener
        inter_broker_sasl = InterBrokerLogin.from_config(config, listeners)
        self.replicas = ReplicaManager(broker_id, config, self.metadata, self.logs, inter_broker, inter_broker_tls,
                                       inter_broker_sasl)
        self.broker_clients = BrokerClients(broker_id, self.metadata, MARKER_TIMEOUT_S, inter_broker, inter_broker_tls,
                                            inter_broker_sasl)
        self.txn_markers = TxnMarkerWriter(broker_id, self.metadata, self.replicas, self.broker_clients,
                                           MARKER_TIMEOUT_S)
        clock = LoopClock()
        self.group_coordinator = GroupCoordinator(
            GroupConfig.from_broker_config(config), OffsetsTopic(config, self.metadata, self.replicas, clock), clock,
            partition_count=self._partition_count, topic_names=self._public_topics,
            group_configs=self._group_overrides, topic_id=self._topic_id, topic_name=self._topic_name,
        )
        self.replicas.add_leadership_listener(self.group_coordinator.on_leadership)
        self.replicas.add_marker_listener(self.group_coordinator.on_txn_marker)
        # share groups (KIP-932): membership on the coordinator, records on each partition's leader
        self._group_configs_cache: dict[str, tuple[object, dict[str, Any]]] = {}
        self.share_coordinator = ShareCoordinator(
            ShareStateTopic(config, self.metadata, self.replicas, clock), clock,
            config["share.coordinator.snapshot.update.records.per.snapshot"],
            config["share.coordinator.state.topic.prune.interval.ms"])
        self.replicas.add_leadership_listener(self.share_coordinator.on_leadership)
        self.share_partitions = SharePartitions(
            clock, self._share_read_settings,
            SharePersister(broker_id, self.share_coordinator, self.broker_clients, SHARE_STATE_TIMEOUT_S),
            self._topic_id)
        self.share_sessions = ShareSessionCache(
            config["group.share.max.share.sessions"],
            on_evicted=lambda session: self.share_partitions.release_member(session.group_id, session.member_id))
        self.replicas.add_leadership_listener(self.share_partitions.on_leadership)
        self.group_coordinator.delete_share_state = self._delete_share_state
        share_groups = self.group_coordinator.share_groups
        share_groups.settings, share_groups.max_size = self._share_group_settings, config["group.share.max.size"]
        self.txn_coordinator = TransactionCoordinator(
            TxnConfig.from_broker_config(config), TxnStateTopic(config, self.metadata, self.replicas, clock), clock,
            allocate_producer_id=self.metadata.allocate_producer_id, write_markers=self.txn_markers.write,
        )
        self.replicas.add_leadership_listener(self.txn_coordinator.on_leadership)
        self.txn_verifier = TxnVerifier(self.txn_coordinator, self.broker_clients,
                                        config["transaction.partition.verification.enable"])
        # (listener name, version, operations, principal and host when an authorizer filters the answer)
        self.metadata_cache: dict[tuple[object, ...], RawResponse] = {}
        # per all-topics answer key, each topic's encoded part (apis/metadata.py), kept across topic changes
        self.metadata_topic_cache: dict[tuple[object, ...], dict[str, tuple[TopicMetadata | None, object, bytes]]] = {}
        self.connections = Connections(config)
        quota_window = WindowConfig(config["quota.window.num"], config["quota.window.size.seconds"] * 1000)
        self.quotas = ClientQuotas(
            self.metadata.client_quotas, _monotonic_ms, quota_window,
            WindowConfig(config["controller.quota.window.num"], config["controller.quota.window.size.seconds"] * 1000),
        )
        self.connection_quotas = ConnectionRateQuotas(
            config["max.connection.creation.rate"],
            {e.name: config.for_listener(e.name, "max.connection.creation.rate") for e in listeners.listeners},
            inter_broker if len(listeners.listeners) > 1 else None, self.metadata.client_quotas, quota_window,
            _monotonic_ms)
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"], time.monotonic)
        self.stopping = False
        self._servers: list[Listener] = []
        self.metrics = BrokerMetrics.of(self)  # None without metrics.port

    def _group_configs(self, group_id: str) -> dict[str, Any]:
        """A group's configs: its own (IncrementalAlterConfigs on the group), else the broker's defaults.
        Kept per group while the stored configs (replaced, never mutated, on any change) stay the
        same: working them out takes milliseconds, and share fetches ask for them per partition."""
        stored = self.metadata.entity_configs()
        cached = self._group_configs_cache.get(group_id)
        if cached is not None and cached[0] is stored:
            return cached[1]
        overrides = stored.get(group_entity(group_id), {})
        configs = {value.name: value.value for value in describe_group_configs(self.config, overrides)}
        if len(self._group_configs_cache) >= GROUP_CONFIGS_CACHED:
            self._group_configs_cache.clear()
        self._group_configs_cache[group_id] = (stored, configs)
        return configs

    def _share_group_settings(self, group_id: str) -> ShareGroupSettings:
        configs = self._group_configs(group_id)
        return ShareGroupSettings(configs["share.session.timeout.ms"], configs["share.heartbeat.interval.ms"])

    def _share_read_settings(self, group_id: str) -> ShareGroupReadSettings:
        configs = self._group_configs(group_id)
        partition_config = SharePartitionConfig(
            configs["share.record.lock.duration.ms"], self.config["group.share.delivery.count.limit"],
            self.config["group.share.partition.max.record.locks"])
        return ShareGroupReadSettings(partition_config, configs["share.auto.offset.reset"],
                                      configs["share.isolation.level"] == "read_committed")

    async def _delete_share_state(self, group_id: str, topics: set[str]) -> None:
        """A share group is deleted: its share-partitions' state goes from their share coordinators
        (DeleteShareGroupState) and from this broker's memory; KafkaApiError when a deletion fails."""
        keys = [ShareKey(group_id, metadata.uuid, index) for topic in sorted(topics)
                if (metadata := self.metadata.topic(topic)) is not None for index in range(len(metadata.partitions))]
        persister = self.share_partitions.persister
        await asyncio.gather(*(persister.delete(key) for key in keys))
        self.share_partitions.forget_group(group_id)

    def _partition_count(self, topic: str) -> int | None:
        metadata = self.metadata.topic(topic)
        return None if metadata is None else len(metadata.partitions)

    def _group_overrides(self, group_id: str) -> dict[str, str]:
        """A group's own configs (IncrementalAlterConfigs on its GROUP resource), without defaults."""
        return self.metadata.entity_configs().get(group_entity(group_id), {})

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        metadata = self.metadata.topic(topic)
        return None if metadata is None else metadata.uuid

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        metadata = self.metadata.topic_by_id(str(topic_id))
        return None if metadata is None else metadata.name

    def _public_topics(self) -> list[str]:
        return [name for name, metadata in self.metadata.topics().items() if not metadata.internal]

    @staticmethod
    def _metadata_store(config: BrokerConfig, broker_id: int, data_dir: str) -> MetadataStore:
        """ZooKeeper when `zookeeper.connect` is set (a cluster), else the embedded file."""
        connect = config["zookeeper.connect"]
        if not connect:
            return EmbeddedMetadataStore(data_dir, broker_id)
        from ..cluster.zookeeper import ZooKeeperMetadataStore

        return ZooKeeperMetadataStore(connect, broker_id, config["zookeeper.session.timeout.ms"],
                                      config["zookeeper.connection.timeout.ms"])

    @staticmethod
    def _controller(config: BrokerConfig, metadata: MetadataStore) -> Controller | None:
        from ..cluster.zookeeper import ZooKeeperMetadataStore

        if not isinstance(metadata, ZooKeeperMetadataStore):
            return None
        from ..cluster.controller import Controller

        return Controller(metadata, config)

    async def start(self) -> tuple[ListenerEndpoint, ...]:
        """Load everything and listen; returns the listeners as bound (port 0 replaced)."""
        self.logs.lock()
        await self.metadata.start()
        self._apply_dynamic_configs()
        self.metadata.add_config_listener(self._on_entity_config)
        self.metadata.add_listener(self._forget_cached_metadata)
        self.metadata.add_broker_listener(lambda _brokers: self._forget_all_cached_metadata())
        self.metadata.add_acl_listener(self._forget_all_cached_metadata)
        self.logs.open(self.broker_id, self.metadata.cluster_id)
        registry()  # the APIs found before any connection: finding them lists a directory, which
        # takes a descriptor, and a first connection may come when they have all run out
        self._bind_listeners()
        local_host = socket.getfqdn() if any(e.host in WILDCARD_HOSTS for e in self.listeners) else ""
        advertised = self.listener_settings.advertise(self.listeners, local_host)
        registration = asyncio.ensure_future(
            self.metadata.register_broker(BrokerInfo(self.broker_id, advertised, self.config["broker.rack"])))
        self.replicas.start(registration)  # the logs load while an old registration expires
        await registration
        self.broker_clients.start()
        if self.controller is not None:
            self.controller.start()
        self.logs.start(
            self.config["log.retention.check.interval.ms"],
            self.config["log.flush.offset.checkpoint.interval.ms"],
            min(self.config["log.flush.scheduler.interval.ms"], 1000),
            self.config["log.cleaner.backoff.ms"] if self.config["log.cleaner.enable"] else None,
            self.config["log.flush.start.offset.checkpoint.interval.ms"],
        )
        self.group_coordinator.start()
        self.txn_coordinator.start()
        self.share_coordinator.start()
        if self.metrics is not None:
            await self.metrics.server.start()
        for server in self._servers:
            server.start_serving()
        return self.listeners

    def _bind_listeners(self) -> None:
        """Bind every listener (none serves before all are bound); on a failure, none stays bound."""
        try:
            for endpoint in self.listener_settings.listeners:
                self._servers.append(Listener.bind(self, endpoint, 1024, self.tls.get(endpoint.name)))
        except OSError:
            self._close_listeners()
            raise
        self.listeners = tuple(server.endpoint for server in self._servers)

    def _close_listeners(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()

    async def _controlled_shutdown(self) -> None:
        """Kafka's controlled shutdown: leaderships move to other ISR members before this broker
        stops serving, so producers with acks=all see no failed send in a rolling restart. As
        Kafka's broker retries its ControlledShutdown request, the request is made again every
        controlled.shutdown.retry.backoff.ms, at most controlled.shutdown.max.retries times
        (15 s by default; it was the session timeout, 6 s in the scale bench, too short to move
        thousands of leaderships on a loaded host)."""
        request = getattr(self.metadata, "request_controlled_shutdown", None)
        if request is None or not self.config["controlled.shutdown.enable"]:
            return
        attempts = self.config["controlled.shutdown.max.retries"]
        backoff_s = self.config["controlled.shutdown.retry.backoff.ms"] / 1000
        began = time.monotonic()
        for attempt in range(1, attempts + 1):
            if await request(backoff_s):
                log.info("controlled shutdown: leading nothing after %.1f s", time.monotonic() - began)
                return
            if attempt < attempts:
                log.info("controlled shutdown: still leading partitions after %.1f s; asking again (%d of %d)",
                         time.monotonic() - began, attempt, attempts - 1)
        log.warning("controlled shutdown: still leading some partitions after %.0f s; stopping anyway",
                    time.monotonic() - began)

    def _apply_dynamic_configs(self) -> None:
        """This broker's dynamic configs and the cluster-wide default ones, from the metadata store."""
        stored = self.metadata.entity_configs()
        self.config.set_dynamic(stored.get(broker_entity(str(self.broker_id)), {}), stored.get(broker_entity(""), {}))

    def _on_entity_config(self, entity: str) -> None:
        """A dynamic broker config changed: the config takes it, and every log whose topic does not
        override a changed default takes the new value at once (docs/configuration.md lists the
        keys applied live)."""
        if entity in (broker_entity(str(self.broker_id)), broker_entity("")):
            self._apply_dynamic_configs()
            self.replicas.reconfigure_logs()

    def _forget_cached_metadata(self, _topic: str, _metadata: TopicMetadata | None) -> None:
        self.metadata_cache.clear()

    def _forget_all_cached_metadata(self) -> None:
        """Brokers or ACLs changed: every topic's encoded part may too."""
        self.metadata_cache.clear()
        self.metadata_topic_cache.clear()

    async def stop(self) -> None:
        """Kafka's order: controlled shutdown, stop serving, stop fetching, close every log
        durably, leave ZooKeeper. One INFO line gives each phase's seconds (what an operator
        needs when a stop takes long: issue 25)."""
        phases = _Phases()
        await self._controlled_shutdown()
        phases.lap("controlled shutdown")
        self.stopping = True
        if self.metrics is not None:
            self.metrics.server.close()
        self._close_listeners()
        self.connections.close_all()
        self.group_coordinator.stop()
        self.share_partitions.stop()
        self.share_coordinator.stop()
        self.txn_coordinator.stop()
        if self.controller is not None:
            self.controller.stop()
        await self.txn_markers.stop()
        self.broker_clients.close()
        phases.lap("connections and coordinators")
        await self.replicas.stop()
        phases.lap("replica fetchers")
        await self.logs.shutdown()
        phases.lap("logs")
        await self.metadata.close()
        phases.lap("metadata store")
        log.info("broker %d stopped cleanly in %s", self.broker_id, phases)


class _Phases:
    """Seconds spent in each named phase, one after the other."""

    def __init__(self) -> None:
        self.began = self._last = time.monotonic()
        self.seconds: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.seconds.append((name, now - self._last))
        self._last = now

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.seconds)
        return f"{self._last - self.began:.2f} s ({parts})"
