"""Which `__consumer_offsets` partitions' groups this coordinator holds in memory.

A group lives on one partition of `__consumer_offsets` (`partition_for`); the broker leading
that partition is its coordinator. State lives in memory and in that partition (records as
Kafka writes them): the groups of a partition this broker leads are rebuilt from its records,
in the background, at start-up or at the first request after it becomes the leader
(partition_loads.py, shared with the transaction coordinator); until then their requests get
COORDINATOR_LOAD_IN_PROGRESS (`check_coordinator`), as in Kafka. When it
stops leading a partition, that partition's groups leave memory and a later leadership loads
them afresh from the log.

KIP-848 consumer groups are rebuilt from their records too (`adopt_consumer_group`,
consumer_persistence.py), after the classic groups that hold their offsets.

Transactions: a load rebuilds committed offsets and the pending ones of transactions still open
(store.py's `LogReplay`); a COMMIT or ABORT marker replicated on a loaded partition completes its
producer's pending offsets in that partition's groups (`on_txn_marker`), and one that lands while
the partition loads is applied when the load is done (the load may not read that far).

Depends on: the `OffsetsTopic` store (partitions, leadership, reading records back); the
`Clock` (a loaded group's state timestamp); the groups dict it shares with `membership.py` and
`offsets.py` (it adds the loaded groups and removes the unloaded ones); membership's `adopt`
(a loaded group's members start their sessions) and `evict` (an unloaded group's timers stop,
its waiting requests are answered NOT_COORDINATOR); and a `spawn` for the loads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..protocol.records import NO_PRODUCER_ID
from .clock import Clock
from .consumer_records import ConsumerGroupKey, ConsumerGroupValue
from .group import ClassicGroup, CommittedOffset, GroupState, Member, TopicPartition
from .partition_loads import PartitionLoads
from .records import GroupValue, OffsetKey, OffsetValue, coordinator_partition
from .share_group_records import ShareGroupKey, ShareGroupValue
from .store import TOPIC as OFFSETS_TOPIC
from .store import LoadedEntry, OffsetsTopic

if TYPE_CHECKING:
    from ..cluster.partition import Partition

log = logging.getLogger(__name__)


class Loader:
    def __init__(self, store: OffsetsTopic, clock: Clock, groups: dict[str, ClassicGroup], *,
                 adopt: Callable[[ClassicGroup], None],
                 evict: Callable[[ClassicGroup, ErrorCode], None],
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task],
                 adopt_consumer_group: Callable[[str, dict[ConsumerGroupKey, ConsumerGroupValue]], None]
                 = lambda _group_id, _records: None) -> None:
        self.store = store
        self.clock = clock
        self.groups = groups
        self.adopt = adopt
        self.adopt_consumer_group = adopt_consumer_group
        self.adopt_share_group: Callable[[str, dict[ShareGroupKey, ShareGroupValue]], None] = (
            lambda _group_id, _records: None)
        self.evict = evict
        self.spawn = spawn
        self.loads = PartitionLoads(store, self._load, spawn)
        self._ended_while_loading: dict[int, list[tuple[int, bool]]] = {}  # index -> (producer id, commit)

    def start(self) -> None:
        """Start loading the groups of every __consumer_offsets partition this broker leads."""
        self.loads.start()

    def stop(self) -> None:
        self.loads.stop()

    def partition_for(self, group_id: str) -> int:
        return coordinator_partition(group_id, self.store.partition_count())

    def check_coordinator(self, group_id: str) -> None:
        """Refuse `group_id` when this broker cannot serve it now (PartitionLoads.check)."""
        self.loads.check(self.partition_for(group_id))

    def serves(self, group_id: str) -> bool:
        """May this broker serve `group_id` now?"""
        return self.loads.serves(self.partition_for(group_id))

    def is_loaded(self, index: int) -> bool:
        return index in self.loads.epochs

    def on_leadership(self, partition: Partition, leads: bool) -> None:
        """A `__consumer_offsets` partition this broker stopped leading: its groups leave memory
        (timers cancelled, waiting JoinGroup/SyncGroup answered NOT_COORDINATOR), so its clients
        find the new coordinator, and a later leadership loads them afresh from the log. A
        partition it starts leading is loaded at its first request (`ensure_loaded`)."""
        if leads or partition.topic != OFFSETS_TOPIC:
            return
        index = partition.index
        self.loads.unload(index)
        self._ended_while_loading.pop(index, None)
        for group_id in [g for g in self.groups if self.partition_for(g) == index]:
            self.evict(self.groups.pop(group_id), ErrorCode.not_coordinator)

    def on_txn_marker(self, index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker of `producer_id` is replicated on partition `index`: its pending
        offsets there become committed (COMMIT) or go (ABORT). A partition not loaded here holds no
        groups; a load in progress applies it when done."""
        if self.is_loaded(index):
            self._complete_txn(index, producer_id, commit)
        elif self.loads.is_loading(index):
            self._ended_while_loading.setdefault(index, []).append((producer_id, commit))

    def _complete_txn(self, index: int, producer_id: int, commit: bool) -> None:
        for group_id, group in self.groups.items():
            if producer_id in group.pending_txn_offsets and self.partition_for(group_id) == index:
                group.complete_txn(producer_id, commit)

    @property
    def loading(self) -> bool:
        """Is any partition's group state still being read (ListGroups answers LOAD_IN_PROGRESS)."""
        return self.loads.loading

    async def _load(self, index: int, _epoch: int) -> None:
        """Rebuild the groups of partition `index` from its records (markers that ended
        transactions meanwhile are applied in its last step)."""
        try:
            loaded = _LoadedGroups()
            async for entries in self.store.read_state(index):
                for entry in entries:
                    loaded.add(entry)
        except BaseException:
            self._ended_while_loading.pop(index, None)  # (the next load reads those markers in the log)
            raise
        for group_id in loaded.group_ids():
            group = group_from_record(group_id, loaded.metadata.get(group_id), self.clock.now_ms())
            group.offsets = loaded.offsets.get(group_id, {})
            group.pending_txn_offsets = loaded.pending.get(group_id, {})
            self.adopt(group)
            self.groups[group_id] = group
        for group_id, records in loaded.consumer_groups.items():
            self.adopt_consumer_group(group_id, records)
        for group_id, share_records in loaded.share_groups.items():
            self.adopt_share_group(group_id, share_records)
        for producer_id, commit in self._ended_while_loading.pop(index, []):
            self._complete_txn(index, producer_id, commit)
        log.info("loaded %s: %d groups in total", self.store.partition(index), len(self.groups))


