"""Transaction markers: the partition's marker append, WriteTxnMarkers (key 27) on real brokers,
and the TxnMarkerWriter a transaction coordinator completes transactions with.

The partition is exercised in-process on a real log; the API against broker processes (one
alone, and three in a real ZooKeeper cluster).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from test_storage_unit import make_config

from logbus.cluster.metadata import PartitionState
from logbus.cluster.partition import NotEnoughReplicasError, NotLeaderError, Partition
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
