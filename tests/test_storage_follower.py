"""In-process tests of a follower's log: batches fetched from a leader appended as they are,
truncation to a divergence point, and a restart at the leader's log start (real files)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_storage import record_batch
from test_storage_unit import make_config

from logbus.protocol.records import validate_batches, whole_batches_length
from logbus.storage.log import FollowerAppendError, PartitionLog


def open_log(directory: Path, clean: bool = True, recovery_point: int = 0) -> PartitionLog:
    log_ = PartitionLog(str(directory), "t", 0, make_config(**{"segment.bytes": "400"}))
    log_.load(recovery_point, 0, clean)
    return log_


def lead(log_: PartitionLog, value: bytes, epoch: int, producer_id: int = -1, sequence: int = -1) -> int:
    raw = bytearray(record_batch(value, producer_id, sequence, timestamp=1000))
    return log_.append(raw, validate_batches(raw), epoch).base_offset


def replicate(leader: PartitionLog, follower: PartitionLog) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        found = leader.read(follower.log_end_offset, 1 << 20, leader.log_end_offset)
        raw = found.read()
        data = bytearray(raw[: whole_batches_length(raw)])
        follower.append_as_follower(data, validate_batches(data))


def log_bytes(directory: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def test_a_follower_copy_is_byte_identical_with_the_same_epochs(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path / "l"), open_log(tmp_path / "f")
    for i in range(12):
        lead(leader, b"v%02d" % i, epoch=1 if i < 6 else 3, producer_id=7, sequence=i)
    replicate(leader, follower)
    assert log_bytes(tmp_path / "f") == log_bytes(tmp_path / "l")
    assert follower.epochs == leader.epochs == [(1, 0), (3, 6)]
    assert follower.producer_state.producers[7].batches[-1].last_seq == 11


def test_overlaps_are_refused_and_a_compaction_gap_is_accepted(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "f")
    first = bytearray(record_batch(b"a", timestamp=1000))
    follower.append_as_follower(first, validate_batches(first))
    with pytest.raises(FollowerAppendError):
        follower.append_as_follower(first, validate_batches(first))  # offset 0 again
    later = bytearray(record_batch(b"b", timestamp=1000))
    later[0:8] = (5).to_bytes(8, "big")  # the leader's cleaner removed offsets 1..4
    follower.append_as_follower(later, validate_batches(later))
    assert follower.log_end_offset == 6


def test_truncation_drops_the_tail_for_good_and_resets_epochs_and_producers(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "f")
    leader = open_log(tmp_path / "l")
    for i in range(10):
        lead(leader, b"w%02d" % i, epoch=1 if i < 4 else 2, producer_id=9, sequence=i)
    replicate(leader, follower)
    paths = follower.truncate_to(4)
    assert follower.log_end_offset == 4 and follower.epochs == [(1, 0)]
    assert follower.end_offset_for_epoch(1) == (1, 4)
    assert follower.producer_state.producers[9].batches[-1].last_seq == 3
    assert all(Path(p).exists() for p in paths)
    follower.close_files()
    again = open_log(tmp_path / "f", clean=False, recovery_point=0)
    assert again.log_end_offset == 4, "nothing dropped comes back after a crash"
    assert again.epochs == [(1, 0)]
    resent = bytearray(record_batch(b"new", 9, 4, timestamp=1000))
    assert again.append(resent, validate_batches(resent), 3).base_offset == 4, "sequence 4 is new again"


def test_truncate_fully_restarts_the_log_at_the_leaders_start(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "f")
    for i in range(5):
        lead(follower, b"x%d" % i, epoch=1)
    follower.truncate_fully_and_start_at(100)
    assert (follower.log_start_offset, follower.log_end_offset, follower.epochs) == (100, 100, [])
    follower.close_files()
    assert open_log(tmp_path / "f").log_end_offset == 100


def test_the_partition_truncates_under_the_io_lock(tmp_path: Path) -> None:
    from logbus.cluster.metadata import PartitionState
    from logbus.cluster.partition import Partition

    async def scenario() -> None:
        log_ = open_log(tmp_path / "p")
        for i in range(6):
            lead(log_, b"y%d" % i, epoch=1)
        partition = Partition("t", 0, "id", 2, log_, PartitionState(1, 1, [1, 2], [1, 2]), 6)
        async with log_.io_lock:  # a flush in progress: truncation waits for it
            task = asyncio.ensure_future(partition.truncate_to(3))
            await asyncio.sleep(0)
            assert log_.log_end_offset == 6 and not task.done()
        await task
        assert log_.log_end_offset == 3 and partition.high_watermark == 3

    asyncio.run(scenario())
