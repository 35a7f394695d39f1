"""The classic group coordinator: one object that wires membership, offsets and loading.

The three parts share the coordinator's groups (`group_id -> ClassicGroup`) and see each other
only through the few callables each is built with:
- `membership.py`: JoinGroup/SyncGroup/Heartbeat/LeaveGroup, rebalances, sessions and their
  timers, DescribeGroups and ListGroups.
- `offsets.py`: OffsetCommit/OffsetFetch/OffsetDelete, TxnOffsetCommit, DeleteGroups, offset expiry.
- `loading.py`: which `__consumer_offsets` partitions this broker leads and has read, so whether
  it may serve a group now (`check_coordinator`), the groups loaded and unloaded with them, and
  the transaction markers that complete their pending offsets (`on_txn_marker`).

Consumer groups of the next-generation protocol (KIP-848) are `consumer_groups`
(`consumer_group.py`), their changes written to `__consumer_offsets` before they count and loaded
with its partitions (`consumer_persistence.py`); a group id is classic or consumer, never both:
their committed offsets live in an Empty `ClassicGroup` of the same id, written and expired as
for classic groups.

`GroupCoordinator` owns what they share: the groups, the background tasks (group writes, expiry
checks, loads) and the write of a group's metadata record. It is built from `GroupConfig`, the
offsets store and a `Clock`, not from the broker; the API handlers call its methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .assignors import assignor_name
from .classic_members import ClassicMembers
from .clock import Clock
from .consumer_group import ConsumerGroupConfig, ConsumerGroups
from .consumer_persistence import ConsumerGroupWrites, TopicIdOf, TopicNameOf
from .group import ClassicGroup
from .group_types import GroupTypes
from .loading import Loader
from .membership import Membership
from .migration import MigrationPolicy
from .offsets import Offsets
from .records import GroupKey
from .share_group import ShareGroups
from .share_group_persistence import ShareGroupWrites
from .store import TOPIC as OFFSETS_TOPIC
from .store import OffsetsTopic

if TYPE_CHECKING:
    from ..cluster.partition import Partition
    from ..config import BrokerConfig


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker config values the coordinator uses (Kafka's keys, in ms)."""

    min_session_ms: int
    max_session_ms: int
    initial_delay_ms: int
    max_group_size: int
    retention_ms: int
    retention_check_ms: int
    consumer: ConsumerGroupConfig = ConsumerGroupConfig()
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> GroupConfig:
        return cls(
            min_session_ms=config["group.min.session.timeout.ms"],
            max_session_ms=config["group.max.session.timeout.ms"],
            initial_delay_ms=config["group.initial.rebalance.delay.ms"],
            max_group_size=config["group.max.size"],
            retention_ms=config["offsets.retention.minutes"] * 60_000,
            retention_check_ms=config["offsets.retention.check.interval.ms"],
            migration_policy=MigrationPolicy.parse(config["group.consumer.migration.policy"]),
            consumer=ConsumerGroupConfig(
                session_timeout_ms=config["group.consumer.session.timeout.ms"],
                heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
                assignors=tuple(assignor_name(name) for name in config["group.consumer.assignors"]),
                max_size=config["group.consumer.max.size"],
                session_timeout_bounds=(config["group.consumer.min.session.timeout.ms"],
                                        config["group.consumer.max.session.timeout.ms"]),
                heartbeat_interval_bounds=(config["group.consumer.min.heartbeat.interval.ms"],
                                           config["group.consumer.max.heartbeat.interval.ms"]),
            ),
        )



