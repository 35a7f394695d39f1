"""The ZooKeeper store's writes: blocking calls on a KazooClient, each run in a worker thread.

Every write is one ZooKeeper transaction where it can be (a topic with its partition states, a
batch of conditional state writes with the state change listing them, entity configs with their
change notifications), or a conditional update retried on a lost race (ACLs, producer id blocks,
admin requests). Partition-state writes are cut into multi-ops within ZooKeeper's jute.maxbuffer
(`multi_op_batches`), as Kafka's controller batches them.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency

from ..security.acl import AclBinding, ResourcePattern, decode_entries, encode_entries
from ..security.acl import apply_changes as apply_acl_changes
from ..security.quotas import QuotaChanges, encode_quota_value, sanitize
from ..security.scram import CredentialChanges, decode_user_config, encode_user_config
from ..security.scram import apply_changes as apply_credential_changes
from .metadata import (
    MetadataWriteError,
    PartitionKey,
    PartitionState,
    StalePartitionStateError,
    TopicExistsError,
    TopicMetadata,
    new_cluster_id,
)
from .zk_data import (
    CLIENTS,
    CONFIG_ENTITIES,
    CONTROLLED_SHUTDOWN,
    EXTENDED_ACL_CHANGES,
    IPS,
    LITERAL_ACL_CHANGES,
    LITERAL_ACLS,
    LOG_DIR_EVENTS,
    LOG_DIR_FAILURE,
    OFFLINE_REPLICAS,
    PREFIXED_ACLS,
    STATE_CHANGE_PREFIX,
    STATE_CHANGES,
    USERS,
    acl_path,
    encode_acl_change,
    encode_assignment,
    encode_json,
    encode_state,
    encode_state_changes,
    state_path,
    topic_path,
)

PRODUCER_ID_BLOCK = 1000
# A multi-op's size bound: half of ZooKeeper's jute.maxbuffer default (1 MB), which bounds a request
MULTI_OP_BYTES = 512 * 1024
MULTI_OP_OVERHEAD_BYTES = 32  # per set_data in a multi: header, version, lengths
STATE_CHANGE_DELETES_PER_MULTI = 1000
STATE_BATCH_ATTEMPTS = 2
StateWrite = tuple[str, int, PartitionState, int]  # topic, index, state, expected znode version
_NOT_TRIED = (RolledBackError, RuntimeInconsistency)  # a failed multi's other operations


def prepare_layout(client: KazooClient) -> str:
    """Create the chroot and the fixed paths if missing; returns the cluster id (made if new)."""
    for path in ("/brokers/ids", "/brokers/topics", "/config/topics", USERS, CLIENTS, IPS, "/config/changes",
                 *(f"/config/{kind}" for kind in CONFIG_ENTITIES),
                 "/admin/delete_topics", CONTROLLED_SHUTDOWN, STATE_CHANGES, LITERAL_ACLS, PREFIXED_ACLS,
                 LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES):
        client.ensure_path(path)
    with contextlib.suppress(NodeExistsError):
        client.create("/cluster/id", encode_json({"version": "1", "id": new_cluster_id()}), makepath=True)
    raw, _ = client.get("/cluster/id")
    return json.loads(raw)["id"]


def write_new_topic(client: KazooClient, name: str, topic_id: str, partitions: list[PartitionState],
                    configs: dict[str, str]) -> None:
    """The topic's znodes in one transaction, after one round trip of reads (its checks and
    the controller epoch, sent together; the epoch read once per partition made a
    100-partition topic 100 round trips one after another)."""
    reads = [client.exists_async(topic_path(name)), client.exists_async(f"/admin/delete_topics/{name}"),
             client.get_async("/controller_epoch")]
    if reads[0].get() or reads[1].get():
        raise TopicExistsError(f"Topic '{name}' already exists.")
    try:
        epoch = int(reads[2].get()[0])
    except (NoNodeError, ValueError):
        epoch = 0
    transaction = client.transaction()
    transaction.create(f"/config/topics/{name}", encode_json({"version": 1, "config": configs}))
    transaction.create(topic_path(name), encode_assignment(topic_id, partitions))
    transaction.create(f"{topic_path(name)}/partitions")
    for index, state in enumerate(partitions):
        transaction.create(f"{topic_path(name)}/partitions/{index}")
        transaction.create(state_path(name, index), encode_state(state, epoch))
    _commit(transaction, lambda: TopicExistsError(f"Topic '{name}' already exists."))


def read_controller_epoch(client: KazooClient) -> int:
    try:
        raw, _ = client.get("/controller_epoch")
        return int(raw)
    except (NoNodeError, ValueError):
        return 0


def write_partitions(client: KazooClient, current: TopicMetadata, added: list[PartitionState]) -> None:
    name = current.name
    raw, stat = client.get(topic_path(name))
    known = json.loads(raw)
    if len(known.get("partitions", {})) != len(current.partitions):
        raise MetadataWriteError(f"the partitions of {name} changed meanwhile; try again")
    partitions = [*current.partitions, *added]
    epoch = read_controller_epoch(client)  # once: a read per partition was a round trip each
    transaction = client.transaction()
    transaction.set_data(topic_path(name), encode_assignment(current.topic_id, partitions), version=stat.version)
    for index, state in enumerate(added, start=len(current.partitions)):
        transaction.create(f"{topic_path(name)}/partitions/{index}")
        transaction.create(state_path(name, index), encode_state(state, epoch))
    _commit(transaction, lambda: MetadataWriteError(f"the partitions of {name} changed meanwhile; try again"))


def write_topic_configs(client: KazooClient, name: str, configs: dict[str, str]) -> None:
    path = f"/config/topics/{name}"
    value = encode_json({"version": 1, "config": configs})
    try:
        client.set(path, value)
    except NoNodeError:
        client.create(path, value, makepath=True)
    client.create("/config/changes/config_change_", encode_json({"version": 2, "entity_path": f"topics/{name}"}),
                  sequence=True, makepath=True)


def claim_producer_id_block(client: KazooClient, broker_id: int) -> int:
    """Claim the next block through a conditional update of /latest_producer_id_block."""
    path = "/latest_producer_id_block"
    while True:
        try:
            raw, stat = client.get(path)
        except NoNodeError:
            raw, stat = b"", None
        start = int(json.loads(raw)["block_end"]) + 1 if raw else 0
        value = encode_json({"version": 1, "broker": broker_id, "block_start": str(start),
                             "block_end": str(start + PRODUCER_ID_BLOCK - 1)})
        try:
            if stat is None:
                client.create(path, value, makepath=True)
            else:
                client.set(path, value, version=stat.version)
            return start
        except (BadVersionError, NodeExistsError):
            continue  # another broker claimed one meanwhile


def write_states(client: KazooClient, writes: list[StateWrite]) -> list[int | BaseException]:
    """Conditionally write partition states (a leader's ISR changes) in multi-ops, each with
    one state change listing its states for the other brokers; per write the new znode
    version, or StalePartitionStateError when its znode changed meanwhile (the others of its
    multi-op are sent again). One multi-op per partition made a broker's death 1,300 state
    changes, which every broker listed and read while a new controller was being elected."""
    epoch = read_controller_epoch(client)
    results: list[int | BaseException] = [
        StalePartitionStateError(f"{topic}-{index} changed meanwhile") for topic, index, _s, _v in writes]
    for position in commit_state_batches(client, multi_op_batches(writes, epoch), epoch, None):
        results[position] = writes[position][3] + 1
    return results


def write_controller_states(client: KazooClient, writes: list[StateWrite], epoch: int,
                            controller_epoch_version: int) -> list[bool]:
    """A controller's state writes, fenced by /controller_epoch (see
    `ZooKeeperMetadataStore.write_states_as_controller`); True for each one written."""
    written = [False] * len(writes)
    for position in commit_state_batches(client, multi_op_batches(writes, epoch), epoch, controller_epoch_version):
        written[position] = True
    return written


def multi_op_batches(writes: list[StateWrite], epoch: int) -> list[list[tuple[int, StateWrite]]]:
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


def commit_state_batches(client: KazooClient, batches: list[list[tuple[int, StateWrite]]], epoch: int,
                         epoch_version: int | None) -> list[int]:
    """Commit batches of conditional state writes, each with the state change listing them, as
    multi-ops fenced by /controller_epoch's version (a controller's; None: a leader's, unfenced),
    every batch's first attempt sent before any answer is awaited: ZooKeeper commits one
    session's requests in order, so the multi-ops cost one round trip together, not one each, as
    Kafka's controller pipelines its ZooKeeper writes (a restarted follower's 5,000 ISR
    expansions were five writes one after the other, seconds each on a loaded host). The
    positions written."""
    sent = [(batch, _state_transaction(client, batch, epoch, epoch_version).commit_async()) for batch in batches]
    return [position for batch, answer in sent
            for position in _settle_state_batch(client, batch, epoch, epoch_version, answer.get())]


def _state_transaction(client: KazooClient, pending: list[tuple[int, StateWrite]], epoch: int,
                       epoch_version: int | None) -> TransactionRequest:
    """The multi-op of `pending`'s writes and the state change listing them."""
    transaction = client.transaction()
    if epoch_version is not None:
        transaction.check("/controller_epoch", epoch_version)
    for _, (topic, index, state, version) in pending:
        transaction.set_data(state_path(topic, index), encode_state(state, epoch), version=version)
    transaction.create(f"{STATE_CHANGES}/{STATE_CHANGE_PREFIX}", encode_state_changes(
        [(t, i, s.leader, s.leader_epoch, s.isr, v + 1) for _, (t, i, s, v) in pending]), sequence=True)
    return transaction


