"""The partitions this broker hosts, kept in step with the metadata store.

Topic changes in the metadata store (created, grown, reconfigured, deleted) arrive as
listener calls; this class opens or removes the matching logs. API handlers reach partitions
only through here: network -> api handler -> replica manager -> partition -> log.
"""

from __future__ import annotations

import asyncio
import logging

from ..config import BrokerConfig, LogConfig, log_config
from ..storage.log import PartitionLog
from ..storage.manager import LogManager
from .metadata import MetadataStore, TopicMetadata
from .partition import Partition

log = logging.getLogger(__name__)


class ReplicaManager:
    def __init__(self, broker_id: int, config: BrokerConfig, metadata: MetadataStore,
                 logs: LogManager) -> None:
        self.broker_id = broker_id
        self.config = config
        self.metadata = metadata
        self.logs = logs
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._background: set[asyncio.Task] = set()

    def start(self) -> None:
        """Open every hosted partition's log (recovering if needed) and follow metadata."""
        topics = self.metadata.topics()
        hosted = {
            (name, index)
            for name, topic in topics.items()
            for index, state in enumerate(topic.partitions)
            if self.broker_id in state.replicas
        }
        self.logs.remove_orphan_dirs(hosted)
        self.logs.high_watermark_source = self.high_watermarks
        for topic in topics.values():
            self._sync_topic(topic)
        self.metadata.add_listener(self._on_topic_change)

    def log_config_for(self, topic: TopicMetadata) -> LogConfig:
        return log_config(self.config, topic.configs)

    def _on_topic_change(self, name: str, topic: TopicMetadata | None) -> None:
        if topic is None:
            task = asyncio.get_running_loop().create_task(self._drop_topic(name))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        else:
            self._sync_topic(topic)

    def _sync_topic(self, topic: TopicMetadata) -> None:
        config = self.log_config_for(topic)
        for index, state in enumerate(topic.partitions):
            if self.broker_id not in state.replicas:
                continue
            existing = self.partitions.get((topic.name, index))
            if existing is not None:
                existing.log.config = config
                existing.update_state(state)
                continue
            log_ = self.logs.load_log(topic.name, index, config)
            hw = self.logs.high_watermarks.get((topic.name, index), log_.log_end_offset)
            self.partitions[(topic.name, index)] = Partition(
                topic.name, index, topic.topic_id, self.broker_id, log_, state, hw
            )

    async def _drop_topic(self, name: str) -> None:
        for key in [k for k in self.partitions if k[0] == name]:
            self.partitions.pop(key)
            await self.logs.delete_log(*key)

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def all_logs(self) -> list[PartitionLog]:
        return [p.log for p in self.partitions.values()]

    def high_watermarks(self) -> dict[tuple[str, int], int]:
        """Each hosted partition's HW, for the replication-offset checkpoint."""
        return {key: partition.high_watermark for key, partition in self.partitions.items()}

    async def flush_if_due(self, partition: Partition) -> None:
        """fsync now when the partition's flush policy says so (before acknowledging)."""
        if partition.log.unflushed_messages >= partition.log.config.flush_messages:
            await partition.log.flush(self.logs.run_blocking)
