"""Cluster metadata: brokers, topics (ids, partition assignment, leader state) and configs.

`MetadataStore` is the interface the broker talks to. `EmbeddedMetadataStore` keeps it in one
JSON file in the data dir for a single broker that needs no ZooKeeper; a ZooKeeper-backed
store (brokers under /brokers/ids, topics under /brokers/topics, configs under /config, a
controller elected through /controller) implements the same interface for a cluster.
Changes are announced to listeners so that partitions follow leadership changes.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from ..errors import MetadataWriteError, TopicExistsError, UnknownTopicError
from ..security.acl import (
    RESOURCE_TYPE_NAMES,
    AccessControlEntry,
    AclBinding,
    AclTable,
    PatternType,
    ResourcePattern,
    decode_entries,
    encode_entries,
    resource_type_named,
)
from ..security.acl import (
    apply_changes as apply_acl_changes,
)
from ..security.listeners import ListenerEndpoint
from ..security.quotas import (
    QuotaChanges,
    QuotaConfigs,
    QuotaEntity,
    apply_quota_changes,
    decode_quota_config,
    encode_quota_value,
)
from ..security.scram import (
    CredentialChanges,
    UserCredentials,
    decode_user_config,
    encode_user_config,
)
from ..security.scram import apply_changes as apply_credential_changes
from ..storage.files import replace_file

T = TypeVar("T")

METADATA_FILE = "logbus-metadata.json"
PRODUCER_ID_BLOCK = 1000


class BrokerIdInUseError(Exception):
    """Another live broker is registered with this broker id."""


class StalePartitionStateError(Exception):
    """A conditional partition-state update lost a race: the state it was based on changed.

    The caller re-reads the partition's state (it arrives through the topic listener) and decides
    again from it; nothing of the refused update took effect. Kafka answers INVALID_UPDATE_VERSION
    or FENCED_LEADER_EPOCH for the same case of AlterPartition.
    """


@dataclass(slots=True)
class BrokerInfo:
    """A live broker as registered: an advertised endpoint per listener, and its rack."""

    broker_id: int
    endpoints: tuple[ListenerEndpoint, ...]
    rack: str | None = None

    def endpoint(self, listener_name: str) -> ListenerEndpoint | None:
        """Where to reach this broker through `listener_name`; None when it has no such listener."""
        return next((e for e in self.endpoints if e.name == listener_name), None)


NO_LEADER = -1


@dataclass(slots=True)
class PartitionState:
    """Who leads a partition and who replicates it (the leader-and-ISR record).

    `leader` is NO_LEADER (-1) while the partition is offline. `leader_epoch` grows with every
    leader change; `partition_epoch` with every change of this record at all (ISR changes too;
    in ZooKeeper it is the state znode's version), so a conditional update names the state it
    was computed from. `adding_replicas`/`removing_replicas` describe a reassignment in
    progress (KIP-455): `replicas` holds old and new replicas together until it completes.
    """

    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    partition_epoch: int = 0
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)

    @property
    def target_replicas(self) -> list[int]:
        """The replicas once any reassignment in progress has completed."""
        return [r for r in self.replicas if r not in self.removing_replicas]


@dataclass(frozen=True, slots=True)
class IsrChange:
    """A leader asks for a new ISR of `topic`-`index`, conditional on the state it saw (its
    leader epoch and partition epoch): one partition of Kafka's AlterPartition."""

    topic: str
    index: int
    leader_epoch: int
    partition_epoch: int
    isr: list[int]


@dataclass(slots=True)
class TopicMetadata:
    name: str
    topic_id: str  # uuid in canonical text form
    partitions: list[PartitionState]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def assign_replicas(
    brokers: list[int], num_partitions: int, replication_factor: int, first_partition: int = 0
) -> list[list[int]]:
    """Spread partitions (and their replicas) evenly over brokers, round robin."""
    ordered = sorted(brokers)
    return [
        [ordered[(p + r) % len(ordered)] for r in range(replication_factor)]
        for p in range(first_partition, first_partition + num_partitions)
    ]


Listener = Callable[[str, TopicMetadata | None], None]
BrokerListener = Callable[[list[BrokerInfo]], None]
AclListener = Callable[[], None]
ConfigListener = Callable[[str], None]
PartitionKey = tuple[str, int]
EntityConfigs = dict[str, dict[str, str]]


class MetadataStore(ABC):
    """What the broker needs of cluster metadata, whatever stores it."""

    cluster_id: str
    controller_id: int  # -1 while no controller is known
    broker_id: int  # the broker this store serves

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._broker_listeners: list[BrokerListener] = []
        self._acl_listeners: list[AclListener] = []
        self._acls: AclTable = {}
        self._config_listeners: list[ConfigListener] = []
        self._entity_configs: EntityConfigs = {}
        self._offline_replicas: dict[int, frozenset[PartitionKey]] = {}

    def add_listener(self, listener: Listener) -> None:
        """Call `listener(topic, metadata or None when deleted)` after every topic change,
        partition-state changes (leader, ISR, epochs, reassignment) included. Always on the event loop."""
        self._listeners.append(listener)

    def _announce(self, topic: str, metadata: TopicMetadata | None) -> None:
        for listener in self._listeners:
            listener(topic, metadata)

    def add_broker_listener(self, listener: BrokerListener) -> None:
        """Call `listener(live brokers)` whenever a broker joins, leaves or starts a controlled
        shutdown. Always on the event loop."""
        self._broker_listeners.append(listener)

    def shutting_down_brokers(self) -> frozenset[int]:
        """Live brokers in controlled shutdown: leaders must not take them into an ISR (KIP-841's
        rule), or a broker about to stop would hold acks=all sends until its lag expires."""
        return frozenset()

    def offline_replicas(self) -> dict[int, frozenset[PartitionKey]]:
        """Per broker, the replicas it hosts in a failed log dir (KIP-112): they neither lead nor
        follow there until that broker restarts. Metadata lists them as offline replicas."""
        return self._offline_replicas

    async def report_offline_replicas(self, partitions: list[PartitionKey]) -> None:
        """This broker's replicas in failed log dirs (all of them, [] at start). One broker has no
        other replica to elect: they are only recorded."""
        self._set_offline_replicas({**self._offline_replicas, self.broker_id: frozenset(partitions)})

    def _set_offline_replicas(self, offline: dict[int, frozenset[PartitionKey]]) -> None:
        offline = {broker: keys for broker, keys in offline.items() if keys}
        if offline != self._offline_replicas:
            self._offline_replicas = offline
            self._announce_brokers()

    def _announce_brokers(self) -> None:
        live = self.brokers()
        for listener in self._broker_listeners:
            listener(live)

    def acls(self) -> AclTable:
        """Every ACL, by resource pattern. The table is replaced on a change, never mutated."""
        return self._acls

    @abstractmethod
    async def alter_acls(self, added: list[AclBinding], removed: list[AclBinding]) -> None:
        """Add and remove ACL bindings (CreateAcls, DeleteAcls): written, then applied and announced.
        Adding one that exists or removing one that does not changes nothing."""

    def check_acl_pattern(self, pattern: ResourcePattern) -> None:  # noqa: B027 - most stores keep any name
        """Raise InvalidAclError for a pattern this store cannot keep (checked before any write)."""
        return None

    def add_acl_listener(self, listener: AclListener) -> None:
        """Call `listener()` after every change of the ACLs. Always on the event loop."""
        self._acl_listeners.append(listener)

    def entity_configs(self) -> EntityConfigs:
        """Dynamic configs by entity path, as Kafka names them under /config: `brokers/<id>`,
        `brokers/<default>` (the cluster-wide broker default) and `groups/<group>` (KIP-848 group
        configs). The mapping is replaced on a change, never mutated."""
        return self._entity_configs

    @abstractmethod
    async def set_entity_configs(self, entity: str, configs: dict[str, str]) -> None:
        """Make `configs` the whole config of `entity` (empty: none): written, then applied and
        announced. Raises MetadataWriteError when the write fails."""

    def add_config_listener(self, listener: ConfigListener) -> None:
        """Call `listener(entity path)` after every change of an entity's configs. Always on the event loop."""
        self._config_listeners.append(listener)

    def _apply_entity_config(self, entity: str, configs: dict[str, str]) -> None:
        if self._entity_configs.get(entity, {}) == configs:
            return
        updated = {e: found for e, found in self._entity_configs.items() if e != entity}
        if configs:
            updated[entity] = dict(configs)
        self._entity_configs = updated
        for listener in self._config_listeners:
            listener(entity)

    def _apply_acls(self, acls: AclTable) -> None:
        if acls != self._acls:
            self._acls = acls
            for listener in self._acl_listeners:
                listener()

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def register_broker(self, broker: BrokerInfo) -> None: ...

    @abstractmethod
    def brokers(self) -> list[BrokerInfo]: ...

    @abstractmethod
    def topics(self) -> dict[str, TopicMetadata]: ...

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics().get(name)

    def topic_by_id(self, topic_id: str) -> TopicMetadata | None:
        return next((t for t in self.topics().values() if t.topic_id == topic_id), None)

    @abstractmethod
    async def create_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str],
        internal: bool = False, assignments: list[list[int]] | None = None, wait_s: float = 0.0,
    ) -> TopicMetadata:
        """Create a topic; `assignments` (replicas per partition) or else an even spread. A store
        whose view follows its writes waits for the topic to enter it for `wait_s` (the request's
        timeout) or its usual bound, whichever is longer."""

    @abstractmethod
    async def delete_topic(self, name: str) -> None: ...

    @abstractmethod
    async def add_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None = None
    ) -> TopicMetadata:
        """Grow the topic to `total` partitions; `assignments` gives the new ones' replicas."""

    @abstractmethod
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata: ...

    @abstractmethod
    async def allocate_producer_id(self) -> int: ...

    @abstractmethod
    async def alter_partition(self, topic: str, index: int, leader_epoch: int, partition_epoch: int,
                              isr: list[int]) -> PartitionState:
        """Set the ISR of a partition this broker leads, if its state is still the one the leader
        saw (`leader_epoch` and `partition_epoch` unchanged); returns the new state, written
        before it is applied and announced. Raises StalePartitionStateError otherwise."""

    async def alter_partitions(self, changes: list[IsrChange]) -> list[PartitionState | BaseException]:
        """Several `alter_partition`s at once (Kafka's AlterPartition carries many partitions):
        per change, in order, the new state or the exception it raised. A store that can send
        them together overrides this."""
        return await asyncio.gather(
            *(self.alter_partition(c.topic, c.index, c.leader_epoch, c.partition_epoch, c.isr) for c in changes),
            return_exceptions=True)

    @abstractmethod
    async def elect_leaders(self, partitions: list[PartitionKey], unclean: bool) -> dict[PartitionKey, int | None]:
        """ElectLeaders: preferred (`unclean` False: the first replica, if alive and in the ISR)
        or unclean election. Per partition: None (elected) or a Kafka error code
        (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
        UNKNOWN_TOPIC_OR_PARTITION)."""

    @abstractmethod
    async def alter_reassignments(
        self, changes: dict[PartitionKey, list[int] | None]
    ) -> dict[PartitionKey, int | None]:
        """AlterPartitionReassignments: per partition the target replicas, or None to cancel.
        Per partition: None (accepted) or a Kafka error code (INVALID_REPLICA_ASSIGNMENT,
        NO_REASSIGNMENT_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION)."""

    @abstractmethod
    def scram_credentials(self) -> UserCredentials:
        """Every user's SCRAM credentials (user -> mechanism -> credential), as this broker sees
        them now; changes made on any broker show here (a ZooKeeper store: through its watch)."""

    @abstractmethod
    async def alter_scram_credentials(self, changes: CredentialChanges) -> None:
        """Set (a credential) or delete (None) SCRAM credentials, all of `changes` or none: written
        first, visible here once written. Raises MetadataWriteError when the write fails."""

    @abstractmethod
    def client_quotas(self) -> QuotaConfigs:
        """Every client quota entity's quotas, as this broker sees them now (a new mapping after
        every change, the same one otherwise, so that callers can tell by identity)."""

    @abstractmethod
    async def alter_client_quotas(self, changes: QuotaChanges) -> None:
        """Set (a value) or remove (None) client quotas, all of `changes` or none: written first,
        visible here once written. Raises MetadataWriteError when the write fails."""

    def partition_state(self, name: str, index: int) -> PartitionState | None:
        topic = self.topics().get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def list_reassignments(self, partitions: list[PartitionKey] | None = None) -> dict[PartitionKey, PartitionState]:
        """ListPartitionReassignments: the partitions (of those asked, or all) with one in progress."""
        found = {}
        for name, topic in self.topics().items():
            for index, state in enumerate(topic.partitions):
                key = (name, index)
                if (state.adding_replicas or state.removing_replicas) and (partitions is None or key in partitions):
                    found[key] = state
        return found

    async def close(self) -> None:
        return None


