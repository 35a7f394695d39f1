"""The replica manager's data plane in-process (no broker): a real ReplicaManager over a real
metadata store (the embedded one) and real logs, as Kafka's ReplicaManagerTest builds one.

Broker 1 hosts the partitions; broker 2 is a follower that never runs: its fetches are played
through the partition's follower bookkeeping (`Partition.update_follower`, what a follower's
Fetch does on the leader), so acks=all, min.insync.replicas, DeleteRecords' wait and a fetch's
wait for data are tested without a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from test_storage import record_batch

from logbus.cluster.appends import ACKS_ALL, Batches, TxnMarker
from logbus.cluster.delayed_fetch import wait_for_data, wait_for_fetchable
from logbus.cluster.metadata import BrokerInfo, EmbeddedMetadataStore, PartitionState
from logbus.cluster.replica_manager import ReplicaManager
from logbus.config import BrokerConfig
from logbus.errors import (
    KafkaApiError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicError,
)
from logbus.protocol.records import validate_batches
from logbus.storage.manager import LogManager

LEADER, FOLLOWER = 1, 2


@contextlib.asynccontextmanager
async def replica_manager(directory: Path) -> AsyncIterator[ReplicaManager]:
    """Broker 1's replica manager, started over an embedded metadata store in `directory`."""
    store = EmbeddedMetadataStore(str(directory), LEADER)
    await store.start()
    replicas = ReplicaManager(LEADER, BrokerConfig({}), store, LogManager(str(directory)))
    replicas.start()
    await replicas.loaded.wait()
    try:
        yield replicas
    finally:
        await replicas.stop()


async def create(replicas: ReplicaManager, name: str, assignment: list[int], **configs: str) -> None:
    await replicas.metadata.create_topic(name, 1, len(assignment), configs, assignments=[assignment])
    await replicas.wait_opened(name)


def batches(value: bytes) -> Batches:
    data = bytearray(record_batch(value))
    return Batches(data, validate_batches(data))


def test_acks_all_is_answered_once_the_follower_has_fetched_past_the_batch(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "t", [LEADER, FOLLOWER], **{"min.insync.replicas": "2"})
            appended = await replicas.append_records("t", 0, batches(b"a"), ACKS_ALL)
            assert appended.info.base_offset == 0 and appended.awaiting_replicas
            waiting = asyncio.ensure_future(replicas.wait_for_replicas(appended, 30.0))
            await asyncio.sleep(0)
            assert not waiting.done(), "the follower has not fetched the batch yet"
            partition = replicas.get("t", 0)
            partition.update_follower(FOLLOWER, 0)
            await asyncio.sleep(0)
            assert not waiting.done() and partition.high_watermark == 0
            partition.update_follower(FOLLOWER, 1)  # its next fetch starts after the batch
            assert await asyncio.wait_for(waiting, 5.0) is None
            assert partition.high_watermark == 1
            assert not (await replicas.append_records("t", 0, batches(b"b"), 1)).awaiting_replicas

    asyncio.run(scenario())


def test_acks_all_times_out_while_the_follower_lags(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "t", [LEADER, FOLLOWER])
            appended = await replicas.append_records("t", 0, batches(b"a"), ACKS_ALL)
            with pytest.raises(RequestTimedOutError):
                await replicas.wait_for_replicas(appended, 0.05)

    asyncio.run(scenario())


def test_min_insync_replicas_refuses_acks_all_appends_and_markers_but_not_acks_1(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "t", [LEADER, FOLLOWER], **{"min.insync.replicas": "2"})
            await replicas.metadata.alter_partition("t", 0, 0, 0, [LEADER])  # the follower fell out
            assert replicas.get("t", 0).state.isr == [LEADER]
            for entry in (batches(b"a"), TxnMarker(7, 0, True, 0)):
                with pytest.raises(KafkaApiError) as refused:
                    await replicas.append_records("t", 0, entry, ACKS_ALL)
                assert refused.value.code == ErrorCode.not_enough_replicas
            appended = await replicas.append_records("t", 0, batches(b"b"), 1)
            assert appended.info.base_offset == 0 and replicas.get("t", 0).log.log_end_offset == 1

    asyncio.run(scenario())


def test_appends_to_a_partition_not_led_here_are_refused_with_kafkas_codes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "followed", [FOLLOWER, LEADER])
            for topic, code in (("followed", ErrorCode.not_leader_or_follower),
                                ("nowhere", ErrorCode.unknown_topic_or_partition)):
                with pytest.raises(KafkaApiError) as refused:
                    await replicas.append_records(topic, 0, batches(b"a"), 1)
                assert refused.value.code == code, topic

    asyncio.run(scenario())


