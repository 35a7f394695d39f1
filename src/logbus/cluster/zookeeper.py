"""Cluster metadata in ZooKeeper, in Kafka's ZooKeeper-mode layout, through kazoo.

Layout (JSON as Kafka writes it, so an operator who knows Kafka recognises it):

- `/cluster/id`                                   {"version":"1","id":...}
- `/brokers/ids/<id>`  (ephemeral)                {"version":5,"host","port","endpoints",...,"rack"}
- `/brokers/topics/<t>`                           {"version":3,"topic_id","partitions":{"0":[1,2]},
                                                   "adding_replicas":{},"removing_replicas":{}}
- `/brokers/topics/<t>/partitions/<p>/state`      {"controller_epoch","leader","version":1,"leader_epoch","isr"}
- `/config/topics/<t>`                            {"version":1,"config":{...}}
- `/config/users/<user>`                          {"version":1,"config":{"SCRAM-SHA-256":"salt=...,..."}}
- `/config/users/<user>/clients/<client-id>`      {"version":1,"config":{"producer_byte_rate":"1048576"}}
- `/config/clients/<client-id>`                   the same; quotas also in /config/users/<user>, and
                                                   `<default>` for a user or client id (KIP-55)
- `/config/ips/<ip>`                              {"version":1,"config":{"connection_creation_rate":"10"}},
                                                   `<default>` for every other address (KIP-612)
- `/config/brokers/<id>`, `/config/brokers/<default>`  {"version":1,"config":{...}}: dynamic broker configs,
                                                   one broker's and the cluster-wide default (KIP-226)
- `/config/groups/<group>`                        {"version":1,"config":{...}}: KIP-848 group configs
                                                   (logbus's path: Kafka keeps them only in KRaft metadata)
- `/config/changes/config_change_<seq>`           {"version":2,"entity_path":"topics/<t>", "users/<user>",
                                                   "clients/<c>", "users/<user>/clients/<c>", "ips/<ip>",
                                                   "brokers/<id>" or "groups/<group>"}
- `/admin/delete_topics/<t>`                      a deletion the controller carries out
- `/admin/preferred_replica_election`             {"version":1,"partitions":[{"topic","partition"}]}
- `/admin/reassign_partitions`                    {"version":1,"partitions":[{"topic","partition","replicas"}]}
- `/controller` (ephemeral), `/controller_epoch`, `/latest_producer_id_block`
- `/logbus/controlled_shutdown/<id>` (ephemeral)  logbus's own: a broker asking to lose its leaderships
- `/logbus/state_changes/change_<seq>`            logbus's own: {"version":1,"partitions":[[topic, partition,
                                                   leader, leader_epoch, isr, znode_version]]}, the states
                                                   one write changed (see "State changes" below)
- `/logbus/offline_replicas/<id>-<seq>`           logbus's own: {"version":1,"partitions":[{"topic","partition"}]},
                                                   a broker's replicas in failed log dirs (replaced whole)
- `/log_dir_event_notification/log_dir_event_<seq>`  {"version":1,"broker":<id>,"event":1}: a log dir failed
- `/kafka-acl/<ResourceType>/<name>`              LITERAL ACLs {"version":1,"acls":[{"principal","permissionType",
                                                   "operation","host"}]}
- `/kafka-acl-extended/prefixed/<ResourceType>/<name>`  PREFIXED ACLs, the same JSON
- `/kafka-acl-changes/acl_changes_<seq>`          "Topic:name": a LITERAL resource's ACLs changed
- `/kafka-acl-extended-changes/acl_changes_<seq>` {"version":1,"resourceType","name","patternType"}: a PREFIXED one

The broker reads a view held in memory (`topics()`, `brokers()`), kept current by watches.
kazoo runs watch callbacks on its own thread, one after another; they read what changed there
and hand the result to the event loop with `call_soon_threadsafe`, where the view changes and
listeners are called. Every write runs in a worker thread, so no ZooKeeper call blocks the loop.

ACLs: a change is a conditional update of the resource's znode (on its version, retried when
another broker changed it meanwhile), then a change notification. Every broker watches the
notifications and re-reads the resources they name, one after another on kazoo's thread, so each
broker's view of a resource only moves forward; the writer returns once its own view has taken
its notification. Notifications older than 15 minutes are deleted by whichever broker sees them
next, as Kafka's brokers do.

A topic enters the view once its assignment and every partition's state exist: the broker
that creates a topic writes both in one ZooKeeper transaction (Kafka's admin path wrote the
assignment and left the states to the controller; one transaction means no half-created topic
is ever seen). Every partition-state write is conditional on the znode's version, which is the
state's `partition_epoch`; a write that loses a race raises StalePartitionStateError and the
writer decides again from the fresh state that a state change brings.

State changes: brokers do not watch the partition-state znodes (one watch event per partition
and broker when a controller moves thousands). Every write of states creates, in its transaction,
one `/logbus/state_changes/change_<seq>` listing them; brokers read each once and apply its
states per topic. The controller deletes those older than STATE_CHANGE_EXPIRATION_S; a broker
that missed one (deleted before it read it, or while it was disconnected) reads every topic again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry
from kio.schema.errors import ErrorCode

from ..security.acl import (
    RESOURCE_TYPE_NAMES,
    AccessControlEntry,
    AclBinding,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    decode_entries,
    encode_entries,
    resource_type_named,
)
from ..security.acl import apply_changes as apply_acl_changes
from ..security.listeners import DEFAULT_PROTOCOL_MAP, ListenerEndpoint, parse_endpoints, parse_protocol_map
from ..security.quotas import (
    QuotaChanges,
    QuotaConfigs,
    QuotaEntity,
    apply_quota_changes,
    decode_quota_config,
    desanitize,
    encode_quota_value,
    sanitize,
)
from ..security.scram import (
    CredentialChanges,
    UserCredentials,
    decode_user_config,
    encode_user_config,
)
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
    TopicExistsError,
    TopicMetadata,
    UnknownTopicError,
    new_cluster_id,
    runs_to_completion,
)
from .zk_reads import ZnodeReader

log = logging.getLogger(__name__)

T = TypeVar("T")
_UNREACHABLE = (ConnectionLoss, ConnectionClosedError, SessionExpiredError, KazooTimeoutError)

CONTROLLED_SHUTDOWN = "/logbus/controlled_shutdown"  # children: brokers asking to lose their leaderships
STATE_CHANGES = "/logbus/state_changes"  # children: batches of partition states written, for every broker
STATE_CHANGE_PREFIX = "change_"
STATE_CHANGE_EXPIRATION_S = 60.0  # the controller deletes older state changes
OFFLINE_REPLICAS = "/logbus/offline_replicas"  # children: brokers' replicas in failed log dirs
LOG_DIR_EVENTS = "/log_dir_event_notification"  # Kafka's: tells the controller a log dir failed
LOG_DIR_FAILURE = 1  # Kafka's LogDirEventNotification event type
PRODUCER_ID_BLOCK = 1000
# A multi-op's size bound: half of ZooKeeper's jute.maxbuffer default (1 MB), which bounds a request
MULTI_OP_BYTES = 512 * 1024
MULTI_OP_OVERHEAD_BYTES = 32  # per set_data in a multi: header, version, lengths
STATE_CHANGE_DELETES_PER_MULTI = 1000
STATE_BATCH_ATTEMPTS = 2
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
CHANGE_TIMEOUT_S = 30.0  # how long a change waits to show in this broker's view
# A write ZooKeeper did not take (out of reach) or that did not show in time: Kafka's answer
# when its ZooKeeper client times out; clients retry it.
TIMED_OUT = ErrorCode.request_timed_out
RECONNECT_MAX_DELAY_S = 1.0  # longest pause between two attempts to reach ZooKeeper again
NO_SESSION = 0
REGISTRATION_WAIT_SLACK_S = 2.0  # beyond the session timeout: ZooKeeper expires sessions on its tick
USERS = "/config/users"
CLIENTS = "/config/clients"
IPS = "/config/ips"
CONFIG_ENTITIES = ("brokers", "groups")  # /config/<kind>/<name>: dynamic configs of brokers and groups


LITERAL_ACLS, PREFIXED_ACLS = "/kafka-acl", "/kafka-acl-extended/prefixed"
LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES = "/kafka-acl-changes", "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
ACL_CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's: older notifications are deleted by any broker


def acl_path(pattern: ResourcePattern) -> str:
    root = PREFIXED_ACLS if pattern.pattern_type is PatternType.PREFIXED else LITERAL_ACLS
    return f"{root}/{RESOURCE_TYPE_NAMES[pattern.resource_type]}/{pattern.name}"


def encode_acl_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(notification path prefix, data) announcing that `pattern`'s ACLs changed, as Kafka writes it."""
    if pattern.pattern_type is PatternType.LITERAL:
        return (f"{LITERAL_ACL_CHANGES}/{ACL_CHANGE_PREFIX}",
                f"{RESOURCE_TYPE_NAMES[pattern.resource_type]}:{pattern.name}".encode())
    return (f"{EXTENDED_ACL_CHANGES}/{ACL_CHANGE_PREFIX}",
            _json({"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
                   "patternType": pattern.pattern_type.name}))