def runs_to_completion(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Make a metadata change finish even when the request that asked for it is cancelled.

    A client that hangs up cancels its request's task. Cancelled between saving the file and
    announcing the change, a topic would exist on disk but never be opened until a restart. The
    change runs in its own task; the caller awaits it through `asyncio.shield`.
    """

    @functools.wraps(method)
    async def shielded(*args: object, **kwargs: object) -> T:
        task = asyncio.ensure_future(method(*args, **kwargs))
        task.add_done_callback(_retrieve_exception)
        return await asyncio.shield(task)

    return shielded


def _retrieve_exception(task: asyncio.Future) -> None:
    """A change whose caller is gone may still fail; its error has nobody to go to."""
    if not task.cancelled():
        task.exception()


def write_state_file(path: str, state: dict[str, Any]) -> None:
    """Replace `path` with `state` durably (temp file fsynced, renamed, directory fsynced).

    Without the directory fsync the rename itself may be lost in a power cut, and with it the
    change the caller has already acknowledged.
    """
    replace_file(path, json.dumps(state, indent=1))


StateWriter = Callable[[str, dict[str, Any]], None]


class EmbeddedMetadataStore(MetadataStore):
    """Metadata of a single broker, in `<data dir>/logbus-metadata.json` (atomic rewrites).

    Every change is written first and applied after: a change builds the new state beside the
    current one (copy on write; `TopicMetadata` objects already handed out are never mutated),
    writes it with `writer`, and only when that succeeded becomes the state that is served and
    announced. A failed write (e.g. a full disk) raises `MetadataWriteError` and changes nothing.
    """

    def __init__(self, data_dir: str, broker_id: int, writer: StateWriter = write_state_file) -> None:
        super().__init__()
        self.path = os.path.join(data_dir, METADATA_FILE)
        self.broker_id = broker_id
        self.controller_id = broker_id
        self._topics: dict[str, TopicMetadata] = {}
        self._brokers: dict[int, BrokerInfo] = {}
        self._next_producer_id = 0
        self._producer_id_limit = 0
        self._users: UserCredentials = {}
        self._quotas: QuotaConfigs = {}
        self.cluster_id = ""
        self._lock = asyncio.Lock()
        self._write = writer

    async def start(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as handle:
                state = json.load(handle)
            self.cluster_id = state["cluster_id"]
            self._producer_id_limit = state.get("producer_id_limit", 0)
            self._acls = decode_acl_table(state.get("acls", []))
            self._next_producer_id = self._producer_id_limit
            self._users = {user: decode_user_config(config) for user, config in state.get("users", {}).items()}
            entities = {QuotaEntity.from_path(path): config for path, config in state.get("client_quotas", {}).items()}
            self._quotas = {entity: decode_quota_config(config, entity.keys) for entity, config in entities.items()}
            self._entity_configs = state.get("entity_configs", {})
            for raw in state["topics"]:
                partitions = [PartitionState(**p) for p in raw.pop("partitions")]
                self._topics[raw["name"]] = TopicMetadata(partitions=partitions, **raw)
        else:
            self.cluster_id = new_cluster_id()
            self._write(self.path, self._state(self._topics, self._producer_id_limit, self._acls, self._users,
                                               self._quotas, self._entity_configs))

    def _state(self, topics: dict[str, TopicMetadata], producer_id_limit: int, acls: AclTable,
               users: UserCredentials, quotas: QuotaConfigs, entity_configs: EntityConfigs) -> dict[str, Any]:
        return {
            "cluster_id": self.cluster_id,
            "producer_id_limit": producer_id_limit,
            "topics": [asdict(t) for t in topics.values()],
            "acls": encode_acl_table(acls),
            "users": {user: encode_user_config(by_mechanism) for user, by_mechanism in sorted(users.items())},
            "client_quotas": {entity.path(): {key: encode_quota_value(key, value) for key, value in values.items()}
                              for entity, values in quotas.items()},  # keyed by Kafka's entity path
            "entity_configs": entity_configs,  # keyed by Kafka's entity path, e.g. brokers/<default>
        }

    async def _commit(self, topics: dict[str, TopicMetadata], producer_id_limit: int | None = None,
                      acls: AclTable | None = None, users: UserCredentials | None = None,
                      quotas: QuotaConfigs | None = None, entity_configs: EntityConfigs | None = None) -> None:
        """Write `topics` (the producer id limit, the ACLs, the users, the quotas, the entity configs)
        durably, then make them the current state."""
        limit = self._producer_id_limit if producer_id_limit is None else producer_id_limit
        new_acls = self._acls if acls is None else acls
        new_users = self._users if users is None else users
        new_quotas = self._quotas if quotas is None else quotas
        new_configs = self._entity_configs if entity_configs is None else entity_configs
        try:
            state = self._state(topics, limit, new_acls, new_users, new_quotas, new_configs)
            await asyncio.to_thread(self._write, self.path, state)
        except OSError as exc:
            raise MetadataWriteError(f"cannot write {self.path}: {exc}") from exc
        self._topics = topics
        self._producer_id_limit = limit
        self._apply_acls(new_acls)
        self._users = new_users
        self._quotas = new_quotas

    @runs_to_completion
    async def alter_acls(self, added: list[AclBinding], removed: list[AclBinding]) -> None:
        async with self._lock:
            await self._commit(self._topics, acls=apply_acl_changes(self._acls, added, removed))

    def scram_credentials(self) -> UserCredentials:
        return self._users

    @runs_to_completion
    async def alter_scram_credentials(self, changes: CredentialChanges) -> None:
        async with self._lock:
            await self._commit(self._topics, users=apply_credential_changes(self._users, changes))

    def client_quotas(self) -> QuotaConfigs:
        return self._quotas

    @runs_to_completion
    async def alter_client_quotas(self, changes: QuotaChanges) -> None:
        async with self._lock:
            await self._commit(self._topics, quotas=apply_quota_changes(self._quotas, changes))

    @runs_to_completion
    async def set_entity_configs(self, entity: str, configs: dict[str, str]) -> None:
        async with self._lock:
            updated = {e: found for e, found in self._entity_configs.items() if e != entity}
            if configs:
                updated[entity] = dict(configs)
            await self._commit(self._topics, entity_configs=updated)
            self._apply_entity_config(entity, configs)  # written: now applied and announced

    async def register_broker(self, broker: BrokerInfo) -> None:
        self._brokers[broker.broker_id] = broker
        self._announce_brokers()

    def brokers(self) -> list[BrokerInfo]:
        return list(self._brokers.values())

    def topics(self) -> dict[str, TopicMetadata]:
        return self._topics

    @runs_to_completion
    async def create_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str],
        internal: bool = False, assignments: list[list[int]] | None = None, wait_s: float = 0.0,
    ) -> TopicMetadata:
        async with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            assignment = assignments or assign_replicas(list(self._brokers), num_partitions, replication_factor)
            metadata = TopicMetadata(
                name, str(uuid.uuid4()),
                [PartitionState(r[0], 0, list(r), list(r)) for r in assignment],
                dict(configs), internal,
            )
            await self._commit({**self._topics, name: metadata})
        self._announce(name, metadata)  # visible once saved, and announced (opened) right after
        return metadata

    @runs_to_completion
    async def delete_topic(self, name: str) -> None:
        async with self._lock:
            self._require(name)
            await self._commit({n: t for n, t in self._topics.items() if n != name})
        self._announce(name, None)

    @runs_to_completion
    async def add_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None = None
    ) -> TopicMetadata:
        async with self._lock:
            current = self._require(name)
            count = len(current.partitions)
            replication = len(current.partitions[0].replicas) if current.partitions else 1
            if assignments is None:
                assignments = assign_replicas(list(self._brokers), total - count, replication, count)
            added = [PartitionState(r[0], 0, list(r), list(r)) for r in assignments]
            metadata = replace(current, partitions=[*current.partitions, *added])
            await self._commit({**self._topics, name: metadata})
        self._announce(name, metadata)
        return metadata

    @runs_to_completion
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        async with self._lock:
            metadata = replace(self._require(name), configs=dict(configs))
            await self._commit({**self._topics, name: metadata})
        self._announce(name, metadata)
        return metadata

    @runs_to_completion
    async def allocate_producer_id(self) -> int:
        """Hand out a producer id, persisting the limit a block at a time (no reuse after a crash).

        An id is handed out only once the limit above it is on disk; a failed write raises
        `MetadataWriteError` and hands out nothing.
        """
        async with self._lock:
            if self._next_producer_id >= self._producer_id_limit:
                await self._commit(self._topics, self._next_producer_id + PRODUCER_ID_BLOCK)
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            return producer_id

    @runs_to_completion
    async def alter_partition(self, topic: str, index: int, leader_epoch: int, partition_epoch: int,
                              isr: list[int]) -> PartitionState:
        async with self._lock:
            current = self._require(topic)
            if not 0 <= index < len(current.partitions):
                raise UnknownTopicError(f"{topic}-{index}")
            state = current.partitions[index]
            if (state.leader_epoch, state.partition_epoch) != (leader_epoch, partition_epoch):
                raise StalePartitionStateError(
                    f"{topic}-{index} is at leader epoch {state.leader_epoch}, partition epoch "
                    f"{state.partition_epoch}; the update was based on {leader_epoch}, {partition_epoch}")
            new_state = replace(state, isr=list(isr), partition_epoch=state.partition_epoch + 1)
            metadata = await self._commit_partitions(current, {index: new_state})
        self._announce(topic, metadata)
        return new_state

    async def elect_leaders(self, partitions: list[PartitionKey], unclean: bool) -> dict[PartitionKey, int | None]:
        """One broker: it leads every partition already, so each answer is ELECTION_NOT_NEEDED
        (or UNKNOWN_TOPIC_OR_PARTITION), as a one-broker Kafka answers."""
        from .elections import elect_preferred, elect_unclean

        live = {b.broker_id for b in self._brokers.values()}
        results: dict[PartitionKey, int | None] = {}
        for name, index in partitions:
            state = self.partition_state(name, index)
            if state is None:
                results[(name, index)] = ErrorCode.unknown_topic_or_partition
                continue
            decided = elect_unclean(state, live) if unclean else elect_preferred(state, live)
            # one broker leads all it hosts: an election that would change something cannot happen
            results[(name, index)] = decided if isinstance(decided, ErrorCode) else ErrorCode.election_not_needed
        return results

    async def alter_reassignments(
        self, changes: dict[PartitionKey, list[int] | None]
    ) -> dict[PartitionKey, int | None]:
        """One broker: the only assignment it can hold is itself, which is already in place; a
        target naming another broker is INVALID_REPLICA_ASSIGNMENT, a cancel finds nothing in progress."""
        from .elections import reassignment_outcome

        live = {b.broker_id for b in self._brokers.values()}
        results: dict[PartitionKey, int | None] = {}
        for key, target in changes.items():
            results[key] = reassignment_outcome(self.partition_state(*key), target, live)
        return results

    async def _commit_partitions(self, topic: TopicMetadata, states: dict[int, PartitionState]) -> TopicMetadata:
        """Write `topic` with the partitions in `states` replaced; returns the new metadata."""
        partitions = [states.get(i, p) for i, p in enumerate(topic.partitions)]
        metadata = replace(topic, partitions=partitions)
        await self._commit({**self._topics, topic.name: metadata})
        return metadata

    def _require(self, name: str) -> TopicMetadata:
        metadata = self._topics.get(name)
        if metadata is None:
            raise UnknownTopicError(f"Topic {name} does not exist")
        return metadata


def encode_acl_table(acls: AclTable) -> list[dict[str, Any]]:
    """The ACLs for the embedded state file: per resource pattern, Kafka's ZooKeeper JSON."""
    return [{"resource_type": RESOURCE_TYPE_NAMES[p.resource_type], "name": p.name,
             "pattern_type": p.pattern_type.name, **encode_entries(entries)}
            for p, entries in sorted(acls.items(), key=lambda item: (item[0].resource_type, item[0].name,
                                                                     item[0].pattern_type))]


def decode_acl_table(raw: list[dict[str, Any]]) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    return {ResourcePattern(resource_type_named(r["resource_type"]), r["name"], PatternType[r["pattern_type"]]):
            decode_entries(r) for r in raw}
