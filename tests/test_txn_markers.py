"""Transaction markers: the partition's marker append, WriteTxnMarkers (key 27) on real brokers,
and the TxnMarkerWriter a transaction coordinator completes transactions with.

The partition is exercised in-process on a real log; the API against broker processes (one
alone, and three in a real ZooKeeper cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from test_storage_unit import make_config

from logbus.broker.broker import Broker
from logbus.cluster.metadata import PartitionState
from logbus.cluster.partition import NotEnoughReplicasError, NotLeaderError, Partition
from logbus.cluster.txn_markers import write_marker
from logbus.config import BrokerConfig
from logbus.errors import KafkaApiError
from logbus.protocol.records import read_end_txn_marker, read_header
from logbus.storage.log import PartitionLog


def open_partition(directory: Path, broker_id: int, state: PartitionState, **config: str) -> Partition:
    log_ = PartitionLog(str(directory), "t", 0, make_config(**config))
    log_.load(0, 0, True)
    return Partition("t", 0, "id", broker_id, log_, state, 0)


def last_batch(partition: Partition) -> tuple[object, object]:
    """The header and marker of the partition's last batch."""
    found = partition.log.read(partition.log.log_end_offset - 1, 1 << 20, partition.log.log_end_offset)
    assert found is not None
    raw = bytes(found.read())
    header = read_header(raw)
    return header, read_end_txn_marker(raw, header)


# ---------------------------------------------------------------------------- the partition


def test_a_leader_appends_a_marker_at_its_epoch_and_the_hw_waits_for_the_isr(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = open_partition(tmp_path, 1, PartitionState(1, 4, [1, 2], [1, 2]))
        woken = partition.data_arrived()
        info = partition.append_control_marker(7, 0, True, 3)
        assert (info.base_offset, partition.log.log_end_offset) == (0, 1)
        assert woken.is_set(), "followers waiting in a fetch are woken"
        header, marker = last_batch(partition)
        assert header.is_control and header.producer_id == 7 and header.partition_leader_epoch == 4
        assert marker is not None and marker.commit and marker.coordinator_epoch == 3
        assert partition.high_watermark == 0 and partition.replicated(1) == ErrorCode.request_timed_out
        partition.update_follower(2, 1)
        assert partition.high_watermark == 1 and partition.replicated(1) is None

    asyncio.run(scenario())


def test_a_lone_leader_moves_its_hw_past_the_marker_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = open_partition(tmp_path, 1, PartitionState(1, 0, [1], [1]))
        partition.append_control_marker(7, 0, False, 0)
        assert partition.high_watermark == 1 and partition.appended_bytes > 0

    asyncio.run(scenario())


def test_markers_are_refused_by_followers_below_min_isr_and_for_fenced_epochs(tmp_path: Path) -> None:
    async def scenario() -> None:
        follower = open_partition(tmp_path / "f", 2, PartitionState(1, 0, [1, 2], [1, 2]))
        with pytest.raises(NotLeaderError):
            follower.append_control_marker(7, 0, True, 0)
        alone = open_partition(tmp_path / "a", 1, PartitionState(1, 0, [1, 2], [1]), **{"min.insync.replicas": "2"})
        with pytest.raises(NotEnoughReplicasError):
            alone.append_control_marker(7, 0, True, 0)
        leader = open_partition(tmp_path / "l", 1, PartitionState(1, 0, [1], [1]))
        leader.append_control_marker(7, 1, True, 5)
        with pytest.raises(KafkaApiError) as fenced:
            leader.append_control_marker(7, 1, False, 4)
        assert fenced.value.code == ErrorCode.transaction_coordinator_fenced
        with pytest.raises(KafkaApiError) as old:
            leader.append_control_marker(7, 0, False, 5)
        assert old.value.code == ErrorCode.invalid_producer_epoch
        assert [p.log.log_end_offset for p in (follower, alone, leader)] == [0, 0, 1]

    asyncio.run(scenario())


# ---------------------------------------------------------------------------- write_marker


@contextlib.asynccontextmanager
async def broker_in_process(data_dir: Path, broker_id: int = 0, **config: str) -> AsyncIterator[Broker]:
    """A whole broker in this process and event loop (the embedded store unless `zookeeper.connect`)."""
    broker = Broker(BrokerConfig({"group.initial.rebalance.delay.ms": "0", **config}), broker_id, "127.0.0.1", 0,
                    str(data_dir))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def test_write_marker_answers_after_the_append_and_then_tells_the_listeners(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path) as broker:
            await broker.metadata.create_topic("t", 1, 1, {"flush.messages": "1"})
            partition = broker.replicas.get("t", 0)
            seen: list[tuple[int, int, bool]] = []
            broker.replicas.add_marker_listener(
                lambda p, producer_id, commit: seen.append((p.log.log_end_offset, producer_id, commit)))

            async def write(topic: str, epoch: int, coordinator_epoch: int, commit: bool) -> ErrorCode:
                return await write_marker(broker.replicas, topic, 0, 7, epoch, commit, coordinator_epoch, 5.0)

            assert await write("t", 0, 2, True) == ErrorCode.none
            assert seen == [(1, 7, True)] and partition.high_watermark == 1
            assert partition.log.recovery_point == 1, "flush.messages=1: fsynced before the answer"
            assert await write("t", 0, 1, False) == ErrorCode.transaction_coordinator_fenced
            assert await write("nowhere", 0, 2, False) == ErrorCode.unknown_topic_or_partition
            assert seen == [(1, 7, True)], "a refused marker is not announced"

            def broken(*_args: object) -> None:
                raise RuntimeError("a listener's bug")

            broker.replicas.add_marker_listener(broken)
            assert await write("t", 0, 2, False) == ErrorCode.unknown_server_error
            assert partition.log.log_end_offset == 2 and seen[-1] == (2, 7, False)

    asyncio.run(scenario())


def test_write_marker_is_refused_below_min_insync_replicas(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path) as broker:
            await broker.metadata.create_topic("strict", 1, 1, {"min.insync.replicas": "2"})
            code = await write_marker(broker.replicas, "strict", 0, 7, 0, True, 0, 5.0)
            assert code == ErrorCode.not_enough_replicas
            assert broker.replicas.get("strict", 0).log.log_end_offset == 0

    asyncio.run(scenario())
