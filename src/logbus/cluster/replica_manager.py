"""The partitions this broker hosts, kept in step with the metadata store.

Topic changes in the metadata store (created, grown, reconfigured, deleted) arrive as
listener calls; this class opens or removes the matching logs. A reconfigured topic's logs get
the new `LogConfig` at once (retention, roll, flush, cleanup policy are read from it on each
use). A deleted topic's partitions leave the map immediately and their files go in the
background; a topic created again under the same name opens its logs only once the old files
are gone. API handlers reach partitions only through here: network -> api handler -> replica
manager -> partition -> log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ..config import BrokerConfig, LogConfig, log_config
from ..storage.log import PartitionLog
from ..storage.manager import LogManager
from .metadata import MetadataStore, TopicMetadata
from .partition import Partition

log = logging.getLogger(__name__)

LeadershipListener = Callable[[Partition, bool], None]


class ReplicaManager:
    def __init__(self, broker_id: int, config: BrokerConfig, metadata: MetadataStore,
                 logs: LogManager) -> None:
        self.broker_id = broker_id
        self.config = config
        self.metadata = metadata
        self.logs = logs
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._drops: dict[str, asyncio.Task] = {}  # topic -> removal of its logs' files
        self._background: set[asyncio.Task] = set()
        self._leadership_listeners: list[LeadershipListener] = []

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        """Call `listener(partition, True)` when this broker becomes the leader of a partition (at
        start-up too, for each it leads), `listener(partition, False)` when it stops leading one
        (another broker leads, the partition went offline or was deleted)."""
        self._leadership_listeners.append(listener)

    def _announce_leadership(self, partition: Partition, leads: bool) -> None:
        for listener in self._leadership_listeners:
            listener(partition, leads)

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
            self._drop_topic(name)
        elif name in self._drops:
            self._run_in_background(self._sync_after_drop(name))
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
                led = existing.is_leader
                existing.update_state(state)
                if existing.is_leader != led:
                    self._announce_leadership(existing, existing.is_leader)
                continue
            try:
                log_ = self.logs.load_log(topic.name, index, config)
            except OSError:  # e.g. a full disk: the topic's other partitions still open
                log.exception("cannot open the log of %s-%d; it opens on the next change or restart", topic.name, index)
                continue
            hw = self.logs.high_watermarks.get((topic.name, index), log_.log_end_offset)
            partition = Partition(topic.name, index, topic.topic_id, self.broker_id, log_, state, hw)
            self.partitions[(topic.name, index)] = partition
            if partition.is_leader:
                self._announce_leadership(partition, True)

    def _drop_topic(self, name: str) -> None:
        """Forget the topic's partitions now; delete their files after any earlier drop of it."""
        keys = [key for key in self.partitions if key[0] == name]
        for key in keys:
            partition = self.partitions.pop(key)
            if partition.is_leader:
                self._announce_leadership(partition, False)
        previous = self._drops.get(name)
        task = self._run_in_background(self._delete_logs(keys, previous))
        self._drops[name] = task
        task.add_done_callback(lambda done: self._drops.pop(name) if self._drops.get(name) is done else None)

    async def _delete_logs(self, keys: list[tuple[str, int]], previous: asyncio.Task | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        for key in keys:
            try:
                await self.logs.delete_log(*key)
            except OSError:  # the dir is gone from the metadata; start-up removes what is left
                log.exception("could not delete the files of %s-%d", *key)

    async def _sync_after_drop(self, name: str) -> None:
        """Open the logs of a topic created again under a name whose old files are still going."""
        await self.wait_dropped(name)
        topic = self.metadata.topic(name)
        if topic is not None and name not in self._drops:
            self._sync_topic(topic)

    async def wait_dropped(self, name: str) -> None:
        """Return once the files of a deleted topic `name` are gone (at once if none are going)."""
        while (task := self._drops.get(name)) is not None:
            await asyncio.wait([task])

    def _run_in_background(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

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