def test_every_append_is_fsynced_before_the_answer_when_flush_messages_says_so(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "t", [LEADER], **{"flush.messages": "1"})
            seen: list[int] = []
            await replicas.append_records("t", 0, batches(b"a"), 1, on_appended=lambda info: seen.append(
                replicas.get("t", 0).log.recovery_point))
            await replicas.append_records("t", 0, TxnMarker(7, 0, False, 0), ACKS_ALL)
            assert seen == [0], "on_appended runs before the flush"
            assert replicas.get("t", 0).log.recovery_point == 2

    asyncio.run(scenario())


def test_delete_records_waits_for_the_follower_to_adopt_the_new_log_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "t", [LEADER, FOLLOWER])
            for value in (b"a", b"b", b"c"):
                await replicas.append_records("t", 0, batches(value), 1)
            partition = replicas.get("t", 0)
            partition.update_follower(FOLLOWER, 3, 0)
            assert partition.high_watermark == 3
            for topic, offset, refusal in (("t", 4, OffsetOutOfRangeError), ("t", -2, OffsetOutOfRangeError),
                                           ("nowhere", 1, UnknownTopicError)):
                with pytest.raises(refusal):
                    replicas.delete_records(topic, 0, offset)
            # broker 2 is not registered (not live): the leader's own log start is the low watermark
            deleted = replicas.delete_records("t", 0, 1)
            assert deleted.low_watermark == 1
            assert await replicas.wait_for_low_watermark(deleted, 1.0) is None
            await replicas.metadata.register_broker(BrokerInfo(FOLLOWER, ()))  # live, never reached
            deleted = replicas.delete_records("t", 0, -1)
            assert deleted.low_watermark == 3 and partition.log.log_start_offset == 3
            with pytest.raises(RequestTimedOutError):
                await replicas.wait_for_low_watermark(deleted, 0.01)
            deleting = asyncio.ensure_future(replicas.wait_for_low_watermark(deleted, 30.0))
            await asyncio.sleep(0)
            assert not deleting.done()
            partition.update_follower(FOLLOWER, 3, 3)
            assert await asyncio.wait_for(deleting, 5.0) is None

    asyncio.run(scenario())


def test_delete_records_ends_its_wait_with_not_leader_when_leadership_moves(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "t", [LEADER, FOLLOWER])
            await replicas.append_records("t", 0, batches(b"a"), 1)
            partition = replicas.get("t", 0)
            partition.update_follower(FOLLOWER, 1, 0)
            await replicas.metadata.register_broker(BrokerInfo(FOLLOWER, ()))
            deleted = replicas.delete_records("t", 0, 1)
            deleting = asyncio.ensure_future(replicas.wait_for_low_watermark(deleted, 30.0))
            await asyncio.sleep(0)
            assert not deleting.done(), "the follower still starts at 0"
            state = partition.state  # the follower becomes leader (as the controller's next state says)
            partition.update_state(PartitionState(FOLLOWER, state.leader_epoch + 1, state.replicas, [FOLLOWER],
                                                  partition_epoch=state.partition_epoch + 1))
            with pytest.raises(NotLeaderError):
                await asyncio.wait_for(deleting, 5.0)
            with pytest.raises(NotLeaderError):
                replicas.delete_records("t", 0, 1)

    asyncio.run(scenario())


def test_reads_find_the_partition_with_kafkas_epoch_and_role_checks(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "led", [LEADER])
            await create(replicas, "followed", [FOLLOWER, LEADER])
            assert replicas.partition_to_read("led", 0, 0) is replicas.get("led", 0)
            assert replicas.partition_to_read("followed", 0, leader_only=False) is replicas.get("followed", 0)
            for topic, epoch, code in (("led", 1, ErrorCode.unknown_leader_epoch),
                                       ("followed", 0, ErrorCode.not_leader_or_follower),
                                       ("nowhere", -1, ErrorCode.unknown_topic_or_partition)):
                with pytest.raises(KafkaApiError) as refused:
                    replicas.partition_to_read(topic, 0, epoch)
                assert refused.value.code == code, topic
            # the epoch check comes first, as Kafka's: a fetcher ahead of this broker retries soon
            with pytest.raises(KafkaApiError) as ahead:
                replicas.partition_to_read("followed", 0, 3, leader_only=True)
            assert ahead.value.code == ErrorCode.unknown_leader_epoch

    asyncio.run(scenario())