def decode_acl_change(root: str, raw: bytes) -> ResourcePattern:
    """The resource pattern a change notification names; ValueError when it names none."""
    if root == LITERAL_ACL_CHANGES:
        type_name, sep, name = raw.decode().partition(":")
        if not sep:
            raise ValueError(f"not a resource: {raw[:100]!r}")
        return ResourcePattern(resource_type_named(type_name), name, PatternType.LITERAL)
    value = json.loads(raw)
    return ResourcePattern(resource_type_named(value["resourceType"]), value["name"],
                           PatternType[value["patternType"].upper()])


def topic_path(name: str) -> str:
    return f"/brokers/topics/{name}"


def state_path(name: str, index: int) -> str:
    return f"/brokers/topics/{name}/partitions/{index}/state"


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def encode_state(state: PartitionState, controller_epoch: int) -> bytes:
    return _json({"controller_epoch": controller_epoch, "leader": state.leader, "version": 1,
                  "leader_epoch": state.leader_epoch, "isr": state.isr})


def decode_state(raw: bytes) -> tuple[int, int, list[int]]:
    """(leader, leader epoch, ISR) of a partition-state znode (ValueError/KeyError/TypeError
    when it is not one)."""
    state = json.loads(raw)
    return int(state["leader"]), int(state["leader_epoch"]), [int(b) for b in state["isr"]]


StateEntry = tuple[str, int, int, int, list[int], int]  # topic, index, leader, leader epoch, ISR, znode version


def encode_state_changes(entries: list[StateEntry]) -> bytes:
    """A STATE_CHANGES znode: the states one multi-op wrote, with the versions it gave their znodes."""
    return _json({"version": 1, "partitions": [list(entry) for entry in entries]})


def decode_state_changes(raw: bytes) -> list[StateEntry]:
    """The states in a STATE_CHANGES znode (ValueError/KeyError/TypeError/IndexError when it is not one)."""
    return [(str(t), int(i), int(leader), int(epoch), [int(b) for b in isr], int(version))
            for t, i, leader, epoch, isr, version in json.loads(raw)["partitions"]]


def encode_assignment(topic_id: str, partitions: list[PartitionState]) -> bytes:
    return _json({
        "version": 3, "topic_id": topic_id,
        "partitions": {str(i): p.replicas for i, p in enumerate(partitions)},
        "adding_replicas": {str(i): p.adding_replicas for i, p in enumerate(partitions) if p.adding_replicas},
        "removing_replicas": {str(i): p.removing_replicas for i, p in enumerate(partitions) if p.removing_replicas},
    })


def encode_broker(broker: BrokerInfo) -> bytes:
    """Kafka's broker registration: every advertised endpoint with its listener's protocol, and
    host/port of the PLAINTEXT one (null and -1 without one), which pre-listener tools read."""
    plaintext = next((e for e in broker.endpoints if e.security_protocol == "PLAINTEXT"), None)
    value: dict[str, Any] = {
        "listener_security_protocol_map": {e.name: e.security_protocol for e in broker.endpoints},
        "endpoints": [str(e) for e in broker.endpoints], "jmx_port": -1, "features": {},
        "host": plaintext.host if plaintext else None, "timestamp": str(int(time.time() * 1000)),
        "port": plaintext.port if plaintext else -1, "version": 5,
    }
    if broker.rack:
        value["rack"] = broker.rack
    return _json(value)


def decode_broker(broker_id: int, raw: bytes) -> BrokerInfo:
    """A registration (ValueError/KeyError/TypeError when it is not one); without `endpoints`,
    host/port as a PLAINTEXT listener, as registrations from before listeners were."""
    value = json.loads(raw)
    protocols = value.get("listener_security_protocol_map") or {}
    if value.get("endpoints"):
        endpoints = parse_endpoints("endpoints", ",".join(value["endpoints"]),
                                    protocols or parse_protocol_map(DEFAULT_PROTOCOL_MAP))
    else:
        endpoints = (ListenerEndpoint("PLAINTEXT", "PLAINTEXT", value["host"], int(value["port"])),)
    return BrokerInfo(broker_id, endpoints, value.get("rack"))


