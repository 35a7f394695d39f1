"""Transactional offset commits on the group coordinator's side (TxnOffsetCommit, KIP-98).

The offsets a transaction commits stay pending for their producer until its COMMIT or ABORT
marker lands on the group's `__consumer_offsets` partition; meanwhile OffsetFetch does not show
them, and with `require_stable` answers UNSTABLE_OFFSET_COMMIT. Three layers:
- the pure rules of `ClassicGroup` (which offset wins, what a marker does);
- the coordinator in-process over a real store and the test clock of test_group_state.py: a
  marker is written to the partition's log, as WriteTxnMarkers does, and announced through
  `GroupCoordinator.on_txn_marker`, as the replica manager's marker listener does; a second
  coordinator over the same directory is a restart that reloads the partition;
- on the wire, against broker processes and across restarts: TxnOffsetCommit and OffsetFetch
  with WriteTxnMarkers standing for the transaction coordinator; a transaction by hand
  (AddOffsetsToTxn, KIP-890's verification, EndTxn); confluent-kafka's send_offsets_to_transaction.
"""

from __future__ import annotations

import dataclasses
import datetime

from confluent_kafka import Consumer, Producer, TopicPartition
from helpers import CREATE_TOPICS, INIT_PRODUCER_ID, QUIET, RawConnection, wait_until
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v7.request import OffsetFetchRequestTopic
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.txn_offset_commit.v0 import request as txn_commit_v0
from kio.schema.txn_offset_commit.v5 import request as txn_commit_v5
from test_group_state import GROUP, RETENTION, Env, advance_in_checks, coordinator_env, in_loop, stable_group, until
from test_txn_markers import write_markers

from logbus.coordinator.group import ClassicGroup, CommittedOffset
from logbus.coordinator.offsets import OffsetCommit
from logbus.coordinator.records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    coordinator_partition,
    encode_group_key,
    encode_offset_key,
)
from logbus.coordinator.store import LogReplay
from logbus.protocol.records import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader, EndTxnMarker, build_batch, read_header
from logbus.testing import running_broker

PRODUCER = 7
TXN_OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, ADD_OFFSETS_TO_TXN, END_TXN = 28, 9, 10, 25, 26
TXN_TIMEOUT = datetime.timedelta(seconds=10)


# ---------------------------------------------------------------- the pure rules


def at(offset: int, record_offset: int) -> CommittedOffset:
    return CommittedOffset(OffsetValue(offset, -1, "", 0), record_offset)


def test_a_commit_marker_makes_pending_offsets_committed_unless_a_later_record_committed_them() -> None:
    group = ClassicGroup(GROUP)
    group.put_offset(("t", 0), at(5, record_offset=10))
    group.add_pending(PRODUCER, {("t", 0): at(8, record_offset=4), ("t", 1): at(9, record_offset=4)})
    group.add_pending(PRODUCER, {("t", 2): at(3, record_offset=12)})
    assert group.has_pending_offset(("t", 0)) and not group.has_pending_offset(("t", 3))
    group.complete_txn(PRODUCER, commit=True)
    assert {key: o.value.offset for key, o in group.offsets.items()} == {("t", 0): 5, ("t", 1): 9, ("t", 2): 3}
    assert group.pending_txn_offsets == {}
    group.put_offset(("t", 2), at(1, record_offset=11))
    assert group.offsets[("t", 2)].value.offset == 3, "a plain commit completing late loses to a later record"


def test_an_abort_marker_drops_pending_offsets_and_tombstones_drop_them_too() -> None:
    group = ClassicGroup(GROUP)
    group.put_offset(("t", 0), at(5, record_offset=1))
    group.add_pending(PRODUCER, {("t", 0): at(8, record_offset=2)})
    group.add_pending(PRODUCER + 1, {("t", 0): at(9, record_offset=3), ("t", 1): at(1, record_offset=3)})
    group.complete_txn(PRODUCER, commit=False)
    assert group.offsets[("t", 0)].value.offset == 5 and PRODUCER not in group.pending_txn_offsets
    group.remove_offsets([("t", 0)])
    assert group.offsets == {} and group.pending_txn_offsets == {PRODUCER + 1: {("t", 1): at(1, 3)}}
    group.remove_offsets([("t", 1)])
    assert group.pending_txn_offsets == {PRODUCER + 1: {}}, "the transaction stays open until its marker"
    group.complete_txn(PRODUCER + 1, commit=True)
    assert group.offsets == {} and group.pending_txn_offsets == {}