class _LoadedGroups:
    """What a partition's records say, group by group."""

    def __init__(self) -> None:
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self.pending: dict[str, dict[int, dict[TopicPartition, CommittedOffset]]] = {}  # by producer id
        self.metadata: dict[str, GroupValue | None] = {}
        self.consumer_groups: dict[str, dict[ConsumerGroupKey, ConsumerGroupValue]] = {}  # their live records
        self.share_groups: dict[str, dict[ShareGroupKey, ShareGroupValue]] = {}

    def add(self, entry: LoadedEntry) -> None:
        key, value = entry.key, entry.value
        if isinstance(key, ConsumerGroupKey):
            if value is not None:
                self.consumer_groups.setdefault(key.group, {})[key] = value
            return
        if isinstance(key, ShareGroupKey):
            records = self.share_groups.setdefault(key.group, {})
            if value is None:
                records.pop(key, None)
            else:
                records[key] = value
            return
        if not isinstance(key, OffsetKey):
            self.metadata[key.group] = value if isinstance(value, GroupValue) else None
            return
        if not isinstance(value, OffsetValue):
            return  # a tombstone: no offset
        offset = CommittedOffset(value, entry.record_offset)
        if entry.producer_id == NO_PRODUCER_ID:
            self.offsets.setdefault(key.group, {})[(key.topic, key.partition)] = offset
        else:
            by_producer = self.pending.setdefault(key.group, {})
            by_producer.setdefault(entry.producer_id, {})[(key.topic, key.partition)] = offset

    def group_ids(self) -> list[str]:
        """Groups with metadata, committed or pending offsets (a deleted group with none is gone)."""
        ids = set(self.offsets) | set(self.pending) | {g for g, record in self.metadata.items() if record is not None}
        return sorted(ids)


def group_from_record(group_id: str, record: GroupValue | None, now_ms: int) -> ClassicGroup:
    """The group a GroupMetadataValue describes (None: a group with offsets only); Stable with its
    members, or Empty."""
    group = ClassicGroup(group_id, state_timestamp=now_ms)
    if record is None:
        return group
    group.generation = record.generation
    group.protocol_type = record.protocol_type or None
    group.protocol_name = record.protocol
    if record.state_timestamp >= 0:
        group.state_timestamp = record.state_timestamp
    for value in record.members:
        group.add(Member(
            value.member_id, value.group_instance_id, value.client_id, value.client_host,
            value.rebalance_timeout_ms, value.session_timeout_ms, group.protocol_type or "",
            [(record.protocol or "", value.subscription)], value.assignment,
        ))
    group.leader_id = record.leader if record.leader in group.members else group.leader_id
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    return group
