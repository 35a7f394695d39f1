"""The broker's view of the cluster in ZooKeeper: brokers, topics with their partition states,
the controller, and the brokers in controlled shutdown or with offline replicas.

The broker reads a view held in memory, kept current by watches. kazoo runs watch callbacks on
its own thread, one after another; they read what changed there and hand the result to the event
loop (`post`), where the view changes and the store's listeners are called.

A topic enters the view once its assignment and every partition's state exist (the store
writes both in one transaction; see `zookeeper`). A partition's `partition_epoch` is its state
znode's version.

State changes: brokers do not watch the partition-state znodes (one watch event per partition
and broker when a controller moves thousands). Every write of states creates, in its transaction,
one `/logbus/state_changes/change_<seq>` listing them; brokers read each once and apply its
states per topic. The controller deletes those older than STATE_CHANGE_EXPIRATION_S; a broker
that missed one (deleted before it read it, or while it was disconnected) reads every topic again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from .metadata import BrokerInfo, PartitionKey, PartitionState, TopicMetadata
from .zk_data import (
    CONTROLLED_SHUTDOWN,
    OFFLINE_REPLICAS,
    STATE_CHANGES,
    StateEntry,
    decode_broker,
    decode_state,
    decode_state_changes,
    state_path,
    topic_path,
)
from .zk_reads import Read, SerialDataWatch, ZnodeReader

log = logging.getLogger(__name__)

STATE_CHANGE_EXPIRATION_S = 60.0  # the controller deletes older state changes
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
Post = Callable[..., None]  # runs `callback(*args)` on the event loop, from a kazoo thread


class ClusterView:
    """Brokers, topics, the controller and the brokers in controlled shutdown, as ZooKeeper's
    watches show them; every change is applied on the event loop, then announced."""

    def __init__(self, client: KazooClient, post: Post, changed: Callable[[], None],
                 announce: Callable[[str, TopicMetadata | None], None], announce_brokers: Callable[[], None],
                 controller_changed: Callable[[], None],
                 set_offline_replicas: Callable[[dict[int, frozenset[PartitionKey]]], None]) -> None:
        self._client = client
        self._znodes = ZnodeReader(client)
        self._post = post
        self._view_changed = changed
        self._announce = announce
        self._announce_brokers = announce_brokers
        self._controller_changed = controller_changed
        self._set_offline_replicas = set_offline_replicas
        self.controller_id = -1
        self.topics: dict[str, TopicMetadata] = {}
        self.brokers: dict[int, BrokerInfo] = {}
        self.shutting_down: frozenset[int] = frozenset()
        self.watched_topics: set[str] = set()
        self._states_read: list[StateEntry] = []  # read on kazoo's threads, not yet applied
        self._states_read_lock = threading.Lock()
        self._seen_state_changes: dict[str, float] = {}  # state change znodes read: their ctime (s)
        self._arriving: dict[str, _Arrival] | None = None  # topics whose watches are being set (kazoo thread)

    def watch(self) -> None:
        """Read the current state into the view and watch for changes (kazoo thread)."""
        ChildrenWatch(self._client, "/brokers/ids", self._on_broker_ids)
        self._seen_state_changes = dict.fromkeys(self._client.get_children(STATE_CHANGES), time.time())
        ChildrenWatch(self._client, STATE_CHANGES, self._on_state_changes)  # before the topics' reads: none missed
        ChildrenWatch(self._client, "/brokers/topics", self._on_topic_names)
        DataWatch(self._client, "/controller", self._on_controller)
        ChildrenWatch(self._client, CONTROLLED_SHUTDOWN, self._on_shutdown_requests)

    def _on_broker_ids(self, children: list[str]) -> None:
        brokers = {}
        for child in children:
            try:
                raw, _ = self._client.get(f"/brokers/ids/{child}")
                brokers[int(child)] = decode_broker(int(child), raw)
            except (NoNodeError, ValueError, KeyError, TypeError):  # ConfigError is a ValueError
                continue
        self._post(self._apply_brokers, brokers)

    def _apply_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        if brokers == self.brokers:
            return
        self.brokers = brokers
        self._view_changed()
        self._announce_brokers()

    def _on_shutdown_requests(self, children: list[str]) -> None:
        self._post(self._apply_shutting_down, frozenset(int(c) for c in children if c.isdigit()))

    def _apply_shutting_down(self, ids: frozenset[int]) -> None:
        if ids != self.shutting_down:
            self.shutting_down = ids
            self._announce_brokers()

    def _on_controller(self, data: bytes | None, _stat: object, *_event: object) -> None:
        controller = -1
        if data:
            try:
                controller = int(json.loads(data)["brokerid"])
            except (ValueError, KeyError, TypeError):
                controller = -1
        self._post(self._apply_controller, controller)

    def _apply_controller(self, controller: int) -> None:
        self.controller_id = controller
        self._view_changed()
        self._controller_changed()

    def _on_topic_names(self, children: list[str]) -> None:
        """Watch the topics new in `children` and read them all together (kazoo thread).

        Setting a topic's two watches reads its assignment and configs; their states are then read
        for every new topic at once (one multiRead), not one topic after another: per topic, the
        five round trips in a row (two of them reading again what a watch had just read) on this
        one thread, each waiting for the loop's hold on the GIL to end, were what paced a
        10,000-partition CreateTopics (topics entered the view at ~2 a second)."""
        arriving: dict[str, _Arrival] = {}
        self._arriving = arriving
        try:
            for name in children:
                if name not in self.watched_topics:
                    self.watched_topics.add(name)
                    arriving[name] = _Arrival()
                    SerialDataWatch(self._client, f"/config/topics/{name}",
                                    lambda data, _stat, event, n=name: self._on_topic_configs(n, data, event))
                    SerialDataWatch(self._client, topic_path(name),
                                    lambda data, _stat, event, n=name: self._on_topic_data(n, data, event))
        finally:
            self._arriving = None
        self._read_arrivals(arriving)
        for name in self.watched_topics - set(children):
            self.watched_topics.discard(name)
            self._post(self._apply_topic, name, None)

    def _on_topic_configs(self, name: str, data: bytes | None, event: WatchedEvent | None) -> bool:
        """A topic's configs changed (kazoo thread): read the topic again. When the watch is
        being set (no event), its read is kept for the topic's first read."""
        if event is None:
            if self._arriving is not None and name in self._arriving:
                self._arriving[name].configs = data
            return name in self.watched_topics
        return self._refresh_topic(name)

    def _on_topic_data(self, name: str, data: bytes | None, event: WatchedEvent | None) -> bool:
        """A topic's assignment, as its watch read it (kazoo thread): read it whole, together with
        the other new topics when the watch is being set."""
        if event is None and data is not None and self._arriving is not None and name in self._arriving:
            self._arriving[name].assignment = data
            return True
        return self._refresh_topic(name)

    def _read_arrivals(self, arriving: dict[str, _Arrival]) -> None:
        """The new topics whose watches read them, with all their states in one read; each is
        handed to the loop (one not readable whole yet enters with its next change)."""
        assignments = {name: json.loads(a.assignment) for name, a in arriving.items() if a.assignment is not None}
        paths = {name: topic_paths for name, assignment in assignments.items()
                 if (topic_paths := _state_paths(name, assignment)) is not None}
        reads = self._znodes.read([path for topic_paths in paths.values() for path in topic_paths])
        at = 0
        for name, topic_paths in paths.items():
            states = reads[at:at + len(topic_paths)]
            at += len(topic_paths)
            metadata = self._topic_from(name, assignments[name], states, arriving[name].configs)
            if metadata is not None:
                self._post(self._apply_topic, name, metadata)

    def _refresh_topic(self, name: str) -> bool:
        """Read topic `name` whole and hand it to the loop (kazoo thread). False stops the watch."""
        if name not in self.watched_topics:
            return False
        try:
            raw, _ = self._client.get(topic_path(name))
        except NoNodeError:
            self._post(self._apply_topic, name, None)
            return True
        metadata = self._read_topic(name, json.loads(raw))
        if metadata is not None:
            self._post(self._apply_topic, name, metadata)
        return True

    def _read_topic(self, name: str, assignment: dict[str, Any]) -> TopicMetadata | None:
        """The topic with every partition's state, None while a state is missing. The states are
        read all at once, in one multiRead (`zk_reads`; one round trip per partition, one after
        another, took a 100-partition topic ~100 ms to enter the view, and one pipelined get
        each cost a broker seconds of CPU at 10,000 partitions); their changes arrive through
        STATE_CHANGES."""
        paths = _state_paths(name, assignment)
        if paths is None:
            return None
        reads = self._znodes.read(paths)
        try:
            configs, _ = self._client.get(f"/config/topics/{name}")
        except NoNodeError:
            configs = None
        return self._topic_from(name, assignment, reads, configs)

    @staticmethod
    def _topic_from(name: str, assignment: dict[str, Any], reads: list[Read],
                    configs_raw: bytes | None) -> TopicMetadata | None:
        """The topic from its assignment, its states as read and its config znode (None: none)."""
        adding = assignment.get("adding_replicas") or {}
        removing = assignment.get("removing_replicas") or {}
        partitions = []
        for index, read in enumerate(reads):
            if isinstance(read, NoNodeError):
                return None  # not fully created yet (or being deleted): not in the view
            if isinstance(read, Exception):
                raise read
            raw, stat = read
            leader, leader_epoch, isr = decode_state(raw)
            partitions.append(PartitionState(
                leader, leader_epoch, list(assignment["partitions"][str(index)]), isr, stat.version,
                list(adding.get(str(index), [])), list(removing.get(str(index), [])),
            ))
        configs: dict[str, str] = {}
        if configs_raw:
            configs = {k: str(v) for k, v in json.loads(configs_raw).get("config", {}).items()}
        topic_id = assignment.get("topic_id") or str(uuid.UUID(int=0))
        return TopicMetadata(name, topic_id, partitions, configs, name in INTERNAL_TOPICS)

    def _on_state_changes(self, children: list[str]) -> None:
        """New state changes (kazoo thread): read each once, all at once (one round trip after
        another, a thousand leaders' ISR changes held up the /controller watch behind them for
        seconds), and queue their states for the loop in order. One the controller deleted before
        it was read (this broker far behind) makes every topic be read again."""
        unseen = [child for child in sorted(children) if child not in self._seen_state_changes]
        reads = [self._client.get_async(f"{STATE_CHANGES}/{child}") for child in unseen]
        for child, read in zip(unseen, reads, strict=True):
            self._seen_state_changes[child] = time.time()
            try:
                raw, stat = read.get()
                entries = decode_state_changes(raw)
            except NoNodeError:
                log.warning("state change %s deleted before this broker read it; reading every topic", child)
                self.refresh_all_topics()
                continue
            except (ValueError, KeyError, TypeError, IndexError):
                log.warning("ignoring an unreadable state change %s", child)
                continue
            self._seen_state_changes[child] = stat.ctime / 1000
            self._queue_states(entries)
        current = set(children)
        self._seen_state_changes = {c: t for c, t in self._seen_state_changes.items() if c in current}

    def refresh_all_topics(self) -> None:
        """Read every topic again (kazoo or worker thread): after changes may have been missed."""
        for name in list(self.watched_topics):
            self._refresh_topic(name)

    def _queue_states(self, entries: list[StateEntry]) -> None:
        """Hand states read to the loop, which applies those queued meanwhile together."""
        if not entries:
            return
        with self._states_read_lock:
            posted = bool(self._states_read)
            self._states_read.extend(entries)
        if not posted:
            self._post(self._apply_states_read)

    def expired_state_changes(self) -> list[str]:
        """State changes older than STATE_CHANGE_EXPIRATION_S, for the controller to delete."""
        oldest_kept = time.time() - STATE_CHANGE_EXPIRATION_S
        return sorted(c for c, created in list(self._seen_state_changes.items()) if created < oldest_kept)

    def _apply_states_read(self) -> None:
        """Apply every partition state read since the last call, each topic once: a controller
        moving thousands of leaders makes thousands of reads, and one topic copy (and one
        announcement) per read cost O(partitions²). Reading the whole topic again on every change
        cost a 50-partition topic 2,500 reads when a broker left it."""
        began = time.monotonic()
        with self._states_read_lock:
            states, self._states_read = self._states_read, []
        by_topic: dict[str, list[StateEntry]] = {}
        for entry in states:
            by_topic.setdefault(entry[0], []).append(entry)
        for name, changes in by_topic.items():
            current = self.topics.get(name)
            if current is not None:  # else the topic's own read brings it
                partitions = _with_states(current.partitions, changes)
                if partitions is not None:
                    self._apply_topic(name, replace(current, partitions=partitions))
        log.debug("applied %d partition states of %d topics in %.3f s", len(states), len(by_topic),
                  time.monotonic() - began)

    def _apply_topic(self, name: str, metadata: TopicMetadata | None) -> None:
        current = self.topics.get(name)
        if metadata == current:
            return
        if metadata is None:
            self.topics = {n: t for n, t in self.topics.items() if n != name}
        else:
            if current is not None and _older(metadata, current):
                return  # a stale read overtaken by a newer one
            self.topics = {**self.topics, name: metadata}
        self._view_changed()
        self._announce(name, metadata)

    def apply_written_states(self, topic: str, states: dict[int, PartitionState]) -> None:
        """Partition states this broker wrote, into the view at once (one announcement for the
        topic), unless their watches brought them or later ones already."""
        latest = self.topics.get(topic)
        if latest is None:
            return
        newer = {i: s for i, s in states.items()
                 if i < len(latest.partitions) and latest.partitions[i].partition_epoch < s.partition_epoch}
        if newer:
            partitions = [newer.get(i, p) for i, p in enumerate(latest.partitions)]
            self._apply_topic(topic, replace(latest, partitions=partitions))

    def watch_offline_replicas(self) -> None:
        self._client.ensure_path(OFFLINE_REPLICAS)
        ChildrenWatch(self._client, OFFLINE_REPLICAS, self._on_offline_replicas)

    def _on_offline_replicas(self, children: list[str]) -> None:
        offline: dict[int, frozenset[PartitionKey]] = {}
        for child in children:
            try:
                raw, _ = self._client.get(f"{OFFLINE_REPLICAS}/{child}")
                listed = json.loads(raw)["partitions"]
                offline[int(child.split("-")[0])] = frozenset((str(p["topic"]), int(p["partition"])) for p in listed)
            except (NoNodeError, ValueError, KeyError, TypeError):
                continue
        self._post(self._set_offline_replicas, offline)