def test_a_failed_write_drops_only_its_own_pending_offsets() -> None:
    group = ClassicGroup(GROUP)
    failed = {("t", 0): at(1, record_offset=1)}
    group.add_pending(PRODUCER, failed)
    group.drop_pending(PRODUCER, failed)
    assert group.pending_txn_offsets == {}
    group.add_pending(PRODUCER, failed)
    group.add_pending(PRODUCER, {("t", 0): at(2, record_offset=2)})  # a retry replaced it
    group.drop_pending(PRODUCER, failed)
    assert group.pending_txn_offsets[PRODUCER][("t", 0)].value.offset == 2


def batch_header(base_offset: int, producer_id: int = -1, control: bool = False) -> BatchHeader:
    attributes = (TRANSACTIONAL_BIT if producer_id >= 0 else 0) | (CONTROL_BIT if control else 0)
    raw = build_batch([(b"k", b"v")], 0, producer_id=producer_id, producer_epoch=0, attributes=attributes)
    return dataclasses.replace(read_header(raw), base_offset=base_offset)


def offset_key(partition: int, version: int = 1) -> bytes:
    """An OffsetCommitKey as written (v1), or as older brokers wrote it (v0: the same layout)."""
    return version.to_bytes(2, "big") + encode_offset_key(OffsetKey(GROUP, "t", partition))[2:]


def test_the_log_replay_orders_plain_and_transactional_records_as_kafkas_loader() -> None:
    replay = LogReplay()
    group_key = encode_group_key(GroupKey(GROUP))
    replay.apply(batch_header(0), [(offset_key(0, version=0), b"plain-0"), (offset_key(1), b"plain-1")], None)
    replay.apply(batch_header(1, producer_id=5), [(offset_key(0), b"txn-0"), (offset_key(1), b"txn-1"),
                                                  (group_key, b"group")], None)
    replay.apply(batch_header(2), [(offset_key(1), None)], None)  # a tombstone drops pending offsets too
    replay.apply(batch_header(3, producer_id=6), [(offset_key(2), b"open")], None)
    replay.apply(batch_header(4, producer_id=5, control=True), [], EndTxnMarker(True, 0))
    assert set(replay.survivors()) == {
        (group_key, b"group", 1, -1),  # group metadata is never pending
        (offset_key(0), b"txn-0", 1, -1),  # v0 and v1 keys are one key
        (offset_key(1), None, 2, -1),
        (offset_key(2), b"open", 3, 6),
    }
    replay.apply(batch_header(5), [(offset_key(2), b"plain-2")], None)
    replay.apply(batch_header(6, producer_id=6, control=True), [], EndTxnMarker(True, 0))
    assert (offset_key(2), b"plain-2", 5, -1) in replay.survivors(), "the later plain record wins"


# ---------------------------------------------------------------- the coordinator over a real store


async def txn_commit(env: Env, offset: int, partition: int = 0, producer: int = PRODUCER, epoch: int = 0,
                     generation: int = -1, member_id: str = "", metadata: str = "txn") -> ErrorCode:
    (error,) = await env.coordinator.commit_txn_offsets(GROUP, producer, epoch, generation, member_id, None,
                                                        [OffsetCommit("t", partition, offset, -1, metadata)])
    return error


async def plain_commit(env: Env, offset: int, partition: int = 0) -> ErrorCode:
    (error,) = await env.coordinator.commit_offsets(GROUP, -1, "", None, [OffsetCommit("t", partition, offset, -1, "")])
    return error


def end_txn(env: Env, commit: bool, producer: int = PRODUCER, epoch: int = 0) -> None:
    """What WriteTxnMarkers does on the group's partition: the marker into the log, then the
    replica manager's marker listener."""
    partition = env.coordinator.store.partition(0)
    assert partition is not None
    partition.log.append_control_marker(producer, epoch, commit, 0, partition.leader_epoch)
    env.coordinator.on_txn_marker(partition, producer, commit)


def fetched(env: Env, partitions: tuple[int, ...] = (0,), require_stable: bool = False) -> list[tuple[int, ErrorCode]]:
    offsets = env.coordinator.fetch_offsets(GROUP, [("t", list(partitions))], require_stable)
    return [(o.offset, o.error) for o in offsets]


UNSTABLE = (-1, ErrorCode.unstable_offset_commit)
NONE = (-1, ErrorCode.none)


