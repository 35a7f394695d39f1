"""Cluster metadata in ZooKeeper, in Kafka's ZooKeeper-mode layout, through kazoo.

`ZooKeeperMetadataStore` is the `MetadataStore` of a cluster, composed of three parts, as Kafka's
ZooKeeper mode separates them:

- `zk_data` (znode paths and codecs) and `zk_writes` (the writes, each a blocking call on the
  KazooClient run in a worker thread, so no ZooKeeper call blocks the event loop);
- `zk_view.ClusterView`: the watched view of brokers, topics, partition states and the controller;
- `zk_watchers`: the change watchers of ACLs, SCRAM credentials, quotas and entity configs.

The store owns the session (connection, broker registration, reconnections), writes through
`zk_writes`, and waits until its own view shows what it wrote.

A topic enters the view once its assignment and every partition's state exist: the broker
that creates a topic writes both in one ZooKeeper transaction (Kafka's admin path wrote the
assignment and left the states to the controller; one transaction means no half-created topic
is ever seen). Every partition-state write is conditional on the znode's version, which is the
state's `partition_epoch`; a write that loses a race raises StalePartitionStateError and the
writer decides again from the fresh state that a state change brings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kio.schema.errors import ErrorCode

from ..security.acl import AclBinding, InvalidAclError, ResourcePattern
from ..security.quotas import QuotaChanges, QuotaConfigs, apply_quota_changes, sanitize
from ..security.scram import CredentialChanges, UserCredentials
from ..security.scram import apply_changes as apply_credential_changes
from .assignment import assign_replicas
from .metadata import (
    NO_LEADER,
    BrokerIdInUseError,
    BrokerInfo,
    IsrChange,
    MetadataStore,
    MetadataWriteError,
    PartitionKey,
    PartitionState,
    StalePartitionStateError,
    TopicMetadata,
    UnknownTopicError,
    runs_to_completion,
)
from .zk_data import CONTROLLED_SHUTDOWN, UNREACHABLE, decode_broker, encode_broker
from .zk_view import ClusterView
from .zk_watchers import AclWatcher, EntityConfigWatcher
from .zk_writes import (
    PRODUCER_ID_BLOCK,
    StateWrite,
    claim_producer_id_block,
    delete_state_changes,
    prepare_layout,
    write_acls,
    write_admin_request,
    write_client_quotas,
    write_controller_states,
    write_entity_configs,
    write_new_topic,
    write_offline_replicas,
    write_partitions,
    write_scram_credentials,
    write_states,
    write_topic_configs,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

CHANGE_TIMEOUT_S = 30.0  # how long a change waits to show in this broker's view
# A write ZooKeeper did not take (out of reach) or that did not show in time: Kafka's answer
# when its ZooKeeper client times out; clients retry it.
TIMED_OUT = ErrorCode.request_timed_out
RECONNECT_MAX_DELAY_S = 1.0  # longest pause between two attempts to reach ZooKeeper again
NO_SESSION = 0
REGISTRATION_WAIT_SLACK_S = 2.0  # beyond the session timeout: ZooKeeper expires sessions on its tick


def reconnect_policy() -> KazooRetry:
    """Reconnect for ever, at most RECONNECT_MAX_DELAY_S apart. kazoo's default doubles its pause
    up to an hour: after a 15 s outage brokers tried again only seconds after ZooKeeper was back,
    and a session that could have been kept expired meanwhile."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RECONNECT_MAX_DELAY_S)