def _with_states(partitions: list[PartitionState], changes: list[StateEntry]) -> list[PartitionState] | None:
    """`partitions` with the newer of the states read in (by znode version); None when none is newer."""
    updated: list[PartitionState] | None = None
    for _name, index, leader, leader_epoch, isr, version in changes:
        if index >= len(partitions) or version <= (updated or partitions)[index].partition_epoch:
            continue
        updated = updated or list(partitions)
        updated[index] = replace(updated[index], leader=leader, leader_epoch=leader_epoch, isr=list(isr),
                                 partition_epoch=version)
    return updated


def _older(new: TopicMetadata, current: TopicMetadata) -> bool:
    """A read of a topic that is older than the view's (some partition's state version is lower)."""
    if new.topic_id != current.topic_id:
        return False
    return len(new.partitions) < len(current.partitions) or any(
        n.partition_epoch < c.partition_epoch for n, c in zip(new.partitions, current.partitions, strict=False)
    )


@dataclass(slots=True)
class _Arrival:
    """A topic new to the view: its assignment and config znodes as its watches read them."""

    assignment: bytes | None = None
    configs: bytes | None = None


def _state_paths(name: str, assignment: dict[str, Any]) -> list[str] | None:
    """The state znodes of the topic's partitions; None while its assignment is incomplete."""
    partitions = assignment.get("partitions", {})
    if any(str(i) not in partitions for i in range(len(partitions))):
        return None
    return [state_path(name, i) for i in range(len(partitions))]