async def loaded(env: Env) -> Env:
    await until(lambda: 0 in env.coordinator.loaded_partitions, "the load")
    return env


@in_loop
async def test_txn_offsets_are_pending_until_the_commit_marker(tmp_path) -> None:
    async with coordinator_env(tmp_path) as env:
        assert await txn_commit(env, 42) == ErrorCode.none
        assert GROUP in env.coordinator.groups, "an unknown group is created for generation -1"
        assert fetched(env, (0, 1)) == [NONE, NONE]
        assert fetched(env, (0, 1), require_stable=True) == [UNSTABLE, NONE]
        assert env.coordinator.fetch_offsets(GROUP, None, True) == [], "only committed offsets are listed"
        end_txn(env, commit=True)
        assert fetched(env, require_stable=True) == [(42, ErrorCode.none)]
        assert env.coordinator.fetch_offsets(GROUP, None)[0].metadata == "txn"


@in_loop
async def test_an_abort_marker_drops_the_pending_offsets(tmp_path) -> None:
    async with coordinator_env(tmp_path) as env:
        assert await plain_commit(env, 5) == ErrorCode.none
        assert await txn_commit(env, 42) == ErrorCode.none
        assert fetched(env) == [(5, ErrorCode.none)] and fetched(env, require_stable=True) == [UNSTABLE]
        end_txn(env, commit=False)
        assert fetched(env, require_stable=True) == [(5, ErrorCode.none)]


@in_loop
async def test_of_a_plain_and_a_transactional_commit_the_later_record_wins(tmp_path) -> None:
    async with coordinator_env(tmp_path) as env:
        assert await txn_commit(env, 10, partition=0) == ErrorCode.none
        assert await plain_commit(env, 11, partition=0) == ErrorCode.none  # after the txn's record
        assert await plain_commit(env, 20, partition=1) == ErrorCode.none
        assert await txn_commit(env, 21, partition=1) == ErrorCode.none  # after the plain record
        end_txn(env, commit=True)
        assert fetched(env, (0, 1)) == [(11, ErrorCode.none), (21, ErrorCode.none)]
    async with coordinator_env(tmp_path) as env:
        assert fetched(await loaded(env), (0, 1)) == [(11, ErrorCode.none), (21, ErrorCode.none)]


@in_loop
async def test_a_reload_keeps_open_transactions_pending_and_applies_ended_ones(tmp_path) -> None:
    async with coordinator_env(tmp_path) as env:
        assert await txn_commit(env, 1, partition=0, producer=1) == ErrorCode.none
        assert await txn_commit(env, 2, partition=1, producer=2) == ErrorCode.none
        assert await txn_commit(env, 3, partition=2, producer=3) == ErrorCode.none
        end_txn(env, commit=True, producer=1)
        end_txn(env, commit=False, producer=2)
    async with coordinator_env(tmp_path) as env:
        assert fetched(await loaded(env), (0, 1, 2), require_stable=True) == [(1, ErrorCode.none), NONE, UNSTABLE]
        assert set(env.group().pending_txn_offsets) == {3}
        end_txn(env, commit=True, producer=3)
        assert fetched(env, (2,), require_stable=True) == [(3, ErrorCode.none)]


@in_loop
async def test_a_marker_announced_while_the_partition_loads_is_applied_after_the_load(tmp_path) -> None:
    async with coordinator_env(tmp_path) as env:
        assert await txn_commit(env, 42) == ErrorCode.none
    async with coordinator_env(tmp_path) as env:
        assert env.coordinator.loading, "the load runs in the background"
        partition = env.coordinator.store.partition(0)
        assert partition is not None
        # only announced: a marker appended past the end the load reads to
        env.coordinator.on_txn_marker(partition, PRODUCER, True)
        assert fetched(await loaded(env), require_stable=True) == [(42, ErrorCode.none)]