class ZooKeeperMetadataStore(MetadataStore):
    """The cluster's metadata in ZooKeeper; see the module docstring for its parts."""

    def __init__(self, connect: str, broker_id: int, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int | None = None) -> None:
        super().__init__()
        self.connect = connect
        self.broker_id = broker_id
        self.cluster_id = ""
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        self.client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000,
                                  connection_retry=reconnect_policy())
        self._loop: asyncio.AbstractEventLoop | None = None
        self._view = ClusterView(self.client, self.post, self._view_changed, self._announce, self._announce_brokers,
                                 self._controller_changed, self._set_offline_replicas)
        self._acl_watcher = AclWatcher(self.client, self.post, self.acls, self._apply_acls, self._view_changed)
        self._config_watcher = EntityConfigWatcher(self.client, self.post, self._apply_entity_config,
                                                   self._view_changed)
        self._changed = asyncio.Event()
        self._registration: BrokerInfo | None = None
        self._next_producer_id = 0
        self._producer_id_limit = 0  # exclusive end of the block in hand
        self._session_listeners: list[Callable[[bool], None]] = []
        self._closing = False

    # ------------------------------------------------------------------ start-up and the view

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        warnings.filterwarnings("ignore", "No chroot path exists", UserWarning)  # created below
        try:
            await asyncio.to_thread(self.client.start, self.connection_timeout_s)
        except KazooTimeoutError:
            await asyncio.to_thread(self.client.stop)
            raise TimeoutError(f"no ZooKeeper session within {self.connection_timeout_s:g} s") from None
        self.client.add_listener(self._on_connection_state)
        self.cluster_id = await asyncio.to_thread(prepare_layout, self.client)
        await asyncio.to_thread(self._install_watches)
        self._apply_acls(await asyncio.to_thread(self._acl_watcher.read_all_acls))

    def _install_watches(self) -> None:
        """Read the current state into the view and watch for changes (kazoo thread)."""
        self._view.watch()
        self._acl_watcher.watch()
        self._config_watcher.watch()
        self._view.watch_offline_replicas()

    def post(self, callback: Callable[..., None], *args: object) -> None:
        """Run `callback(*args)` on the event loop (from a kazoo thread)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback, *args)

    def _view_changed(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _see(self, what: str, written: Callable[[], bool]) -> None:
        """After a write: wait until the view shows it (`written()`), else MetadataWriteError."""
        if not await self.wait_for(written):
            raise MetadataWriteError(f"{what} written but not seen within {CHANGE_TIMEOUT_S} s", TIMED_OUT)

    async def wait_for(self, condition: Callable[[], bool], timeout: float = CHANGE_TIMEOUT_S) -> bool:
        """Wait until `condition()` holds for the view (True) or `timeout` passes (False)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not condition():
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            try:
                async with asyncio.timeout(left):
                    await self._changed.wait()
            except TimeoutError:
                return condition()
        return True

    @property
    def controller_id(self) -> int:
        return self._view.controller_id

    def _controller_changed(self) -> None:
        for listener in self._session_listeners:
            listener(True)

    def shutting_down_brokers(self) -> frozenset[int]:
        return self._view.shutting_down

    def expired_state_changes(self) -> list[str]:
        """State changes old enough for the controller to delete (see `ClusterView`)."""
        return self._view.expired_state_changes()

    async def delete_state_changes(self, children: list[str]) -> None:
        """Delete state changes every broker has had time to read (one multi-op per batch)."""
        await self._write_in_thread(delete_state_changes, self.client, children)

    # ------------------------------------------------------------------ configs, credentials, quotas and ACLs

    def scram_credentials(self) -> UserCredentials:
        return self._config_watcher.users

    @runs_to_completion
    async def alter_scram_credentials(self, changes: CredentialChanges) -> None:
        await self._write_in_thread(write_scram_credentials, self.client, changes)
        expected = {user: apply_credential_changes(self.scram_credentials(), changes).get(user, {}) for user in changes}
        await self._see("credentials",
                        lambda: all(self.scram_credentials().get(u, {}) == c for u, c in expected.items()))

    @runs_to_completion
    async def set_entity_configs(self, entity: str, configs: dict[str, str]) -> None:
        kind, _, name = entity.partition("/")
        znode = sanitize(name) if name.strip(".") else name.replace(".", "%2E")  # "." and ".." are no znode names
        await self._write_in_thread(write_entity_configs, self.client,
                                    {f"{kind}/{znode}": lambda _current: dict(configs)})
        await self._see(f"configs of {entity}", lambda: self._entity_configs.get(entity, {}) == configs)

    def client_quotas(self) -> QuotaConfigs:
        return self._config_watcher.quotas

    @runs_to_completion
    async def alter_client_quotas(self, changes: QuotaChanges) -> None:
        await self._write_in_thread(write_client_quotas, self.client, changes)
        expected = apply_quota_changes(self.client_quotas(), changes)
        await self._see("quotas", lambda: all(self.client_quotas().get(e, {}) == expected.get(e, {}) for e in changes))

    def check_acl_pattern(self, pattern: ResourcePattern) -> None:
        """The name is one znode: no `/`, not `.` or `..`, no NUL (Kafka's layout has no escaping)."""
        if "/" in pattern.name or "\0" in pattern.name or pattern.name in (".", ".."):
            raise InvalidAclError(f"Resource name {pattern.name!r} cannot be stored as a ZooKeeper node")

    @runs_to_completion
    async def alter_acls(self, added: list[AclBinding], removed: list[AclBinding]) -> None:
        """Write each changed resource's ACLs conditionally, announce them, and wait until this
        broker's view has taken the announcements."""
        patterns = {b.pattern for b in [*added, *removed]}
        notifications = []
        for pattern in patterns:
            mine = [b for b in added if b.pattern == pattern], [b for b in removed if b.pattern == pattern]
            notification = await self._write_in_thread(write_acls, self.client, pattern, *mine)
            if notification is not None:
                notifications.append(notification)
        await self._see("ACLs", lambda: all(n in self._acl_watcher.seen_acl_changes for n in notifications))

    # ------------------------------------------------------------------ session

    def add_session_listener(self, listener: Callable[[bool], None]) -> None:
        """`listener(True)` when the session (re)connects or the controller changes, `(False)` when lost."""
        self._session_listeners.append(listener)

    def _on_connection_state(self, state: str) -> None:
        """kazoo's state changes (its thread): SUSPENDED when the connection drops (the session
        lives on for its timeout), LOST when the session expired, CONNECTED when back."""
        if state == KazooState.SUSPENDED and not self._closing:
            log.warning("ZooKeeper connection lost; reconnecting (the session survives %g s without one)",
                        self.session_timeout_ms / 1000)
        elif state == KazooState.LOST:
            self.post(self._session_lost)
        elif state == KazooState.CONNECTED:
            log.info("ZooKeeper connected, session 0x%x", self.session_id)
            self.post(self._session_connected)

    def _session_lost(self) -> None:
        if self._closing:
            return
        log.warning("ZooKeeper session lost; this broker is not the controller until it reconnects")
        for listener in self._session_listeners:
            listener(False)

    def _session_connected(self) -> None:
        if self._closing:
            return
        if self._view.watched_topics:  # state changes may have been deleted meanwhile
            self._spawn(asyncio.to_thread(self._view.refresh_all_topics))
        if self._registration is None:
            return
        self._spawn(self._reregister())

    async def _reregister(self) -> None:
        """After a new session: the ephemeral registration is gone; write it again."""
        try:
            await self._register(self._registration)
        except BrokerIdInUseError as exc:
            log.error("could not register again in ZooKeeper: %s", exc)
        except UNREACHABLE as exc:
            log.warning("could not register again in ZooKeeper, retried at the next reconnection: %r", exc)
        except Exception:  # noqa: BLE001 - retried at the next reconnection
            log.exception("could not register again in ZooKeeper")
        for listener in self._session_listeners:
            listener(True)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    @property
    def session_id(self) -> int:
        return self.client.client_id[0] if self.client.client_id else 0

    # ------------------------------------------------------------------ brokers

    async def register_broker(self, broker: BrokerInfo) -> None:
        """Write this broker's ephemeral registration; BrokerIdInUseError when another live broker has the id."""
        await self._register(broker)
        self._registration = broker
        await self.wait_for(lambda: broker.broker_id in self._view.brokers, 10)

    async def _register(self, broker: BrokerInfo) -> None:
        """Create the registration. One with this broker's own endpoints held by another session
        is this broker's from before a crash (killed, restarted before ZooKeeper expired that
        session): wait up to the session timeout for it to go, then register (Kafka refuses to
        start). One with other endpoints is another live broker: BrokerIdInUseError."""
        loop = asyncio.get_running_loop()
        waited_s = self.session_timeout_ms / 1000 + REGISTRATION_WAIT_SLACK_S
        deadline = loop.time() + waited_s
        path = f"/brokers/ids/{broker.broker_id}"
        logged = NO_SESSION
        while (owner := await asyncio.to_thread(self._create_registration, broker)) is not None:
            left = deadline - loop.time()
            if left <= 0:
                raise BrokerIdInUseError(f"broker id {broker.broker_id} is still registered by session 0x{owner:x} "
                                         f"after {waited_s:g} s in {self.connect}")
            if owner not in (logged, NO_SESSION):
                logged = owner
                log.warning("broker id %d is registered with this broker's endpoints by session 0x%x, not ours: "
                            "an earlier run of this broker (a crash?); waiting up to %.1f s for ZooKeeper to "
                            "expire it", broker.broker_id, owner, left)
            await self._changed_or_gone(path, left)

    def _create_registration(self, broker: BrokerInfo) -> int | None:
        """Create the ephemeral registration (worker thread); None when it is ours now, the owner
        session when this broker's own registration is held by another one."""
        path = f"/brokers/ids/{broker.broker_id}"
        try:
            self.client.create(path, encode_broker(broker), ephemeral=True, makepath=True)
            return None
        except NodeExistsError:
            try:
                raw, stat = self.client.get(path)
            except NoNodeError:
                return NO_SESSION  # gone meanwhile: try again
        if stat.ephemeralOwner == self.session_id:
            return None
        try:
            registered = decode_broker(broker.broker_id, raw)
        except (ValueError, KeyError, TypeError):
            registered = None
        if registered is None or registered.endpoints != broker.endpoints:
            raise BrokerIdInUseError(
                f"broker id {broker.broker_id} is registered by another live broker in {self.connect}")
        return stat.ephemeralOwner

    async def _changed_or_gone(self, path: str, timeout: float) -> None:
        """Wait until `path` changes or is deleted (a watch), at most `timeout` seconds."""
        changed = asyncio.Event()
        if await asyncio.to_thread(self.client.exists, path, lambda _event: self.post(changed.set)) is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await changed.wait()

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._view.brokers.values(), key=lambda b: b.broker_id)

    def live_broker_ids(self) -> set[int]:
        return set(self._view.brokers)

    def topics(self) -> dict[str, TopicMetadata]:
        return self._view.topics

    async def _write_in_thread(self, function: Callable[..., T], *args: object, **kwargs: object) -> T:
        """Run a blocking ZooKeeper write in a thread. ZooKeeper out of reach (connection lost,
        session expired, timeout) is a MetadataWriteError with REQUEST_TIMED_OUT, the store's one
        failure for callers, which answer it with its code; kazoo's own exceptions would escape them. While
        the session is known to be disconnected the write fails at once: a request waiting on it
        holds up every later request of its connection, and blocked writes would fill the
        threads other writes need once ZooKeeper is back."""
        if not self.client.connected:
            raise MetadataWriteError("ZooKeeper is out of reach: not connected", TIMED_OUT)
        try:
            return await asyncio.to_thread(function, *args, **kwargs)
        except UNREACHABLE as exc:
            raise MetadataWriteError(f"ZooKeeper is out of reach: {exc!r}", TIMED_OUT) from None

    # ------------------------------------------------------------------ topic changes

    @runs_to_completion
    async def create_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str],
        internal: bool = False, assignments: list[list[int]] | None = None, wait_s: float = 0.0,
    ) -> TopicMetadata:
        live = sorted(self._view.brokers)
        racks = {b.broker_id: b.rack for b in self._view.brokers.values() if b.rack}
        if assignments is None:
            assignments = assign_replicas(live, num_partitions, replication_factor, racks=racks)
        partitions = [_initial_state(replicas, set(live)) for replicas in assignments]
        topic_id = str(uuid.uuid4())
        await self._write_in_thread(write_new_topic, self.client, name, topic_id, partitions, configs)
        wait_s = max(wait_s, CHANGE_TIMEOUT_S)  # topics created together enter the view one after another
        if not await self.wait_for(lambda: name in self._view.topics, wait_s):
            raise MetadataWriteError(f"topic {name} written to ZooKeeper but not seen within {wait_s:g} s", TIMED_OUT)
        return self._view.topics[name]

    @runs_to_completion
    async def delete_topic(self, name: str) -> None:
        """Ask the controller to delete `name` (/admin/delete_topics) and wait until it is gone."""
        if name not in self._view.topics:
            raise UnknownTopicError(f"Topic {name} does not exist")
        with contextlib.suppress(NodeExistsError):
            await self._write_in_thread(self.client.create, f"/admin/delete_topics/{name}", b"", makepath=True)
        if not await self.wait_for(lambda: name not in self._view.topics):
            raise MetadataWriteError(f"topic {name} is queued for deletion; no controller has deleted it yet",
                                     TIMED_OUT)

    @runs_to_completion
    async def add_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None = None
    ) -> TopicMetadata:
        current = self._require(name)
        count = len(current.partitions)
        live = sorted(self._view.brokers)
        if assignments is None:
            replication = len(current.partitions[0].replicas) if current.partitions else 1
            assignments = assign_replicas(live, total - count, replication, count)
        added = [_initial_state(replicas, set(live)) for replicas in assignments]
        await self._write_in_thread(write_partitions, self.client, current, added)
        await self._see(f"partitions of {name}", lambda: len(self._require(name).partitions) >= total)
        return self._view.topics[name]

    @runs_to_completion
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        self._require(name)
        await self._write_in_thread(write_topic_configs, self.client, name, configs)
        await self._see(f"configs of {name}",
                        lambda: name in self._view.topics and self._view.topics[name].configs == configs)
        return self._view.topics[name]

    # ------------------------------------------------------------------ producer ids

    @runs_to_completion
    async def allocate_producer_id(self) -> int:
        if self._next_producer_id >= self._producer_id_limit:
            start = await self._write_in_thread(claim_producer_id_block, self.client, self.broker_id)
            self._next_producer_id, self._producer_id_limit = start, start + PRODUCER_ID_BLOCK
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    # ------------------------------------------------------------------ partition state

    async def alter_partition(self, topic: str, index: int, leader_epoch: int, partition_epoch: int,
                              isr: list[int]) -> PartitionState:
        (result,) = await self.alter_partitions([IsrChange(topic, index, leader_epoch, partition_epoch, isr)])
        if isinstance(result, BaseException):
            raise result
        return result

    @runs_to_completion
    async def alter_partitions(self, changes: list[IsrChange]) -> list[PartitionState | BaseException]:
        """Every change checked against the view, then the state znodes written conditionally, all
        sent in multi-ops from one thread (one round trip for a thousand partitions, not one each).
        A change that loses its race fails alone (StalePartitionStateError), the rest of its
        multi-op is sent again; the written ones are applied per topic."""
        results: list[PartitionState | BaseException] = []
        writes: list[tuple[int, PartitionState, int]] = []  # (position, new state, znode version)
        for position, change in enumerate(changes):
            try:
                state = self._isr_change_base(change)
            except (UnknownTopicError, StalePartitionStateError) as exc:
                results.append(exc)
                continue
            results.append(replace(state, isr=list(change.isr)))
            writes.append((position, results[-1], change.partition_epoch))
        if not writes:
            return results
        try:
            versions = await self._write_in_thread(write_states, self.client, [
                (changes[i].topic, changes[i].index, state, version) for i, state, version in writes])
        except MetadataWriteError as exc:
            versions = [exc] * len(writes)
        written: dict[str, dict[int, PartitionState]] = {}
        for (position, state, _), version in zip(writes, versions, strict=True):
            if isinstance(version, BaseException):
                results[position] = version
                continue
            results[position] = replace(state, partition_epoch=version)
            written.setdefault(changes[position].topic, {})[changes[position].index] = results[position]
        for topic, states in written.items():
            self._view.apply_written_states(topic, states)
        return results

    def _isr_change_base(self, change: IsrChange) -> PartitionState:
        """The state `change` was computed from, if the view still has it."""
        current = self._require(change.topic)
        if not 0 <= change.index < len(current.partitions):
            raise UnknownTopicError(f"{change.topic}-{change.index}")
        state = current.partitions[change.index]
        if (state.leader_epoch, state.partition_epoch) != (change.leader_epoch, change.partition_epoch):
            raise StalePartitionStateError(f"{change.topic}-{change.index}: state moved on to epoch "
                                           f"{state.leader_epoch}/{state.partition_epoch}")
        return state

    async def write_states_as_controller(self, writes: list[StateWrite], epoch: int,
                                         controller_epoch_version: int) -> list[bool]:
        """Write (topic, index, state, znode version) conditionally, fenced by /controller_epoch
        (`epoch`, at `controller_epoch_version`: no read of it before the writes), in
        multi-ops of at most MULTI_OP_BYTES (Kafka's controller batches its ZooKeeper writes the same
        way, within jute.maxbuffer), each with one STATE_CHANGES znode listing its states for the
        brokers. A write that lost a race (its znode moved on) is left out and those of its batch
        still current are sent once more. True for each one written; those written are in the
        view on return (write, then apply): a pass that the first writes' own announcements
        started, deciding from the view before their watch brought them, wrote every ISR change
        again, each failing on its znode version (3.6 s for 667 partitions in a SIGTERM)."""
        written = await self._write_in_thread(write_controller_states, self.client, writes, epoch,
                                             controller_epoch_version)
        by_topic: dict[str, dict[int, PartitionState]] = {}
        for (topic, index, state, version), ok in zip(writes, written, strict=True):
            if ok:
                by_topic.setdefault(topic, {})[index] = replace(state, partition_epoch=version + 1)
        for topic, states in by_topic.items():
            self._view.apply_written_states(topic, states)
        return written

    # ------------------------------------------------------------------ elections and reassignments

    async def elect_leaders(self, partitions: list[PartitionKey], unclean: bool) -> dict[PartitionKey, int | None]:
        """Decide from the view which partitions need an election, hand those to the controller
        (/admin/preferred_replica_election, or the unclean flag in it) and wait for the result."""
        from .elections import elect_preferred, elect_unclean

        live = set(self._view.brokers)
        results: dict[PartitionKey, int | None] = {}
        wanted: list[PartitionKey] = []
        for name, index in partitions:
            state = self.partition_state(name, index)
            if state is None:
                results[(name, index)] = ErrorCode.unknown_topic_or_partition
                continue
            decided = elect_unclean(state, live) if unclean else elect_preferred(state, live)
            if isinstance(decided, ErrorCode):
                results[(name, index)] = decided
            else:
                wanted.append((name, index))
        if wanted:
            request = {"version": 1, "unclean": unclean,
                       "partitions": [{"topic": t, "partition": p} for t, p in wanted]}
            await self._write_in_thread(write_admin_request, self.client, "/admin/preferred_replica_election", request)
            elected = await self.wait_for(lambda: all(self._elected(key, unclean) for key in wanted), 15)
            for key in wanted:
                results[key] = None if elected or self._elected(key, unclean) else ErrorCode.request_timed_out
        return results

    def _elected(self, key: PartitionKey, unclean: bool) -> bool:
        state = self.partition_state(*key)
        if state is None:
            return True
        if unclean:
            return state.leader in self._view.brokers
        return bool(state.target_replicas) and state.leader == state.target_replicas[0]

    async def alter_reassignments(
        self, changes: dict[PartitionKey, list[int] | None]
    ) -> dict[PartitionKey, int | None]:
        """Check each change against the view, then hand the valid ones to the controller
        (/admin/reassign_partitions; null replicas cancel) and return once it took them."""
        from .elections import reassignment_outcome

        live = set(self._view.brokers)
        results: dict[PartitionKey, int | None] = {}
        accepted = []
        for (name, index), target in changes.items():
            error = reassignment_outcome(self.partition_state(name, index), target, live)
            results[(name, index)] = error
            if error is None:
                accepted.append({"topic": name, "partition": index, "replicas": target})
        if accepted:
            await self._write_in_thread(write_admin_request, self.client, "/admin/reassign_partitions",
                                    {"version": 1, "partitions": accepted})
        return results

    # ------------------------------------------------------------------ failed log dirs

    async def report_offline_replicas(self, partitions: list[PartitionKey]) -> None:
        """Replace this broker's offline replicas in ZooKeeper (a persistent znode, so a session
        lost meanwhile keeps them; the broker clears them at start), then, for a new failure,
        write Kafka's log dir event notification for the controller."""
        await self._write_in_thread(write_offline_replicas, self.client, self.broker_id, list(partitions))

    # ------------------------------------------------------------------ controlled shutdown

    async def request_controlled_shutdown(self, timeout: float) -> bool:
        """Ask the controller to move this broker's leaderships away; True once it leads nothing."""
        path = f"{CONTROLLED_SHUTDOWN}/{self.broker_id}"
        try:
            await asyncio.to_thread(self.client.create, path, b"", ephemeral=True, makepath=True)
        except NodeExistsError:
            pass
        except Exception:  # noqa: BLE001 - no ZooKeeper: nothing can move; stop anyway
            return False
        return await self.wait_for(lambda: not self.led_partitions(), timeout)

    def led_partitions(self) -> list[PartitionKey]:
        """Partitions this broker leads, by the view, among those that have another replica in the ISR."""
        return [(name, index) for name, topic in self._view.topics.items()
                for index, state in enumerate(topic.partitions)
                if state.leader == self.broker_id and len(state.isr) > 1]

    # ------------------------------------------------------------------ shutdown

    async def close(self) -> None:
        self._closing = True
        try:
            await asyncio.to_thread(self.client.stop)
            await asyncio.to_thread(self.client.close)
        except Exception:  # noqa: BLE001 - closing anyway
            log.exception("closing the ZooKeeper client")

    def _require(self, name: str) -> TopicMetadata:
        metadata = self._view.topics.get(name)
        if metadata is None:
            raise UnknownTopicError(f"Topic {name} does not exist")
        return metadata


def _initial_state(replicas: list[int], live: set[int]) -> PartitionState:
    """A new partition: the first live replica leads, the live replicas are the ISR."""
    isr = [b for b in replicas if b in live] or list(replicas)
    leader = isr[0] if any(b in live for b in replicas) else NO_LEADER
    return PartitionState(leader, 0, list(replicas), isr)