class GroupCoordinator(GroupTypes):
    def __init__(self, config: GroupConfig, store: OffsetsTopic, clock: Clock,
                 partition_count: Callable[[str], int | None] = lambda _topic: None,
                 topic_names: Callable[[], Iterable[str]] = tuple,
                 group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {},
                 topic_id: TopicIdOf = lambda _topic: None, topic_name: TopicNameOf = lambda _topic_id: None) -> None:
        self.store = store
        self.clock = clock
        self.groups: dict[str, ClassicGroup] = {}
        self._tasks: set[asyncio.Task] = set()
        # membership and offsets reach the loader through this object's check_coordinator and
        # partition_for: the loader is built after them, from membership's adopt and evict
        self.membership = Membership(
            clock, self.groups, min_session_ms=config.min_session_ms, max_session_ms=config.max_session_ms,
            initial_delay_ms=config.initial_delay_ms, max_group_size=config.max_group_size,
            check_coordinator=self.check_coordinator, store_group=self._store_group, spawn=self._spawn,
        )
        self.offsets = Offsets(
            clock, self.groups, retention_ms=config.retention_ms, retention_check_ms=config.retention_check_ms,
            check_coordinator=self.check_coordinator, serves=self.serves, partition_for=self.partition_for,
            append=store.write, append_txn=store.write_transactional,
            reset_session=self.membership.reset_session, cancel_timers=self.membership.cancel_timers,
            spawn=self._spawn,
        )
        self.consumer_groups = ConsumerGroups(clock, config.consumer, partition_count, self._is_classic,
                                              topic_names, group_configs)
        self.consumer_groups.downgrade = self._downgrade
        self.classic_members = ClassicMembers(self.consumer_groups)
        self.migration_policy = config.migration_policy
        self.consumer_writes = ConsumerGroupWrites(
            self.consumer_groups, store, partition_for=self.partition_for, check_coordinator=self.check_coordinator,
            serves=self.serves, topic_id=topic_id, topic_name=topic_name, spawn=self._spawn,
        )
        self.loader = Loader(store, clock, self.groups, adopt=self.membership.adopt, evict=self.membership.evict,
                             spawn=self._spawn, adopt_consumer_group=self.consumer_writes.adopt)
        self.offsets.consumer_group_active = lambda group_id: self.consumer_groups.active(group_id) is not None
        # share groups (KIP-932); the broker sets their settings
        self.share_groups = ShareGroups(
            clock, partition_count,
            held_by_other_type=lambda group_id: self._is_classic(group_id) or self.consumer_groups.active(group_id)
            is not None)
        self.share_writes = ShareGroupWrites(
            self.share_groups, store, clock, partition_for=self.partition_for, check_coordinator=self.check_coordinator,
            partition_count=partition_count, topic_id=topic_id, topic_name=topic_name)
        self.loader.adopt_share_group = self.share_writes.adopt
        self.delete_share_state = _keep_share_state
        self.loaded_partitions = self.loader.loads.epochs  # partition index -> leader epoch, once read
        # what the API handlers call
        self.delete_offsets = self.offsets.delete_offsets

    def start(self) -> None:
        """Rebuild the groups of every __consumer_offsets partition this broker leads; start expiry."""
        self.loader.start()
        self.offsets.start()

    def stop(self) -> None:
        self.offsets.stop()
        self.loader.stop()
        self.membership.stop()
        self.consumer_groups.stop()
        self.share_groups.stop()

    def on_leadership(self, partition: Partition, leads: bool) -> None:
        """The loader's, and the consumer groups of a `__consumer_offsets` partition this broker
        stopped leading leave memory too (their members then find the new coordinator)."""
        self.loader.on_leadership(partition, leads)
        if not leads and partition.topic == OFFSETS_TOPIC:
            self.consumer_writes.unload(lambda group_id: self.partition_for(group_id) == partition.index)
            self.share_groups.unload(lambda group_id: self.partition_for(group_id) == partition.index)

    def on_txn_marker(self, partition: Partition, producer_id: int, commit: bool) -> None:
        """A transaction marker is replicated on `partition` (a ReplicaManager marker listener): on a
        `__consumer_offsets` partition, `producer_id`'s pending offsets in its groups become
        committed (COMMIT) or go (ABORT), as Kafka's GroupCoordinator.onTransactionCompleted."""
        if partition.topic == OFFSETS_TOPIC:
            self.loader.on_txn_marker(partition.index, producer_id, commit)

    def partition_for(self, group_id: str) -> int:
        return self.loader.partition_for(group_id)

    def check_coordinator(self, group_id: str) -> None:
        """Refuse `group_id` when this broker cannot serve it now (NOT_COORDINATOR & co.)."""
        self.loader.check_coordinator(group_id)

    def serves(self, group_id: str) -> bool:
        """May this broker serve `group_id` now?"""
        return self.loader.serves(group_id)

    @property
    def loading(self) -> bool:
        """Is any partition's group state still being read (ListGroups answers LOAD_IN_PROGRESS)."""
        return self.loader.loading

    @property
    def background_tasks(self) -> frozenset[asyncio.Task]:
        """The tasks running that no request waits for: group writes, expiry checks, loads."""
        return frozenset(self._tasks)

    async def _store_group(self, group: ClassicGroup) -> None:
        await self.store.write(self.partition_for(group.group_id), [(GroupKey(group.group_id), group.to_record())])

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


async def _keep_share_state(_group_id: str, _topics: set[str]) -> None:
    """Without share coordinators (a coordinator on its own, in tests) there is no share state."""