@in_loop
async def test_txn_commits_are_checked_as_kafka_checks_them(tmp_path) -> None:
    async with coordinator_env(tmp_path) as env:
        assert await txn_commit(env, 1, generation=1, member_id="m") == ErrorCode.illegal_generation
        assert GROUP not in env.coordinator.groups
        assert await txn_commit(env, 1, producer=-1) == ErrorCode.invalid_producer_id_mapping
        assert await txn_commit(env, 1, metadata="m" * 4097) == ErrorCode.offset_metadata_too_large
        first, _ = await stable_group(env)
        assert await txn_commit(env, 1, generation=first.generation, member_id="nobody") == ErrorCode.unknown_member_id
        assert await txn_commit(env, 1, generation=first.generation + 1,
                                member_id=first.member_id) == ErrorCode.illegal_generation
        assert await txn_commit(env, 1, generation=first.generation, member_id=first.member_id) == ErrorCode.none
        assert await txn_commit(env, 2) == ErrorCode.none, "no member at all (v0-v2): any group takes it"
        assert await txn_commit(env, 3, epoch=1) == ErrorCode.none
        assert await txn_commit(env, 4, epoch=0) == ErrorCode.invalid_producer_epoch, "fenced by epoch 1"
        assert env.group().pending_txn_offsets[PRODUCER][("t", 0)].value.offset == 3


@in_loop
async def test_pending_offsets_neither_expire_nor_let_their_group_expire(tmp_path) -> None:
    async with coordinator_env(tmp_path, **RETENTION) as env:
        assert await plain_commit(env, 5, partition=0) == ErrorCode.none
        assert await txn_commit(env, 6, partition=0) == ErrorCode.none
        assert await txn_commit(env, 7, partition=1) == ErrorCode.none
        await advance_in_checks(env, 120_000)
        assert set(env.group().offsets) == {("t", 0)}, "its partition has a pending offset"
        end_txn(env, commit=False)
        await advance_in_checks(env, 1000)
        assert GROUP not in env.coordinator.groups, "no transaction open: the expired group goes"


@in_loop
async def test_deletions_write_tombstones_for_pending_offsets(tmp_path) -> None:
    async with coordinator_env(tmp_path) as env:
        assert await txn_commit(env, 6, partition=0) == ErrorCode.none
        assert await txn_commit(env, 7, partition=1) == ErrorCode.none
        assert await env.coordinator.delete_offsets(GROUP, [("t", 0)]) == [ErrorCode.none]
        assert fetched(env, (0, 1), require_stable=True) == [NONE, UNSTABLE]
        await env.coordinator.delete_group(GROUP)
        end_txn(env, commit=True)
        assert GROUP not in env.coordinator.groups
    async with coordinator_env(tmp_path) as env:
        await loaded(env)
        assert GROUP not in env.coordinator.groups, "the tombstones went before the commit marker"


# ---------------------------------------------------------------- on the wire


def txn_offset_commit(connection: RawConnection, group: str, producer_id: int, epoch: int, topic: str,
                      offsets: dict[int, int], version: int = 5, transactional_id: str = "tx"
                      ) -> dict[int, ErrorCode]:
    """TxnOffsetCommit of `offsets` (partition -> offset); the error of each partition."""
    schema = txn_commit_v5 if version == 5 else txn_commit_v0
    partitions = tuple(
        schema.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata="wire",
                                               **({"committed_leader_epoch": -1} if version == 5 else {}))
        for p, o in offsets.items())
    extra = {"generation_id": -1, "member_id": "", "group_instance_id": None} if version == 5 else {}
    reply = connection.call(TXN_OFFSET_COMMIT, version, transactional_id=transactional_id, group_id=group,
                            producer_id=producer_id, producer_epoch=epoch, **extra,
                            topics=(schema.TxnOffsetCommitRequestTopic(name=topic, partitions=partitions),))
    return {p.partition_index: p.error_code for t in reply.topics for p in t.partitions}


def offset_fetch(connection: RawConnection, group: str, topic: str, partitions: tuple[int, ...],
                 require_stable: bool, version: int = 9) -> tuple[ErrorCode, list[tuple[int, ErrorCode]]]:
    """OffsetFetch v7 or v9: (the group's error, (offset, error) per partition)."""
    if version == 9:
        reply = connection.call(OFFSET_FETCH, 9, require_stable=require_stable, groups=(OffsetFetchRequestGroup(
            group_id=group, member_id=None, member_epoch=-1,
            topics=(OffsetFetchRequestTopics(name=topic, partition_indexes=partitions),)),))
        error, topics = reply.groups[0].error_code, reply.groups[0].topics
    else:
        reply = connection.call(OFFSET_FETCH, 7, group_id=group, require_stable=require_stable,
                                topics=(OffsetFetchRequestTopic(name=topic, partition_indexes=partitions),))
        error, topics = reply.error_code, reply.topics
    return error, [(p.committed_offset, p.error_code) for t in topics for p in t.partitions]


