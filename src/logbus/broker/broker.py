"""One broker process: config, metadata, logs, partitions and the network server.

Start-up order: metadata store, data dir (recovery happens as each log opens), partitions,
background upkeep, then the listener, so that a client never reaches a half-loaded broker.
Shutdown reverses it: stop accepting, close connections, fsync and checkpoint every log.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from ..cluster.metadata import BrokerInfo, EmbeddedMetadataStore, MetadataStore, TopicMetadata
from ..cluster.replica_manager import ReplicaManager
from ..config import BrokerConfig
from ..coordinator import GroupCoordinator
from ..storage.manager import LogManager
from .context import RawResponse
from .server import KafkaConnection

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig, broker_id: int, host: str, port: int, data_dir: str,
                 metadata: MetadataStore | None = None) -> None:
        self.config = config
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self.socket_request_max_bytes: int = config["socket.request.max.bytes"]
        self.socket_sendfile: str = config["socket.sendfile"]
        self.metadata = metadata or EmbeddedMetadataStore(data_dir, broker_id)
        self.logs = LogManager(data_dir, config["num.io.threads"], config["producer.id.expiration.ms"])
        self.replicas = ReplicaManager(broker_id, config, self.metadata, self.logs)
        self.group_coordinator = GroupCoordinator(self)
        self.metadata_cache: dict[tuple[int, tuple[int, int]], RawResponse] = {}  # (version, operations)
        self.connections: set[KafkaConnection] = set()
        self.stopping = False
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> tuple[str, int]:
        """Load everything and listen; returns the address actually bound."""
        self.logs.lock()
        await self.metadata.start()
        self.metadata.add_listener(self._forget_cached_metadata)
        self.logs.open(self.broker_id, self.metadata.cluster_id)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnection(self), self.host, self.port, reuse_address=True, backlog=1024,
            start_serving=False,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        await self.metadata.register_broker(BrokerInfo(self.broker_id, self._advertised_host(), self.port))
        self.replicas.start()
        self.logs.start(
            self.config["log.retention.check.interval.ms"],
            self.config["log.flush.offset.checkpoint.interval.ms"],
            min(self.config["log.flush.scheduler.interval.ms"], 1000),
            self.config["log.cleaner.backoff.ms"] if self.config["log.cleaner.enable"] else None,
        )
        self.group_coordinator.start()
        await self._server.start_serving()
        return self.host, self.port

    def _advertised_host(self) -> str:
        advertised = self.config["advertised.listeners"]
        if advertised:
            return str(advertised).split("://")[-1].rsplit(":", 1)[0]
        if self.host in ("", "0.0.0.0", "::"):
            return socket.getfqdn()
        return self.host

    def _forget_cached_metadata(self, _topic: str, _metadata: TopicMetadata | None) -> None:
        self.metadata_cache.clear()

    async def stop(self) -> None:
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        self.group_coordinator.stop()
        await self.logs.shutdown()
        await self.metadata.close()
        log.info("broker %d stopped cleanly", self.broker_id)