def test_a_waiting_fetch_wakes_a_follower_on_appended_bytes_and_a_consumer_on_the_hw(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "t", [LEADER, FOLLOWER])
            partition = replicas.get("t", 0)
            deadline = asyncio.get_running_loop().time() + 30

            def fetch(follower: bool, stopping: bool = False) -> asyncio.Future[None]:
                return asyncio.ensure_future(wait_for_fetchable([(partition, 1 << 20)], 1, deadline, False, follower,
                                                                lambda: stopping))

            consumer, follower = fetch(follower=False), fetch(follower=True)
            await asyncio.sleep(0)
            await replicas.append_records("t", 0, batches(b"a"), 1)
            await asyncio.wait_for(follower, 5.0)
            await asyncio.sleep(0)
            assert not consumer.done(), "the batch is above the HW: not a consumer's to read yet"
            partition.update_follower(FOLLOWER, 1)
            await asyncio.wait_for(consumer, 5.0)
            await asyncio.wait_for(fetch(follower=False, stopping=True), 5.0)  # the broker stops: answered now

    asyncio.run(scenario())


def test_a_data_wait_is_woken_by_another_waker_and_forgets_every_one(tmp_path: Path) -> None:
    """ShareFetch's wait: the partitions' data or another source (records released) wakes it, and
    afterwards neither holds the waiter."""

    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "t", [LEADER])
            partition = replicas.get("t", 0)
            held: set[asyncio.Future[None]] = set()
            waiting = asyncio.ensure_future(wait_for_data([partition], 30, [(held.add, held.discard)]))
            await asyncio.sleep(0)  # the wait registers its waiter with every waker before it first yields
            assert len(held) == 1 and not waiting.done()
            next(iter(held)).set_result(None)  # the other source has news
            await asyncio.wait_for(waiting, 10)
            assert not held and not partition._data_waiters

    asyncio.run(scenario())


def test_a_partition_whose_log_is_still_loading_answers_not_leader_or_follower(tmp_path: Path) -> None:
    """The broker listens while its logs load (issue 25): a partition not loaded yet is served by
    nobody here, with the retriable NOT_LEADER_OR_FOLLOWER, until its log is loaded."""

    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "t", [LEADER])
            await replicas.append_records("t", 0, batches(b"a"), 1)
            await replicas.logs.shutdown()
        store = EmbeddedMetadataStore(str(tmp_path), LEADER)
        await store.start()
        logs = LogManager(str(tmp_path))
        logs.open(LEADER, store.cluster_id)
        replicas = ReplicaManager(LEADER, BrokerConfig({}), store, logs)
        replicas.start()
        try:
            assert not replicas.loaded.is_set()
            with pytest.raises(KafkaApiError) as loading:
                replicas.partition_to_read("t", 0)
            assert loading.value.code == ErrorCode.not_leader_or_follower
            await asyncio.wait_for(replicas.loaded.wait(), 30)
            assert replicas.partition_to_read("t", 0).log.log_end_offset == 1
        finally:
            await replicas.stop()
            await logs.shutdown()

    asyncio.run(scenario())


def test_new_replicas_are_served_once_their_logs_are_created_off_the_event_loop(tmp_path: Path) -> None:
    """Topics created together (issue 25): the metadata shows them at once, their replicas here
    are served only once the I/O threads created their logs, each led as the metadata says."""

    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            names = [f"t{i}" for i in range(3)]
            await asyncio.gather(*(replicas.metadata.create_topic(name, 4, 1, {}, assignments=[[LEADER]] * 4)
                                   for name in names))
            assert all(replicas.metadata.topic(name) is not None for name in names)
            for name in names:
                await asyncio.wait_for(replicas.wait_opened(name), 30)
            for name in names:
                for index in range(4):
                    partition = replicas.partition_to_read(name, index)
                    assert partition.is_leader and partition.log.log_end_offset == 0
                    assert (tmp_path / f"{name}-{index}").is_dir()

    asyncio.run(scenario())


@pytest.mark.parametrize("when", ["queued", "being_created"])
def test_a_topic_deleted_while_its_logs_are_created_is_never_served_and_its_files_go(tmp_path: Path,
                                                                                     when: str) -> None:
    """A DeleteTopics arriving before the new logs exist: none of its replicas is served, the
    files created meanwhile are deleted, and a topic created again under the name gets new logs."""

    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await replicas.metadata.create_topic("t", 3, 1, {}, assignments=[[LEADER]] * 3)
            if when == "being_created":
                for _ in range(1000):  # until the batch is handed to the I/O threads
                    if replicas._opening:
                        break
                    await asyncio.sleep(0)
                assert replicas._opening, "the batch never started"
            await replicas.metadata.delete_topic("t")
            await asyncio.wait_for(replicas.wait_dropped("t"), 30)
            assert all(replicas.get("t", i) is None for i in range(3))
            assert not any(tmp_path.glob("t-*")), "the logs created meanwhile are deleted"

            await create(replicas, "t", [LEADER])
            await asyncio.wait_for(replicas.wait_opened("t"), 30)
            appended = await replicas.append_records("t", 0, batches(b"a"), 1)
            assert appended.info.base_offset == 0

    asyncio.run(scenario())