def init_producer_id(connection: RawConnection) -> int:
    """An idempotent producer id (epoch 0): InitProducerId without a transactional id."""
    reply = connection.call(INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=TXN_TIMEOUT,
                            producer_id=-1, producer_epoch=-1)
    assert (reply.error_code, reply.producer_epoch) == (ErrorCode.none, 0)
    return int(reply.producer_id)


def create_topic(connection: RawConnection, name: str, partitions: int) -> None:
    topic = create_topics_v7.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                                            assignments=(), configs=())
    reply = connection.call(CREATE_TOPICS, 7, topics=(topic,), timeout=TXN_TIMEOUT, validate_only=False)
    assert reply.topics[0].error_code == ErrorCode.none


def committed_offsets(connection: RawConnection, group: str, topic: str, partitions: tuple[int, ...]) -> list[int]:
    error, found = offset_fetch(connection, group, topic, partitions, require_stable=False)
    assert error == ErrorCode.none
    return [offset for offset, _ in found]


def test_txn_offset_commit_on_the_wire_until_write_txn_markers_and_across_restarts() -> None:
    """An idempotent producer id stands for a transaction (no coordinator verification), and
    WriteTxnMarkers for the transaction coordinator's markers."""
    unstable = (ErrorCode.none, [(-1, ErrorCode.unstable_offset_commit)] * 2)
    config = {"transaction.partition.verification.enable": "false", "offsets.topic.num.partitions": "5"}
    with running_broker(config) as broker:
        with RawConnection(broker.bootstrap) as connection:
            assert connection.call(FIND_COORDINATOR, 3, key="wire", key_type=0).error_code == ErrorCode.none
            create_topic(connection, "t", 2)
            producer_id = init_producer_id(connection)
            assert txn_offset_commit(connection, "wire", producer_id, 1, "t", {0: 7, 9: 1}) == {
                0: ErrorCode.none, 9: ErrorCode.unknown_topic_or_partition}
            assert txn_offset_commit(connection, "wire", producer_id, 1, "t", {1: 8}, version=0) == {
                1: ErrorCode.none}
            assert txn_offset_commit(connection, "wire", producer_id, 0, "t", {1: 9}) == {
                1: ErrorCode.invalid_producer_epoch}, "epoch 1 fenced epoch 0"
            assert committed_offsets(connection, "wire", "t", (0, 1)) == [-1, -1]
            assert offset_fetch(connection, "wire", "t", (0, 1), require_stable=True) == unstable
            assert offset_fetch(connection, "wire", "t", (0, 1), require_stable=True, version=7) == unstable
        offsets_partition = ("__consumer_offsets", coordinator_partition("wire", 5))
        broker.stop()
        broker.restart()
        with RawConnection(broker.bootstrap) as connection:
            wait_until(lambda: offset_fetch(connection, "wire", "t", (0, 1), require_stable=True) == unstable,
                       message="the pending offsets reloaded")
            assert write_markers(broker.bootstrap, offsets_partition, producer_id=producer_id, producer_epoch=1,
                                 commit=True, coordinator_epoch=0) == {offsets_partition: ErrorCode.none}
            assert offset_fetch(connection, "wire", "t", (0, 1), require_stable=True) == (
                ErrorCode.none, [(7, ErrorCode.none), (8, ErrorCode.none)])
            assert txn_offset_commit(connection, "wire", producer_id, 1, "t", {0: 70}) == {0: ErrorCode.none}
            assert write_markers(broker.bootstrap, offsets_partition, producer_id=producer_id, producer_epoch=1,
                                 commit=False, coordinator_epoch=0) == {offsets_partition: ErrorCode.none}
            assert offset_fetch(connection, "wire", "t", (0, 1), require_stable=True) == (
                ErrorCode.none, [(7, ErrorCode.none), (8, ErrorCode.none)])
        broker.stop()
        broker.restart()
        with RawConnection(broker.bootstrap) as connection:
            wait_until(lambda: offset_fetch(connection, "wire", "t", (0, 1), require_stable=True) == (
                ErrorCode.none, [(7, ErrorCode.none), (8, ErrorCode.none)]), message="the offsets reloaded")


def find_txn_coordinator(connection: RawConnection, transactional_id: str) -> bool:
    return connection.call(FIND_COORDINATOR, 3, key=transactional_id, key_type=1).error_code == ErrorCode.none