def _settle_state_batch(client: KazooClient, batch: list[tuple[int, StateWrite]], epoch: int,
                        epoch_version: int | None, results: list[Any]) -> list[int]:
    """The positions of `batch` written, given the `results` of its first multi-op. A write whose
    znode moved on (or is gone) fails the whole multi: the others still current are sent once
    more (a second failure leaves the batch to the next pass, which decides from fresher
    states: leaders shrinking ISRs meanwhile kept a retry loop going for 13 s). A fenced
    controller writes nothing."""
    pending = list(batch)
    fenced = epoch_version is not None
    for attempt in range(STATE_BATCH_ATTEMPTS):
        if attempt:
            if not pending:
                break
            results = _state_transaction(client, pending, epoch, epoch_version).commit()
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


def delete_state_changes(client: KazooClient, children: list[str]) -> None:
    """Delete state changes every broker has had time to read (one multi-op per batch)."""
    for start in range(0, len(children), STATE_CHANGE_DELETES_PER_MULTI):
        transaction = client.transaction()
        for child in children[start:start + STATE_CHANGE_DELETES_PER_MULTI]:
            transaction.delete(f"{STATE_CHANGES}/{child}")
        transaction.commit()  # one already gone fails the batch: the next pass deletes the rest


def write_admin_request(client: KazooClient, path: str, request: dict[str, Any]) -> None:
    """Write an admin request znode, merging with one the controller has not taken yet."""
    while True:
        try:
            raw, stat = client.get(path)
        except NoNodeError:
            try:
                client.create(path, encode_json(request), makepath=True)
                return
            except NodeExistsError:
                continue
        pending = json.loads(raw) if raw else {"partitions": []}
        merged = {**request, "partitions": pending.get("partitions", []) + request["partitions"]}
        try:
            client.set(path, encode_json(merged), version=stat.version)
            return
        except (BadVersionError, NoNodeError):
            continue