def reconnect_policy() -> KazooRetry:
    """Reconnect for ever, at most RECONNECT_MAX_DELAY_S apart. kazoo's default doubles its pause
    up to an hour: after a 15 s outage brokers tried again only seconds after ZooKeeper was back,
    and a session that could have been kept expired meanwhile."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RECONNECT_MAX_DELAY_S)


class ZooKeeperMetadataStore(MetadataStore):
    """The cluster's metadata in ZooKeeper; see the module docstring for the layout."""

    def __init__(self, connect: str, broker_id: int, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int | None = None) -> None:
        super().__init__()
        self.connect = connect
        self.broker_id = broker_id
        self.controller_id = -1
        self.cluster_id = ""
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        self.client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000,
                                  connection_retry=reconnect_policy())
        self._znodes = ZnodeReader(self.client)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._topics: dict[str, TopicMetadata] = {}
        self._brokers: dict[int, BrokerInfo] = {}
        self._shutting_down: frozenset[int] = frozenset()
        self._watched_topics: set[str] = set()
        self._states_read: list[StateEntry] = []  # read on kazoo's threads, not yet applied
        self._states_read_lock = threading.Lock()
        self._seen_state_changes: dict[str, float] = {}  # state change znodes read: their ctime (s)
        self._users: UserCredentials = {}
        self._watched_users: set[str] = set()
        self._quotas: QuotaConfigs = {}
        self._changed = asyncio.Event()
        self._registration: BrokerInfo | None = None
        self._next_producer_id = 0
        self._producer_id_limit = 0  # exclusive end of the block in hand
        self._session_listeners: list[Callable[[bool], None]] = []
        self._closing = False
        self._seen_acl_changes: set[str] = set()  # notification paths this view has taken

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
        self.cluster_id = await asyncio.to_thread(self._prepare_layout)
        await asyncio.to_thread(self._install_watches)
        self._apply_acls(await asyncio.to_thread(self._read_all_acls))

    def _prepare_layout(self) -> str:
        """Create the chroot and the fixed paths if missing; returns the cluster id (made if new)."""
        for path in ("/brokers/ids", "/brokers/topics", "/config/topics", USERS, CLIENTS, IPS, "/config/changes",
                     *(f"/config/{kind}" for kind in CONFIG_ENTITIES),
                     "/admin/delete_topics", CONTROLLED_SHUTDOWN, STATE_CHANGES, LITERAL_ACLS, PREFIXED_ACLS,
                     LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES):
            self.client.ensure_path(path)
        with contextlib.suppress(NodeExistsError):
            self.client.create("/cluster/id", _json({"version": "1", "id": new_cluster_id()}), makepath=True)
        raw, _ = self.client.get("/cluster/id")
        return json.loads(raw)["id"]

    def _install_watches(self) -> None:
        """Read the current state into the view and watch for changes (kazoo thread)."""
        ChildrenWatch(self.client, "/brokers/ids", self._on_broker_ids)
        self._seen_state_changes = dict.fromkeys(self.client.get_children(STATE_CHANGES), time.time())
        ChildrenWatch(self.client, STATE_CHANGES, self._on_state_changes)  # before the topics' reads: none missed
        ChildrenWatch(self.client, "/brokers/topics", self._on_topic_names)
        DataWatch(self.client, "/controller", self._on_controller)
        ChildrenWatch(self.client, CONTROLLED_SHUTDOWN, self._on_shutdown_requests)
        for root in (LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES):
            initial = self.client.get_children(root)
            self._seen_acl_changes.update(f"{root}/{child}" for child in initial)  # the full read covers them
            ChildrenWatch(self.client, root, lambda children, r=root: self._on_acl_changes(r, children))
        ChildrenWatch(self.client, USERS, self._on_user_names)
        self._watch_quota_entities(CLIENTS, lambda name: QuotaEntity(None, name))
        self._watch_quota_entities(IPS, lambda name: QuotaEntity(ip=name))
        for kind in CONFIG_ENTITIES:
            self._watch_config_entities(kind)
        self._watch_offline_replicas()

    def _post(self, callback: Callable[..., None], *args: object) -> None:
        """Run `callback(*args)` on the event loop (from a kazoo thread)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback, *args)

    def _on_broker_ids(self, children: list[str]) -> None:
        brokers = {}
        for child in children:
            try:
                raw, _ = self.client.get(f"/brokers/ids/{child}")
                brokers[int(child)] = decode_broker(int(child), raw)
            except (NoNodeError, ValueError, KeyError, TypeError):  # ConfigError is a ValueError
                continue
        self._post(self._apply_brokers, brokers)

    def _apply_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        if brokers == self._brokers:
            return
        self._brokers = brokers
        self._view_changed()
        self._announce_brokers()

    def _on_shutdown_requests(self, children: list[str]) -> None:
        self._post(self._apply_shutting_down, frozenset(int(c) for c in children if c.isdigit()))

    def _apply_shutting_down(self, ids: frozenset[int]) -> None:
        if ids != self._shutting_down:
            self._shutting_down = ids
            self._announce_brokers()

    def shutting_down_brokers(self) -> frozenset[int]:
        return self._shutting_down

    def _on_user_names(self, children: list[str]) -> None:
        """Each user znode gets a data watch: a credential altered on any broker (or by
        `logbus users`, which also writes Kafka's /config/changes notification) reaches every
        broker's view within a watch round trip."""
        for name in children:
            if name not in self._watched_users:
                self._watched_users.add(name)
                DataWatch(self.client, f"{USERS}/{name}", lambda data, *_a, n=name: self._on_user(n, data))
                self._watch_user_clients(name)
        for name in self._watched_users - set(children):
            self._watched_users.discard(name)
            self._post(self._apply_user, desanitize(name), {})
            self._post(self._apply_quotas, QuotaEntity(desanitize(name), None), {})

    def _on_user(self, name: str, data: bytes | None) -> bool:
        if name not in self._watched_users:
            return False
        try:
            config = read_entity_config(data)
            credentials = decode_user_config(config)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("user %s: unreadable credentials in ZooKeeper: %s", name, exc)
            return True
        self._post(self._apply_user, desanitize(name), credentials)
        self._post(self._apply_quotas, QuotaEntity(desanitize(name), None), decode_quota_config(config))
        return True

    def _apply_user(self, name: str, credentials: dict[str, Any]) -> None:
        users = {user: found for user, found in self._users.items() if user != name}
        if credentials:
            users[name] = credentials
        self._users = users
        self._view_changed()

    def scram_credentials(self) -> UserCredentials:
        return self._users

    @runs_to_completion
    async def alter_scram_credentials(self, changes: CredentialChanges) -> None:
        await self._write_in_thread(write_scram_credentials, self.client, changes)
        expected = {user: apply_credential_changes(self._users, changes).get(user, {}) for user in changes}
        await self._see("credentials", lambda: all(self._users.get(u, {}) == c for u, c in expected.items()))

    def _watch_user_clients(self, user: str) -> None:
        """/config/users/<user>/clients may come and go: its children are watched while it exists."""
        parent = f"{USERS}/{user}/clients"
        watching = False

        def on_parent(data: bytes | None, *_args: object) -> bool:
            nonlocal watching
            if user not in self._watched_users:
                return False
            if data is not None and not watching:
                watching = True
                self._watch_quota_entities(parent, lambda name: QuotaEntity(desanitize(user), name))
            watching = watching and data is not None
            return True

        DataWatch(self.client, parent, on_parent)

    def _watch_quota_entities(self, parent: str, entity_of: Callable[[str], QuotaEntity]) -> None:
        """Watch the children of `parent` as quota entities (`entity_of` their sanitized names)."""

        def on_data(name: str, data: bytes | None) -> None:
            entity = entity_of(desanitize(name))
            try:
                quotas = decode_quota_config(read_entity_config(data), entity.keys)
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("%s/%s: unreadable quotas in ZooKeeper: %s", parent, name, exc)
                return
            self._post(self._apply_quotas, entity, quotas)

        def on_gone(name: str) -> None:
            self._post(self._apply_quotas, entity_of(desanitize(name)), {})

        self._watch_children_data(parent, on_data, on_gone)

    def _watch_config_entities(self, kind: str) -> None:
        """Watch /config/<kind>/<name> znodes (names sanitized as Kafka's Sanitizer does) as the
        dynamic configs of entity `<kind>/<name>`."""

        def on_data(name: str, data: bytes | None) -> None:
            try:
                configs = {key: str(value) for key, value in read_entity_config(data).items()}
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("/config/%s/%s: unreadable configs in ZooKeeper: %s", kind, name, exc)
                return
            self._post(self._apply_entity_config_seen, f"{kind}/{desanitize(name)}", configs)

        def on_gone(name: str) -> None:
            self._post(self._apply_entity_config_seen, f"{kind}/{desanitize(name)}", {})

        self._watch_children_data(f"/config/{kind}", on_data, on_gone)

    def _watch_children_data(self, parent: str, on_data: Callable[[str, bytes | None], None],
                             on_gone: Callable[[str], None]) -> None:
        """Watch `parent`'s children and the data of each (kazoo threads): `on_data(name, data)`
        at every change of a child's data, `on_gone(name)` when a child is removed."""
        watched: set[str] = set()

        def on_children(children: list[str]) -> None:
            for name in children:
                if name not in watched:
                    watched.add(name)
                    DataWatch(self.client, f"{parent}/{name}", lambda data, *_a, n=name: seen(n, data))
            for name in watched - set(children):
                watched.discard(name)
                on_gone(name)

        def seen(name: str, data: bytes | None) -> bool:
            if name not in watched:
                return False  # removed: stop watching it
            on_data(name, data)
            return True

        ChildrenWatch(self.client, parent, on_children)

    def _apply_entity_config_seen(self, entity: str, configs: dict[str, str]) -> None:
        self._apply_entity_config(entity, configs)
        self._view_changed()

    @runs_to_completion
    async def set_entity_configs(self, entity: str, configs: dict[str, str]) -> None:
        kind, _, name = entity.partition("/")
        znode = sanitize(name) if name.strip(".") else name.replace(".", "%2E")  # "." and ".." are no znode names
        await self._write_in_thread(write_entity_configs, self.client,
                                    {f"{kind}/{znode}": lambda _current: dict(configs)})
        await self._see(f"configs of {entity}", lambda: self._entity_configs.get(entity, {}) == configs)

    def _apply_quotas(self, entity: QuotaEntity, values: dict[str, float]) -> None:
        if self._quotas.get(entity, {}) == values:
            return
        quotas = {e: found for e, found in self._quotas.items() if e != entity}
        if values:
            quotas[entity] = values
        self._quotas = quotas
        self._view_changed()

    def client_quotas(self) -> QuotaConfigs:
        return self._quotas

    @runs_to_completion
    async def alter_client_quotas(self, changes: QuotaChanges) -> None:
        await self._write_in_thread(write_client_quotas, self.client, changes)
        expected = apply_quota_changes(self._quotas, changes)
        await self._see("quotas", lambda: all(self._quotas.get(e, {}) == expected.get(e, {}) for e in changes))

    def _on_controller(self, data: bytes | None, _stat: object, *_event: object) -> None:
        controller = -1
        if data:
            try:
                controller = int(json.loads(data)["brokerid"])
            except (ValueError, KeyError, TypeError):
                controller = -1
        self._post(self._apply_controller, controller)

    # ------------------------------------------------------------------ ACLs

    def _read_all_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every ACL znode (worker thread, at start-up)."""
        table = {}
        for root, pattern_type in ((LITERAL_ACLS, PatternType.LITERAL), (PREFIXED_ACLS, PatternType.PREFIXED)):
            for type_name in self.client.get_children(root):
                try:
                    resource_type = resource_type_named(type_name)
                except ValueError:
                    continue
                for name in self.client.get_children(f"{root}/{type_name}"):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    entries = self._read_acls(pattern)
                    if entries:
                        table[pattern] = entries
        return table

    def _read_acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        try:
            raw, _ = self.client.get(acl_path(pattern))
            return decode_entries(json.loads(raw))
        except NoNodeError:
            return frozenset()
        except ValueError:
            log.warning("unreadable ACLs at %s", acl_path(pattern))
            return frozenset()

    def _on_acl_changes(self, root: str, children: list[str]) -> None:
        """New change notifications: re-read the resources they name (kazoo thread, in order);
        then delete those older than ACL_CHANGE_EXPIRATION_MS, as Kafka's brokers do."""
        paths = [f"{root}/{child}" for child in sorted(children)]
        self._post(self._forget_acl_changes, root, frozenset(paths))
        for path in paths:
            if path in self._seen_acl_changes:
                continue
            try:
                raw, _ = self.client.get(path)
                pattern = decode_acl_change(root, raw)
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                log.warning("ignoring an unreadable ACL change notification %s", path)
                self._post(self._seen_acl_changes.add, path)
                continue
            self._post(self._apply_resource_acls, pattern, self._read_acls(pattern), path)
        self._purge_acl_changes(paths)

    def _purge_acl_changes(self, paths: list[str]) -> None:
        oldest_kept = time.time() * 1000 - ACL_CHANGE_EXPIRATION_MS
        for path in paths:
            try:
                stat = self.client.exists(path)
                if stat is not None and stat.ctime < oldest_kept:
                    self.client.delete(path)
            except (NoNodeError, *_UNREACHABLE):
                continue  # another broker purged it first, or the next notification's callback will

    def _forget_acl_changes(self, root: str, current: frozenset[str]) -> None:
        """Keep only the notifications of `root` that still exist in the set of those taken."""
        self._seen_acl_changes = {p for p in self._seen_acl_changes if not p.startswith(f"{root}/") or p in current}

    def _apply_resource_acls(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry],
                             notification: str) -> None:
        table = {p: e for p, e in self._acls.items() if p != pattern}
        if entries:
            table[pattern] = entries
        self._seen_acl_changes.add(notification)
        self._apply_acls(table)
        self._view_changed()

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
            notification = await self._write_in_thread(self._write_acls, pattern, *mine)
            if notification is not None:
                notifications.append(notification)
        await self._see("ACLs", lambda: all(n in self._seen_acl_changes for n in notifications))

    def _write_acls(self, pattern: ResourcePattern, added: list[AclBinding], removed: list[AclBinding]) -> str | None:
        """Update one resource's ACL znode on its version (again on a lost race); returns the change
        notification's path, or None when nothing changed."""
        path = acl_path(pattern)
        while True:
            try:
                raw, stat = self.client.get(path)
                current = decode_entries(json.loads(raw))
            except NoNodeError:
                current, stat = frozenset(), None
            except ValueError:
                raise MetadataWriteError(f"unreadable ACLs at {path}; not changed") from None
            new = apply_acl_changes({pattern: current} if current else {}, added, removed).get(pattern, frozenset())
            if new == current:
                return None
            try:
                if stat is None:
                    self.client.create(path, _json(encode_entries(new)), makepath=True)
                elif new:
                    self.client.set(path, _json(encode_entries(new)), version=stat.version)
                else:
                    self.client.delete(path, version=stat.version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker changed this resource meanwhile: apply the change to its state
        prefix, data = encode_acl_change(pattern)
        return self.client.create(prefix, data, sequence=True, makepath=True)

    def _apply_controller(self, controller: int) -> None:
        self.controller_id = controller
        self._view_changed()
        for listener in self._session_listeners:
            listener(True)

    def _on_topic_names(self, children: list[str]) -> None:
        for name in children:
            if name not in self._watched_topics:
                self._watched_topics.add(name)
                DataWatch(self.client, f"/config/topics/{name}",
                          lambda _data, _stat, event, n=name: self._on_topic_configs(n, event))
                DataWatch(self.client, topic_path(name), lambda *_a, n=name: self._refresh_topic(n))
        for name in self._watched_topics - set(children):
            self._watched_topics.discard(name)
            self._post(self._apply_topic, name, None)

    def _on_topic_configs(self, name: str, event: WatchedEvent | None) -> bool:
        """A topic's configs changed (kazoo thread): read the topic again. Not when the watch is
        being set (no event): the topic's own watch, set right after, reads the topic with its
        configs (both reading it made every broker read each new topic's states twice)."""
        if event is None:
            return name in self._watched_topics
        return self._refresh_topic(name)

    def _refresh_topic(self, name: str) -> bool:
        """Read topic `name` whole and hand it to the loop (kazoo thread). False stops the watch."""
        if name not in self._watched_topics:
            return False
        try:
            raw, _ = self.client.get(topic_path(name))
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
        adding = assignment.get("adding_replicas") or {}
        removing = assignment.get("removing_replicas") or {}
        replicas = [assignment["partitions"].get(str(i)) for i in range(len(assignment.get("partitions", {})))]
        if any(r is None for r in replicas):
            return None
        reads = self._znodes.read([state_path(name, i) for i in range(len(replicas))])
        partitions = []
        for index, read in enumerate(reads):
            if isinstance(read, NoNodeError):
                return None  # not fully created yet (or being deleted): not in the view
            if isinstance(read, Exception):
                raise read
            raw, stat = read
            leader, leader_epoch, isr = decode_state(raw)
            partitions.append(PartitionState(
                leader, leader_epoch, list(replicas[index]), isr, stat.version,
                list(adding.get(str(index), [])), list(removing.get(str(index), [])),
            ))
        configs: dict[str, str] = {}
        try:
            raw, _ = self.client.get(f"/config/topics/{name}")
            configs = {k: str(v) for k, v in json.loads(raw).get("config", {}).items()}
        except NoNodeError:
            pass
        topic_id = assignment.get("topic_id") or str(uuid.UUID(int=0))
        return TopicMetadata(name, topic_id, partitions, configs, name in INTERNAL_TOPICS)

    def _on_state_changes(self, children: list[str]) -> None:
        """New state changes (kazoo thread): read each once, all at once (one round trip after
        another, a thousand leaders' ISR changes held up the /controller watch behind them for
        seconds), and queue their states for the loop in order. One the controller deleted before
        it was read (this broker far behind) makes every topic be read again."""
        unseen = [child for child in sorted(children) if child not in self._seen_state_changes]
        reads = [self.client.get_async(f"{STATE_CHANGES}/{child}") for child in unseen]
        for child, read in zip(unseen, reads, strict=True):
            self._seen_state_changes[child] = time.time()
            try:
                raw, stat = read.get()
                entries = decode_state_changes(raw)
            except NoNodeError:
                log.warning("state change %s deleted before this broker read it; reading every topic", child)
                self._refresh_all_topics()
                continue
            except (ValueError, KeyError, TypeError, IndexError):
                log.warning("ignoring an unreadable state change %s", child)
                continue
            self._seen_state_changes[child] = stat.ctime / 1000
            self._queue_states(entries)
        current = set(children)
        self._seen_state_changes = {c: t for c, t in self._seen_state_changes.items() if c in current}

    def _refresh_all_topics(self) -> None:
        """Read every topic again (kazoo or worker thread): after changes may have been missed."""
        for name in list(self._watched_topics):
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

    async def delete_state_changes(self, children: list[str]) -> None:
        """Delete state changes every broker has had time to read (one multi-op per batch)."""
        def delete_all() -> None:
            for start in range(0, len(children), STATE_CHANGE_DELETES_PER_MULTI):
                transaction = self.client.transaction()
                for child in children[start:start + STATE_CHANGE_DELETES_PER_MULTI]:
                    transaction.delete(f"{STATE_CHANGES}/{child}")
                transaction.commit()  # one already gone fails the batch: the next pass deletes the rest

        await self._write_in_thread(delete_all)

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
            current = self._topics.get(name)
            if current is not None:  # else the topic's own read brings it
                partitions = _with_states(current.partitions, changes)
                if partitions is not None:
                    self._apply_topic(name, replace(current, partitions=partitions))
        log.debug("applied %d partition states of %d topics in %.3f s", len(states), len(by_topic),
                  time.monotonic() - began)

    def _apply_topic(self, name: str, metadata: TopicMetadata | None) -> None:
        current = self._topics.get(name)
        if metadata == current:
            return
        if metadata is None:
            self._topics = {n: t for n, t in self._topics.items() if n != name}
        else:
            if current is not None and _older(metadata, current):
                return  # a stale read overtaken by a newer one
            self._topics = {**self._topics, name: metadata}
        self._view_changed()
        self._announce(name, metadata)

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
            self._post(self._session_lost)
        elif state == KazooState.CONNECTED:
            log.info("ZooKeeper connected, session 0x%x", self.session_id)
            self._post(self._session_connected)

    def _session_lost(self) -> None:
        if self._closing:
            return
        log.warning("ZooKeeper session lost; this broker is not the controller until it reconnects")
        for listener in self._session_listeners:
            listener(False)

    def _session_connected(self) -> None:
        if self._closing:
            return
        if self._watched_topics:  # state changes may have been deleted meanwhile
            self._spawn(asyncio.to_thread(self._refresh_all_topics))
        if self._registration is None:
            return
        self._spawn(self._reregister())

    async def _reregister(self) -> None:
        """After a new session: the ephemeral registration is gone; write it again."""
        try:
            await self._register(self._registration)
        except BrokerIdInUseError as exc:
            log.error("could not register again in ZooKeeper: %s", exc)
        except _UNREACHABLE as exc:
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
        await self.wait_for(lambda: broker.broker_id in self._brokers, 10)

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
        if await asyncio.to_thread(self.client.exists, path, lambda _event: self._post(changed.set)) is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await changed.wait()

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def live_broker_ids(self) -> set[int]:
        return set(self._brokers)

    def topics(self) -> dict[str, TopicMetadata]:
        return self._topics

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
        except _UNREACHABLE as exc:
            raise MetadataWriteError(f"ZooKeeper is out of reach: {exc!r}", TIMED_OUT) from None

    # ------------------------------------------------------------------ topic changes

    @runs_to_completion
    async def create_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str],
        internal: bool = False, assignments: list[list[int]] | None = None, wait_s: float = 0.0,
    ) -> TopicMetadata:
        live = sorted(self._brokers)
        racks = {b.broker_id: b.rack for b in self._brokers.values() if b.rack}
        if assignments is None:
            assignments = assign_replicas(live, num_partitions, replication_factor, racks=racks)
        partitions = [_initial_state(replicas, set(live)) for replicas in assignments]
        topic_id = str(uuid.uuid4())
        await self._write_in_thread(self._write_new_topic, name, topic_id, partitions, configs)
        wait_s = max(wait_s, CHANGE_TIMEOUT_S)  # topics created together enter the view one after another
        if not await self.wait_for(lambda: name in self._topics, wait_s):
            raise MetadataWriteError(f"topic {name} written to ZooKeeper but not seen within {wait_s:g} s", TIMED_OUT)
        return self._topics[name]

    def _write_new_topic(self, name: str, topic_id: str, partitions: list[PartitionState],
                         configs: dict[str, str]) -> None:
        """The topic's znodes in one transaction, after one round trip of reads (its checks and
        the controller epoch, sent together; the epoch read once per partition made a
        100-partition topic 100 round trips one after another)."""
        reads = [self.client.exists_async(topic_path(name)), self.client.exists_async(f"/admin/delete_topics/{name}"),
                 self.client.get_async("/controller_epoch")]
        if reads[0].get() or reads[1].get():
            raise TopicExistsError(f"Topic '{name}' already exists.")
        try:
            epoch = int(reads[2].get()[0])
        except (NoNodeError, ValueError):
            epoch = 0
        transaction = self.client.transaction()
        transaction.create(f"/config/topics/{name}", _json({"version": 1, "config": configs}))
        transaction.create(topic_path(name), encode_assignment(topic_id, partitions))
        transaction.create(f"{topic_path(name)}/partitions")
        for index, state in enumerate(partitions):
            transaction.create(f"{topic_path(name)}/partitions/{index}")
            transaction.create(state_path(name, index), encode_state(state, epoch))
        _commit(transaction, lambda: TopicExistsError(f"Topic '{name}' already exists."))

    def controller_epoch(self) -> int:
        try:
            raw, _ = self.client.get("/controller_epoch")
            return int(raw)
        except (NoNodeError, ValueError):
            return 0

    @runs_to_completion
    async def delete_topic(self, name: str) -> None:
        """Ask the controller to delete `name` (/admin/delete_topics) and wait until it is gone."""
        if name not in self._topics:
            raise UnknownTopicError(f"Topic {name} does not exist")
        with contextlib.suppress(NodeExistsError):
            await self._write_in_thread(self.client.create, f"/admin/delete_topics/{name}", b"", makepath=True)
        if not await self.wait_for(lambda: name not in self._topics):
            raise MetadataWriteError(f"topic {name} is queued for deletion; no controller has deleted it yet",
                                     TIMED_OUT)

    @runs_to_completion
    async def add_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None = None
    ) -> TopicMetadata:
        current = self._require(name)
        count = len(current.partitions)
        live = sorted(self._brokers)
        if assignments is None:
            replication = len(current.partitions[0].replicas) if current.partitions else 1
            assignments = assign_replicas(live, total - count, replication, count)
        added = [_initial_state(replicas, set(live)) for replicas in assignments]
        await self._write_in_thread(self._write_partitions, current, added)
        await self._see(f"partitions of {name}", lambda: len(self._require(name).partitions) >= total)
        return self._topics[name]

    def _write_partitions(self, current: TopicMetadata, added: list[PartitionState]) -> None:
        name = current.name
        raw, stat = self.client.get(topic_path(name))
        known = json.loads(raw)
        if len(known.get("partitions", {})) != len(current.partitions):
            raise MetadataWriteError(f"the partitions of {name} changed meanwhile; try again")
        partitions = [*current.partitions, *added]
        epoch = self.controller_epoch()  # once: a read per partition was a round trip each
        transaction = self.client.transaction()
        transaction.set_data(topic_path(name), encode_assignment(current.topic_id, partitions), version=stat.version)
        for index, state in enumerate(added, start=len(current.partitions)):
            transaction.create(f"{topic_path(name)}/partitions/{index}")
            transaction.create(state_path(name, index), encode_state(state, epoch))
        _commit(transaction, lambda: MetadataWriteError(f"the partitions of {name} changed meanwhile; try again"))

    @runs_to_completion
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        self._require(name)
        await self._write_in_thread(self._write_configs, name, configs)
        await self._see(f"configs of {name}", lambda: name in self._topics and self._topics[name].configs == configs)
        return self._topics[name]

    def _write_configs(self, name: str, configs: dict[str, str]) -> None:
        path = f"/config/topics/{name}"
        value = _json({"version": 1, "config": configs})
        try:
            self.client.set(path, value)
        except NoNodeError:
            self.client.create(path, value, makepath=True)
        self.client.create("/config/changes/config_change_", _json({"version": 2, "entity_path": f"topics/{name}"}),
                           sequence=True, makepath=True)

    # ------------------------------------------------------------------ producer ids

    @runs_to_completion
    async def allocate_producer_id(self) -> int:
        if self._next_producer_id >= self._producer_id_limit:
            start = await self._write_in_thread(self._claim_producer_id_block)
            self._next_producer_id, self._producer_id_limit = start, start + PRODUCER_ID_BLOCK
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    def _claim_producer_id_block(self) -> int:
        """Claim the next block through a conditional update of /latest_producer_id_block."""
        path = "/latest_producer_id_block"
        while True:
            try:
                raw, stat = self.client.get(path)
            except NoNodeError:
                raw, stat = b"", None
            start = int(json.loads(raw)["block_end"]) + 1 if raw else 0
            value = _json({"version": 1, "broker": self.broker_id, "block_start": str(start),
                           "block_end": str(start + PRODUCER_ID_BLOCK - 1)})
            try:
                if stat is None:
                    self.client.create(path, value, makepath=True)
                else:
                    self.client.set(path, value, version=stat.version)
                return start
            except (BadVersionError, NodeExistsError):
                continue  # another broker claimed one meanwhile

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
            versions = await self._write_in_thread(self._write_states, [
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
            self._apply_written_states(topic, states)
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

    def _apply_written_states(self, topic: str, states: dict[int, PartitionState]) -> None:
        """Partition states this broker wrote, into the view at once (one announcement for the
        topic), unless their watches brought them or later ones already."""
        latest = self._topics.get(topic)
        if latest is None:
            return
        newer = {i: s for i, s in states.items()
                 if i < len(latest.partitions) and latest.partitions[i].partition_epoch < s.partition_epoch}
        if newer:
            partitions = [newer.get(i, p) for i, p in enumerate(latest.partitions)]
            self._apply_topic(topic, replace(latest, partitions=partitions))

    def _write_states(self, writes: list[StateWrite]) -> list[int | BaseException]:
        """Conditionally write partition states (a leader's ISR changes) in multi-ops, each with
        one state change listing its states for the other brokers; per write the new znode
        version, or StalePartitionStateError when its znode changed meanwhile (the others of its
        multi-op are sent again). One multi-op per partition made a broker's death 1,300 state
        changes, which every broker listed and read while a new controller was being elected."""
        epoch = self.controller_epoch()
        results: list[int | BaseException] = [
            StalePartitionStateError(f"{topic}-{index} changed meanwhile") for topic, index, _s, _v in writes]
        for batch in _multi_op_batches(writes, epoch):
            for position in _commit_state_batch(self.client, batch, epoch, None):
                results[position] = writes[position][3] + 1
        return results

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
        def write_all() -> list[bool]:
            written = [False] * len(writes)
            for batch in _multi_op_batches(writes, epoch):
                for position in _commit_state_batch(self.client, batch, epoch, controller_epoch_version):
                    written[position] = True
            return written

        written = await self._write_in_thread(write_all)
        by_topic: dict[str, dict[int, PartitionState]] = {}
        for (topic, index, state, version), ok in zip(writes, written, strict=True):
            if ok:
                by_topic.setdefault(topic, {})[index] = replace(state, partition_epoch=version + 1)
        for topic, states in by_topic.items():
            self._apply_written_states(topic, states)
        return written

    # ------------------------------------------------------------------ elections and reassignments

    async def elect_leaders(self, partitions: list[PartitionKey], unclean: bool) -> dict[PartitionKey, int | None]:
        """Decide from the view which partitions need an election, hand those to the controller
        (/admin/preferred_replica_election, or the unclean flag in it) and wait for the result."""
        from .elections import elect_preferred, elect_unclean

        live = set(self._brokers)
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
            await self._write_in_thread(self._write_admin_request, "/admin/preferred_replica_election", request)
            elected = await self.wait_for(lambda: all(self._elected(key, unclean) for key in wanted), 15)
            for key in wanted:
                results[key] = None if elected or self._elected(key, unclean) else ErrorCode.request_timed_out
        return results

    def _elected(self, key: PartitionKey, unclean: bool) -> bool:
        state = self.partition_state(*key)
        if state is None:
            return True
        if unclean:
            return state.leader in self._brokers
        return bool(state.target_replicas) and state.leader == state.target_replicas[0]

    def _write_admin_request(self, path: str, request: dict[str, Any]) -> None:
        """Write an admin request znode, merging with one the controller has not taken yet."""
        while True:
            try:
                raw, stat = self.client.get(path)
            except NoNodeError:
                try:
                    self.client.create(path, _json(request), makepath=True)
                    return
                except NodeExistsError:
                    continue
            pending = json.loads(raw) if raw else {"partitions": []}
            merged = {**request, "partitions": pending.get("partitions", []) + request["partitions"]}
            try:
                self.client.set(path, _json(merged), version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue

    async def alter_reassignments(
        self, changes: dict[PartitionKey, list[int] | None]
    ) -> dict[PartitionKey, int | None]:
        """Check each change against the view, then hand the valid ones to the controller
        (/admin/reassign_partitions; null replicas cancel) and return once it took them."""
        from .elections import reassignment_error

        live = set(self._brokers)
        results: dict[PartitionKey, int | None] = {}
        accepted = []
        for (name, index), target in changes.items():
            state = self.partition_state(name, index)
            error = ErrorCode.unknown_topic_or_partition if state is None else reassignment_error(state, target, live)
            results[(name, index)] = error
            if error is None:
                accepted.append({"topic": name, "partition": index, "replicas": target})
        if accepted:
            await self._write_in_thread(self._write_admin_request, "/admin/reassign_partitions",
                                    {"version": 1, "partitions": accepted})
        return results

    # ------------------------------------------------------------------ failed log dirs

    async def report_offline_replicas(self, partitions: list[PartitionKey]) -> None:
        """Replace this broker's offline replicas in ZooKeeper (a persistent znode, so a session
        lost meanwhile keeps them; the broker clears them at start), then, for a new failure,
        write Kafka's log dir event notification for the controller."""
        await self._write_in_thread(self._write_offline_replicas, list(partitions))

    def _write_offline_replicas(self, partitions: list[PartitionKey]) -> None:
        self.client.ensure_path(OFFLINE_REPLICAS)
        prefix = f"{self.broker_id}-"
        stale = [child for child in self.client.get_children(OFFLINE_REPLICAS) if child.startswith(prefix)]
        if not stale and not partitions:
            return
        transaction = self.client.transaction()
        for child in stale:
            transaction.delete(f"{OFFLINE_REPLICAS}/{child}")
        if partitions:
            listed = [{"topic": topic, "partition": index} for topic, index in partitions]
            transaction.create(f"{OFFLINE_REPLICAS}/{prefix}", _json({"version": 1, "partitions": listed}),
                               sequence=True)
        results = transaction.commit()
        if any(isinstance(r, Exception) for r in results):
            raise MetadataWriteError(f"offline replicas of broker {self.broker_id} not written: {results}")
        if partitions:
            self.client.create(f"{LOG_DIR_EVENTS}/log_dir_event_", sequence=True, makepath=True, value=_json(
                {"version": 1, "broker": self.broker_id, "event": LOG_DIR_FAILURE}))

    def _watch_offline_replicas(self) -> None:
        self.client.ensure_path(OFFLINE_REPLICAS)
        ChildrenWatch(self.client, OFFLINE_REPLICAS, self._on_offline_replicas)

    def _on_offline_replicas(self, children: list[str]) -> None:
        offline: dict[int, frozenset[PartitionKey]] = {}
        for child in children:
            try:
                raw, _ = self.client.get(f"{OFFLINE_REPLICAS}/{child}")
                listed = json.loads(raw)["partitions"]
                offline[int(child.split("-")[0])] = frozenset((str(p["topic"]), int(p["partition"])) for p in listed)
            except (NoNodeError, ValueError, KeyError, TypeError):
                continue
        self._post(self._set_offline_replicas, offline)

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
        return [(name, index) for name, topic in self._topics.items()
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
        metadata = self._topics.get(name)
        if metadata is None:
            raise UnknownTopicError(f"Topic {name} does not exist")
        return metadata


def read_user_credentials(data: bytes | None) -> dict[str, Any]:
    """The SCRAM credentials in a /config/users/<user> znode's data ({} for none)."""
    return decode_user_config(read_entity_config(data))


def write_scram_credentials(client: KazooClient, changes: CredentialChanges) -> None:
    """Apply `changes` to the users' znodes (named as Kafka's Sanitizer names them) in one
    transaction (see `write_entity_configs`)."""
    write_entity_configs(client, {f"users/{sanitize(user)}": functools.partial(_updated_credentials, user, by_mechanism)
                                  for user, by_mechanism in changes.items()})


def _updated_credentials(user: str, by_mechanism: dict[str, Any], config: dict[str, str]) -> dict[str, str]:
    """A user's config map with its SCRAM credentials changed, its other keys (quotas) kept."""
    current = decode_user_config(config)
    updated = apply_credential_changes({user: current}, {user: by_mechanism}).get(user, {})
    return {k: v for k, v in config.items() if k not in current} | encode_user_config(updated)


def write_client_quotas(client: KazooClient, changes: QuotaChanges) -> None:
    """Apply `changes` to the quota entities' znodes in one transaction (see `write_entity_configs`)."""
    write_entity_configs(client, {entity.path(): functools.partial(_updated_quotas, values)
                                  for entity, values in changes.items()})


def _updated_quotas(values: dict[str, float | None], config: dict[str, str]) -> dict[str, str]:
    """An entity's config map with its quotas changed, its other keys (SCRAM credentials) kept."""
    updated = dict(config)
    for key, value in values.items():
        if value is None:
            updated.pop(key, None)
        else:
            updated[key] = encode_quota_value(key, value)
    return updated


ConfigUpdate = Callable[[dict[str, str]], dict[str, str]]


def write_entity_configs(client: KazooClient, updates: dict[str, ConfigUpdate]) -> None:
    """Rewrite entity config znodes (`/config/<entity path>`, e.g. users/alice or
    users/alice/clients/app) in one transaction, each config map through its update, with one
    /config/changes notification per entity as Kafka writes them; a znode changed meanwhile makes
    them read again and retry. Missing parents are created empty first, as Kafka's createRecursive
    does. Blocking: a worker thread's call."""
    client.ensure_path("/config/changes")
    for entity_path in updates:
        client.ensure_path(f"/config/{entity_path}".rpartition("/")[0])
    while True:
        transaction = client.transaction()
        for entity_path, update in updates.items():
            _add_config_write(client, transaction, f"/config/{entity_path}", update)
        for entity_path in updates:
            transaction.create("/config/changes/config_change_",
                               _json({"version": 2, "entity_path": entity_path}), sequence=True)
        results = transaction.commit()
        if not any(isinstance(result, Exception) for result in results):
            return
        if not any(isinstance(result, (BadVersionError, NodeExistsError, NoNodeError)) for result in results):
            raise MetadataWriteError(f"ZooKeeper refused the config change: {results!r}")


def _add_config_write(client: KazooClient, transaction: Any, path: str, update: ConfigUpdate) -> None:
    """Add the write of one entity's znode (read now, written if unchanged) to `transaction`."""
    try:
        raw, stat = client.get(path)
    except NoNodeError:
        raw, stat = b"", None
    value = json.loads(raw) if raw else {"version": 1, "config": {}}
    data = _json({"version": 1, "config": update(dict(value.get("config") or {}))})
    if stat is None:
        transaction.create(path, data)
    else:
        transaction.set_data(path, data, version=stat.version)


def read_entity_config(data: bytes | None) -> dict[str, str]:
    """The config map in an entity znode's data ({} for an empty znode, as a parent created on the way)."""
    if not data:
        return {}
    return dict(json.loads(data).get("config") or {})


def _initial_state(replicas: list[int], live: set[int]) -> PartitionState:
    """A new partition: the first live replica leads, the live replicas are the ISR."""
    isr = [b for b in replicas if b in live] or list(replicas)
    leader = isr[0] if any(b in live for b in replicas) else NO_LEADER
    return PartitionState(leader, 0, list(replicas), isr)


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


StateWrite = tuple[str, int, PartitionState, int]  # topic, index, state, expected znode version
_NOT_TRIED = (RolledBackError, RuntimeInconsistency)  # a failed multi's other operations


def _multi_op_batches(writes: list[StateWrite], epoch: int) -> list[list[tuple[int, StateWrite]]]:
    """`writes` (with their positions) cut into multi-ops of at most MULTI_OP_BYTES each (the
    state znodes' paths and data, and the state change listing them)."""
    batches: list[list[tuple[int, StateWrite]]] = [[]]
    size = 0
    for position, write in enumerate(writes):
        topic, index, state, _version = write
        cost = len(state_path(topic, index)) + 2 * len(encode_state(state, epoch)) + MULTI_OP_OVERHEAD_BYTES
        if batches[-1] and size + cost > MULTI_OP_BYTES:
            batches.append([])
            size = 0
        batches[-1].append((position, write))
        size += cost
    return [batch for batch in batches if batch]


def _commit_state_batch(client: KazooClient, batch: list[tuple[int, StateWrite]], epoch: int,
                        epoch_version: int | None) -> list[int]:
    """Commit one batch of conditional state writes, and the state change listing them, as a
    multi-op fenced by /controller_epoch's version (a controller's; None: a leader's, unfenced);
    the positions written. A write whose znode moved on (or is gone) fails the whole multi: the
    others still current are sent once more (a second failure leaves the batch to the next pass,
    which decides from fresher states: leaders shrinking ISRs meanwhile kept a retry loop going
    for 13 s). A fenced controller writes nothing."""
    pending = list(batch)
    fenced = epoch_version is not None
    for _attempt in range(STATE_BATCH_ATTEMPTS):
        if not pending:
            break
        transaction = client.transaction()
        if fenced:
            transaction.check("/controller_epoch", epoch_version)
        for _, (topic, index, state, version) in pending:
            transaction.set_data(state_path(topic, index), encode_state(state, epoch), version=version)
        transaction.create(f"{STATE_CHANGES}/{STATE_CHANGE_PREFIX}", encode_state_changes(
            [(t, i, s.leader, s.leader_epoch, s.isr, v + 1) for _, (t, i, s, v) in pending]), sequence=True)
        results = transaction.commit()
        if not any(isinstance(result, Exception) for result in results):
            return [position for position, _ in pending]
        if fenced and isinstance(results[0], Exception) and not isinstance(results[0], _NOT_TRIED):
            return []  # another controller's epoch
        lost = {i for i, result in enumerate(results[int(fenced):-1])
                if isinstance(result, Exception) and not isinstance(result, _NOT_TRIED)}
        if not lost:
            raise MetadataWriteError(f"ZooKeeper refused the partition states: {results[-1]!r}")
        pending = _still_current(client, [write for i, write in enumerate(pending) if i not in lost])
    return []


def _still_current(client: KazooClient, pending: list[tuple[int, StateWrite]]) -> list[tuple[int, StateWrite]]:
    """The writes whose znode still has the version they expect. A failed multi names only its
    first stale write: after leaders had shrunk 1,300 ISRs, dropping one per attempt took minutes."""
    stats = [client.exists_async(state_path(topic, index)) for _, (topic, index, _s, _v) in pending]
    return [write for write, stat in zip(pending, stats, strict=True)
            if (found := stat.get()) is not None and found.version == write[1][3]]


def _commit(transaction: Any, failure: Callable[[], Exception]) -> None:
    """Commit a kazoo transaction; raise `failure()` if any of its operations failed."""
    results = transaction.commit()
    if any(isinstance(result, Exception) for result in results):
        raise failure()