def test_the_transaction_coordinator_verifies_and_ends_txn_offset_commits() -> None:
    """A transactional producer by hand: TxnOffsetCommit before AddOffsetsToTxn is refused
    (KIP-890); after it the offsets are pending, and EndTxn's markers commit or drop them."""
    with running_broker() as broker, RawConnection(broker.bootstrap) as connection:
        assert connection.call(FIND_COORDINATOR, 3, key="verified", key_type=0).error_code == ErrorCode.none
        create_topic(connection, "t", 1)
        wait_until(lambda: find_txn_coordinator(connection, "raw-txn"), message="the transaction coordinator")
        reply = wait_until(lambda: (r := connection.call(
            INIT_PRODUCER_ID, 4, transactional_id="raw-txn", transaction_timeout=TXN_TIMEOUT, producer_id=-1,
            producer_epoch=-1)).error_code == ErrorCode.none and r, message="a transactional producer id")
        producer_id, epoch = reply.producer_id, reply.producer_epoch

        def commit(offset: int) -> dict[int, ErrorCode]:
            return txn_offset_commit(connection, "verified", producer_id, epoch, "t", {0: offset},
                                     transactional_id="raw-txn")

        def add_offsets() -> bool:
            code = connection.call(ADD_OFFSETS_TO_TXN, 4, transactional_id="raw-txn", producer_id=producer_id,
                                   producer_epoch=epoch, group_id="verified").error_code
            assert code in (ErrorCode.none, ErrorCode.concurrent_transactions), code
            return code == ErrorCode.none  # (the previous transaction may still be completing: clients retry)

        def end(committed: bool) -> None:
            wait_until(add_offsets, message="AddOffsetsToTxn taken")
            assert commit(5 if committed else 6) == {0: ErrorCode.none}
            assert connection.call(END_TXN, 4, transactional_id="raw-txn", producer_id=producer_id,
                                   producer_epoch=epoch, committed=committed).error_code == ErrorCode.none

        assert commit(1) == {0: ErrorCode.invalid_txn_state}, "the partition is not in the transaction"
        end(committed=True)
        wait_until(lambda: committed_offsets(connection, "verified", "t", (0,)) == [5], message="the commit")
        end(committed=False)
        wait_until(lambda: offset_fetch(connection, "verified", "t", (0,), require_stable=True) == (
            ErrorCode.none, [(5, ErrorCode.none)]), message="the abort")


def committed(consumer: Consumer) -> list[int]:
    """The group's committed offsets of t-0 and t-1 (librdkafka reads at read_committed: it asks for
    stable offsets and retries UNSTABLE_OFFSET_COMMIT)."""
    return [tp.offset for tp in consumer.committed([TopicPartition("t", 0), TopicPartition("t", 1)], 20)]


def test_confluent_kafka_sends_offsets_to_transactions() -> None:
    """librdkafka's send_offsets_to_transaction (AddOffsetsToTxn, then TxnOffsetCommit to the group
    coordinator): a committed transaction's offsets are the group's, an aborted one's are not,
    an open one's are unstable, and all of it holds across a restart."""
    with running_broker() as broker:
        with RawConnection(broker.bootstrap) as connection:
            create_topic(connection, "t", 2)
        group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ck", **QUIET})
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ck-txn", **QUIET})
        try:
            producer.init_transactions(20)

            def send_offsets(offsets: dict[int, int], commit: bool | None) -> None:
                producer.begin_transaction()
                producer.send_offsets_to_transaction([TopicPartition("t", p, o) for p, o in offsets.items()],
                                                     group.consumer_group_metadata(), 20)
                if commit is not None:
                    (producer.commit_transaction if commit else producer.abort_transaction)(20)

            send_offsets({0: 5, 1: 7}, commit=True)
            assert committed(group) == [5, 7]
            send_offsets({0: 50}, commit=False)
            assert committed(group) == [5, 7]
            send_offsets({1: 9}, commit=None)
            with RawConnection(broker.bootstrap) as connection:
                assert offset_fetch(connection, "ck", "t", (0, 1), require_stable=True) == (
                    ErrorCode.none, [(5, ErrorCode.none), (-1, ErrorCode.unstable_offset_commit)])
            producer.commit_transaction(20)
            assert committed(group) == [5, 9]
        finally:
            group.close()
        broker.stop()
        broker.restart()
        reloaded = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ck", **QUIET})
        try:
            assert committed(reloaded) == [5, 9]
        finally:
            reloaded.close()
