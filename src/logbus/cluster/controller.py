"""The controller: one broker of the cluster decides leaders and ISRs when brokers come and go.

Every broker runs a `Controller`; the one that creates the ephemeral `/controller` znode is
active, incrementing `/controller_epoch` in the same transaction. Every write it makes is a ZooKeeper
transaction that also checks `/controller_epoch`'s version, so a controller that lost its
session (and was replaced) cannot overwrite its successor's decisions. When the active one
dies its znode goes with its session; the others see `/controller` vanish and race to create it.

The active controller reconciles: whenever brokers or admin requests change it walks every
partition, whenever a topic's partition states change it walks that topic's, and writes what
the rules in `elections.py` say they should be, in batched multi-ops (a new
leader from the live ISR with a higher leader epoch when the leader died, dead followers out of
the ISR, an offline partition back when a replica of its last ISR returns). Requests from other
brokers arrive as znodes (`/admin/delete_topics/<t>`, `/admin/preferred_replica_election`,
`/admin/reassign_partitions`, `/logbus/controlled_shutdown/<id>`), as in Kafka's ZooKeeper mode.

A broker whose log dir failed lists its replicas there in `/logbus/offline_replicas` and writes
Kafka's `/log_dir_event_notification/log_dir_event_<seq>`; the controller takes (deletes) the
notification and treats each such replica as on a dead broker: a new leader from the rest of
the ISR, and the replica out of the ISR (Kafka learns the offline replicas from LeaderAndIsr
answers instead; logbus's brokers write them down).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ..config import BrokerConfig
from ..logging_config import RecurringWarning
from .elections import elect_leader, elect_preferred, elect_unclean
from .metadata import MetadataWriteError, PartitionState, TopicMetadata
from .zk_data import LOG_DIR_EVENTS, UNREACHABLE, encode_assignment, encode_json, topic_path
from .zookeeper import ZooKeeperMetadataStore

log = logging.getLogger(__name__)

OUT_OF_REACH = (*UNREACHABLE, MetadataWriteError)  # ZooKeeper gone: expected, retried when it is back

StateChange = tuple[str, int, PartitionState, PartitionState]  # topic, index, old, new

PREFERRED_ELECTION = "/admin/preferred_replica_election"
REASSIGN = "/admin/reassign_partitions"
DELETE_TOPICS = "/admin/delete_topics"
CLAIM_ATTEMPTS = 10  # reads of /controller_epoch a claim makes while other brokers keep bumping it


class Controller:
    def __init__(self, store: ZooKeeperMetadataStore, config: BrokerConfig) -> None:
        self.store = store
        self.client = store.client
        self.broker_id = store.broker_id
        self.unclean_default: bool = config["unclean.leader.election.enable"]
        self.rebalance = config["auto.leader.rebalance.enable"]
        self.rebalance_interval_s = config["leader.imbalance.check.interval.seconds"]
        self.imbalance_percentage = config["leader.imbalance.per.broker.percentage"]
        self.active = False
        self.epoch = 0
        self._epoch_version = -1
        self._pending_deletes: list[str] = []
        self._pending: set[str] | None = set()  # topics a pass must look at; None: every topic
        self._admin_requested = True  # an election or reassignment request may be waiting
        self._pass: asyncio.Task | None = None
        self._rebalancer: asyncio.TimerHandle | None = None
        self._watching = False
        self._out_of_reach = RecurringWarning(log)

    def start(self) -> None:
        self.store.add_session_listener(self._on_session)
        self.store.add_broker_listener(lambda _brokers: self.reconcile_soon())
        self.store.add_listener(lambda name, _topic: self.reconcile_soon(name))
        self._on_session(True)

    def stop(self) -> None:
        self.active = False
        if self._rebalancer is not None:
            self._rebalancer.cancel()

    # ------------------------------------------------------------------ election

    def _on_session(self, connected: bool) -> None:
        if not connected:
            self._resign("ZooKeeper session lost")
        elif self.store.controller_id == -1:
            asyncio.get_running_loop().create_task(self._try_to_become_controller())
        elif self.store.controller_id != self.broker_id:
            self._resign(f"broker {self.store.controller_id} is the controller")

    def _resign(self, why: str) -> None:
        if self.active:
            log.warning("broker %d is no longer the controller: %s", self.broker_id, why)
        self.active = False

    async def _try_to_become_controller(self) -> None:
        try:
            won = await asyncio.to_thread(self._claim)
        except OUT_OF_REACH as exc:
            self._out_of_reach("controller election put off, ZooKeeper out of reach: %r", exc)
            return
        except Exception:  # noqa: BLE001 - the next /controller change tries again
            log.exception("controller election failed")
            return
        if not won:
            return
        self.active = True
        self._admin_requested = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)
        self.reconcile_soon()  # first: the partitions the old controller's death left without a leader
        if not self._watching:
            self._watching = True
            await asyncio.to_thread(self._watch_requests)
        self._schedule_rebalance()

    def _claim(self) -> bool:
        """Become the controller (kazoo thread); False if another broker won."""
        claimed = claim_controller(self.client, self.broker_id)
        if claimed is None:
            return False
        self.epoch, self._epoch_version = claimed
        return True

    def _watch_requests(self) -> None:
        ChildrenWatch(self.client, DELETE_TOPICS, self._on_delete_requests)
        DataWatch(self.client, PREFERRED_ELECTION, lambda *_a: self.store.post(self._on_admin_request))
        DataWatch(self.client, REASSIGN, lambda *_a: self.store.post(self._on_admin_request))
        self.client.ensure_path(LOG_DIR_EVENTS)
        ChildrenWatch(self.client, LOG_DIR_EVENTS, self._on_log_dir_events)

    def _on_log_dir_events(self, children: list[str]) -> None:
        """Take Kafka's log dir event notifications (kazoo thread): the offline replicas they
        announce are in the store's view already; a pass acts on them."""
        for child in children:
            with contextlib.suppress(NoNodeError, ValueError, KeyError, TypeError):
                raw, _ = self.client.get(f"{LOG_DIR_EVENTS}/{child}")
                self.client.delete(f"{LOG_DIR_EVENTS}/{child}")
                log.info("log dir failure reported by broker %d", json.loads(raw)["broker"])
        if children:
            self.store.post(self.reconcile_soon)

    def _on_admin_request(self) -> None:
        self._admin_requested = True
        self.reconcile_soon()

    def _on_delete_requests(self, children: list[str]) -> None:
        self.store.post(self._set_pending_deletes, list(children))

    def _set_pending_deletes(self, names: list[str]) -> None:
        self._pending_deletes = names
        self.reconcile_soon()

    # ------------------------------------------------------------------ reconciling

    def reconcile_soon(self, topic: str | None = None) -> None:
        """Run a reconciling pass over `topic`'s partitions (None: every topic's, as when brokers
        come, go or start a controlled shutdown); another after it if something changes meanwhile.
        A change of one topic (thousands arrive when a broker leaves) looks at that topic only."""
        if not self.active:
            return
        if topic is None:
            self._pending = None
        elif self._pending is not None:
            self._pending.add(topic)
        if self._pass is not None and not self._pass.done():
            return
        self._pass = asyncio.get_running_loop().create_task(self._reconcile())

    async def _reconcile(self) -> None:
        while self.active and self._pending != set():
            topics, self._pending = self._pending, set()
            try:
                await self._fix_partitions(topics)  # first: every ZooKeeper round trip before it delays leaders
                await self._delete_requested_topics()
                await self._handle_admin_requests()
                await self.finish_reassignments(topics)
                await self._delete_expired_state_changes()
            except OUT_OF_REACH as exc:
                self._out_of_reach("controller pass stopped, ZooKeeper out of reach: %r", exc)
                self._put_back(topics)
                return
            except Exception:  # noqa: BLE001 - the next change triggers another pass
                log.exception("controller pass failed")
                self._put_back(topics)
                return

    def _put_back(self, topics: set[str] | None) -> None:
        """A failed pass's topics join the next pass (which the next change starts)."""
        if topics is None:
            self._pending = None
        elif self._pending is not None:
            self._pending |= topics

    async def _delete_expired_state_changes(self) -> None:
        expired = self.store.expired_state_changes()
        if expired:
            await self.store.delete_state_changes(expired)

    def _decide_again(self, topic: str) -> None:
        """A write lost a race: the next pass decides `topic` again from the fresh state."""
        if self._pending is not None:
            self._pending.add(topic)

    def _live(self) -> set[int]:
        return self.store.live_broker_ids()

    def _serving(self) -> set[int]:
        """Live brokers not in controlled shutdown: those that may lead."""
        return self._live() - self.store.shutting_down_brokers()

    def _unclean(self, topic: TopicMetadata) -> bool:
        value = topic.configs.get("unclean.leader.election.enable")
        return self.unclean_default if value is None else value.strip().lower() == "true"

    async def _fix_partitions(self, topics: set[str] | None) -> None:
        """Write what the partitions of `topics` (None: all) should be; the others are as decided.
        New leaders go first, in multi-ops of their own: they are what producers wait for, and no
        leader races them (the old one is gone). ISR-only changes (a dead follower out) follow;
        their leaders may be shrinking the same ISRs meanwhile, and a lost race costs a retry."""
        began = time.monotonic()
        all_topics = self.store.topics()
        live, serving = self._live(), self._serving()
        changes = partition_changes(all_topics, topics, live, serving, self.store.offline_replicas(), self._unclean)
        if changes:
            log.info("pass over %s: %d partition states to write, decided in %.3f s",
                     "every topic" if topics is None else f"{len(topics)} topics", len(changes),
                     time.monotonic() - began)
        elections, isr_changes = leaders_first(changes)
        await self._write_states(elections)
        await self._write_states(isr_changes)

    @staticmethod
    def _decide(state: PartitionState, live: set[int], serving: set[int], unclean: bool) -> PartitionState | None:
        """The state a partition should have given who is alive and who is shutting down."""
        if state.leader not in serving:
            elected = elect_leader(state, serving, unclean)
            if elected is not None and (elected.leader != -1 or state.leader not in live):
                return replace(elected, isr=[b for b in elected.isr if b in serving] or elected.isr)
            if state.leader in live:  # shutting down, nobody else can lead: it leads until it stops
                return None
        gone = [b for b in state.isr if b not in serving]
        if gone and len(state.isr) > len(gone):
            return replace(state, isr=[b for b in state.isr if b in serving],
                           partition_epoch=state.partition_epoch + 1)
        return None

    async def _write_states(self, changes: list[StateChange]) -> None:
        """Write a pass's partition states all at once (ZooKeeper commits them together: one at a
        time, a broker leaving 60 partitions took 3.5 s to be out of every ISR)."""
        if not changes:
            return
        began = time.monotonic()
        written = await self.store.write_states_as_controller(
            [(name, index, new, old.partition_epoch) for name, index, old, new in changes], self.epoch,
            self._epoch_version)
        log.info("wrote %d of %d partition states in %.2f s", sum(written), len(changes), time.monotonic() - began)
        for (name, index, old, new), ok in zip(changes, written, strict=True):
            if not ok:
                self._decide_again(name)  # decided from an old state: decide again from the new one
            elif new.leader != old.leader:
                log.info("%s-%d: leader %d -> %d (epoch %d), isr %s", name, index, old.leader, new.leader,
                         new.leader_epoch, new.isr)

    # ------------------------------------------------------------------ deletions

    async def _delete_requested_topics(self) -> None:
        for name in list(self._pending_deletes):
            if await asyncio.to_thread(self._delete_topic, name):
                self._pending_deletes = [n for n in self._pending_deletes if n != name]

    def _delete_topic(self, name: str) -> bool:
        """Delete the topic and its request in one transaction fenced by the controller epoch;
        True once the request is carried out (also by an earlier pass, whose deletion this one's
        list of requests did not show yet). False when the topic changed meanwhile or this
        controller was replaced: the change's watch brings the next pass."""
        request = f"{DELETE_TOPICS}/{name}"
        if self.client.exists(request) is None:
            return True
        transaction = self.client.transaction()
        transaction.check("/controller_epoch", self._epoch_version)
        for path in _tree(self.client, topic_path(name)) + _tree(self.client, f"/config/topics/{name}"):
            transaction.delete(path)
        transaction.delete(request)
        failures = [r for r in transaction.commit() if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            log.info("deleting topic %s put off: %r", name, failures[0])
            return False
        log.info("deleted topic %s", name)
        return True

    # ------------------------------------------------------------------ elections and reassignments

    async def _handle_admin_requests(self) -> None:
        if not self._admin_requested:
            return
        self._admin_requested = False
        election = await asyncio.to_thread(_take_request, self.client, PREFERRED_ELECTION)
        if election is not None:
            await self._run_elections(election)
        reassignment = await asyncio.to_thread(_take_request, self.client, REASSIGN)
        if reassignment is not None:
            for item in reassignment.get("partitions", []):
                await self._start_reassignment(item["topic"], int(item["partition"]), item.get("replicas"))

    async def _run_elections(self, request: dict[str, Any]) -> None:
        live = self._serving()
        changes: list[StateChange] = []
        for item in request.get("partitions", []):
            name, index = item["topic"], int(item["partition"])
            state = self.store.partition_state(name, index)
            if state is None:
                continue
            decided = elect_unclean(state, live) if request.get("unclean") else elect_preferred(state, live)
            if isinstance(decided, PartitionState):
                changes.append((name, index, state, decided))
        await self._write_states(changes)

    async def _start_reassignment(self, name: str, index: int, target: list[int] | None) -> None:
        topic = self.store.topics().get(name)
        if topic is None or index >= len(topic.partitions):
            return
        state = topic.partitions[index]
        if target is None:  # cancel: back to the replicas before the reassignment
            original = [b for b in state.replicas if b not in state.adding_replicas]
            new = replace(state, replicas=original, adding_replicas=[], removing_replicas=[])
        else:
            current = state.target_replicas if state.adding_replicas or state.removing_replicas else state.replicas
            original = [b for b in state.replicas if b not in state.adding_replicas]
            new = replace(state, replicas=list(target) + [b for b in original if b not in target],
                          adding_replicas=[b for b in target if b not in original],
                          removing_replicas=[b for b in original if b not in target])
            if current == list(target) and not new.adding_replicas and not new.removing_replicas:
                return
        await self._write_assignment(topic, index, new)

    @staticmethod
    def _progress_reassignment(state: PartitionState) -> PartitionState | None:
        """A reassignment whose new replicas are all in the ISR completes: the leader moves into
        the target replicas if it is leaving, the leaving replicas drop out of the ISR."""
        if not (state.adding_replicas or state.removing_replicas):
            return None
        target = state.target_replicas
        if not all(b in state.isr for b in state.adding_replicas):
            return None
        isr = [b for b in state.isr if b in target]
        leader = state.leader if state.leader in target else next((b for b in target if b in isr), -1)
        if leader == state.leader and isr == state.isr:
            return None  # the state is final; the assignment is finished in _finish_reassignments
        return replace(state, leader=leader, isr=isr, partition_epoch=state.partition_epoch + 1,
                       leader_epoch=state.leader_epoch + (leader != state.leader))

    async def finish_reassignments(self, topics: set[str] | None = None) -> None:
        """Assignments whose partition state is final: drop the old replicas from the assignment."""
        for name, topic in list(self.store.topics().items()):
            if topics is not None and name not in topics:
                continue
            for index, state in enumerate(topic.partitions):
                target = state.target_replicas
                if (state.adding_replicas or state.removing_replicas) and state.leader in target \
                        and all(b in state.isr for b in state.adding_replicas) and set(state.isr) <= set(target):
                    await self._write_assignment(topic, index, replace(
                        state, replicas=state.target_replicas, adding_replicas=[], removing_replicas=[]))

    async def _write_assignment(self, topic: TopicMetadata, index: int, state: PartitionState) -> None:
        partitions = [state if i == index else p for i, p in enumerate(topic.partitions)]
        try:
            await asyncio.to_thread(self._set_assignment, topic, partitions)
        except (BadVersionError, RuntimeError):
            self._decide_again(topic.name)

    def _set_assignment(self, topic: TopicMetadata, partitions: list[PartitionState]) -> None:
        _, stat = self.client.get(topic_path(topic.name))
        transaction = self.client.transaction()
        transaction.check("/controller_epoch", self._epoch_version)
        transaction.set_data(topic_path(topic.name), encode_assignment(topic.topic_id, partitions),
                             version=stat.version)
        results = transaction.commit()
        if any(isinstance(r, Exception) for r in results):
            raise RuntimeError(f"assignment of {topic.name} changed or controller fenced")

    # ------------------------------------------------------------------ leader balance

    def _schedule_rebalance(self) -> None:
        if not self.rebalance or not self.active:
            return
        loop = asyncio.get_running_loop()
        self._rebalancer = loop.call_later(self.rebalance_interval_s, self._rebalance_now)

    def _rebalance_now(self) -> None:
        if not self.active:
            return
        asyncio.get_running_loop().create_task(self._rebalance())
        self._schedule_rebalance()

    async def _rebalance(self) -> None:
        """Kafka's auto leader rebalance: per broker, when more than leader.imbalance.per.broker.percentage
        of the partitions it prefers are led elsewhere, elect it where it is in the ISR."""
        live = self._serving()
        changes: list[StateChange] = []
        preferred_of: dict[int, list[tuple[str, int, PartitionState]]] = {}
        for name, topic in self.store.topics().items():
            for index, state in enumerate(topic.partitions):
                if state.target_replicas:
                    preferred_of.setdefault(state.target_replicas[0], []).append((name, index, state))
        for broker, partitions in preferred_of.items():
            elsewhere = [p for p in partitions if p[2].leader != broker]
            if broker not in live or len(elsewhere) * 100 <= self.imbalance_percentage * len(partitions):
                continue
            for name, index, state in elsewhere:
                decided = elect_preferred(state, live)
                if isinstance(decided, PartitionState):
                    changes.append((name, index, state, decided))
        await self._write_states(changes)


def partition_changes(all_topics: dict[str, TopicMetadata], topics: set[str] | None, live: set[int],
                      serving: set[int], offline: dict[int, frozenset[tuple[str, int]]],
                      unclean: Callable[[TopicMetadata], bool]) -> list[StateChange]:
    """The state changes the partitions of `topics` (None: all) need, given the live brokers, those
    that may lead (`serving`) and the replicas in failed log dirs (`offline`)."""
    changes: list[StateChange] = []
    names = all_topics.keys() if topics is None else topics & all_topics.keys()
    for name in names:
        topic = all_topics[name]
        topic_unclean = unclean(topic)
        for index, state in enumerate(topic.partitions):
            lost = {broker for broker, keys in offline.items() if (name, index) in keys} if offline else set()
            new_state = Controller._decide(state, live - lost, serving - lost, topic_unclean) if lost \
                else Controller._decide(state, live, serving, topic_unclean)
            if new_state is None:
                new_state = Controller._progress_reassignment(state)
            if new_state is not None:
                changes.append((name, index, state, new_state))
    return changes


def claim_controller(client: Any, broker_id: int) -> tuple[int, int] | None:
    """Create /controller and bump /controller_epoch in one transaction, as Kafka's
    registerControllerAndIncrementControllerEpoch does (two round trips before a new controller
    can act, not three): the new epoch and /controller_epoch's version, None if another broker won."""
    value = encode_json({"version": 2, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))})
    for _attempt in range(CLAIM_ATTEMPTS):
        try:
            raw, stat = client.get("/controller_epoch")
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                client.create("/controller_epoch", b"0")
            continue
        transaction = client.transaction()
        transaction.create("/controller", value, ephemeral=True)
        transaction.set_data("/controller_epoch", str(int(raw) + 1).encode(), version=stat.version)
        created, bumped = transaction.commit()
        if isinstance(created, NodeExistsError):
            return None
        if not isinstance(bumped, Exception):
            return int(raw) + 1, bumped.version
        # another controller bumped the epoch meanwhile (and is gone again): read it again
    return None  # the next change of /controller tries again


def leaders_first(changes: list[StateChange]) -> tuple[list[StateChange], list[StateChange]]:
    """`changes` split into those that move a leadership and those that change the ISR only."""
    elections = [change for change in changes if change[3].leader != change[2].leader]
    return elections, [change for change in changes if change[3].leader == change[2].leader]


def _tree(client: Any, path: str) -> list[str]:
    """`path` and everything under it, deepest first (for deleting in one transaction)."""
    try:
        children = client.get_children(path)
    except NoNodeError:
        return []
    paths: list[str] = []
    for child in children:
        paths += _tree(client, f"{path}/{child}")
    return paths + [path]


def _take_request(client: Any, path: str) -> dict[str, Any] | None:
    """Read and delete an admin request znode (None when there is none)."""
    try:
        raw, stat = client.get(path)
        client.delete(path, version=stat.version)
    except (NoNodeError, BadVersionError):
        return None
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        log.warning("ignoring an unreadable request in %s", path)
        return None