def write_offline_replicas(client: KazooClient, broker_id: int, partitions: list[PartitionKey]) -> None:
    client.ensure_path(OFFLINE_REPLICAS)
    prefix = f"{broker_id}-"
    stale = [child for child in client.get_children(OFFLINE_REPLICAS) if child.startswith(prefix)]
    if not stale and not partitions:
        return
    transaction = client.transaction()
    for child in stale:
        transaction.delete(f"{OFFLINE_REPLICAS}/{child}")
    if partitions:
        listed = [{"topic": topic, "partition": index} for topic, index in partitions]
        transaction.create(f"{OFFLINE_REPLICAS}/{prefix}", encode_json({"version": 1, "partitions": listed}),
                           sequence=True)
    results = transaction.commit()
    if any(isinstance(r, Exception) for r in results):
        raise MetadataWriteError(f"offline replicas of broker {broker_id} not written: {results}")
    if partitions:
        client.create(f"{LOG_DIR_EVENTS}/log_dir_event_", sequence=True, makepath=True, value=encode_json(
            {"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE}))


def write_acls(client: KazooClient, pattern: ResourcePattern, added: list[AclBinding],
               removed: list[AclBinding]) -> str | None:
    """Update one resource's ACL znode on its version (again on a lost race); returns the change
    notification's path, or None when nothing changed."""
    path = acl_path(pattern)
    while True:
        try:
            raw, stat = client.get(path)
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
                client.create(path, encode_json(encode_entries(new)), makepath=True)
            elif new:
                client.set(path, encode_json(encode_entries(new)), version=stat.version)
            else:
                client.delete(path, version=stat.version)
            break
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # another broker changed this resource meanwhile: apply the change to its state
    prefix, data = encode_acl_change(pattern)
    return client.create(prefix, data, sequence=True, makepath=True)


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
                               encode_json({"version": 2, "entity_path": entity_path}), sequence=True)
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
    data = encode_json({"version": 1, "config": update(dict(value.get("config") or {}))})
    if stat is None:
        transaction.create(path, data)
    else:
        transaction.set_data(path, data, version=stat.version)


def _commit(transaction: Any, failure: Callable[[], Exception]) -> None:
    """Commit a kazoo transaction; raise `failure()` if any of its operations failed."""
    results = transaction.commit()
    if any(isinstance(result, Exception) for result in results):
        raise failure()
