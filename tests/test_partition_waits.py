"""A leader's acks=all waits and its idea of recently written records, in-process on a real log.

acks=all waits are woken by what can decide them (the HW reaching their offset, leadership
lost, the log dir offline), each with its own verdict; `recently_written` takes the records of
the last `RECENT_S` as in the page cache, not only the last MiB (a follower that produces in
flight keep megabytes behind the log end would otherwise cost a mincore per fetch).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_partition_isr import Clock, append, leader_of
from test_storage import record_batch

from logbus.cluster.metadata import PartitionState
from logbus.cluster.partition import RECENT_BYTES, RECENT_S, Partition
from logbus.errors import (
    KafkaApiError,
    KafkaStorageError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderError,
    RequestTimedOutError,
)
from logbus.protocol.records import validate_batches


def waits(partition: Partition, offsets: list[int], timeout: float = 30.0) -> list[asyncio.Task]:
    return [asyncio.ensure_future(partition.wait_replicated(offset, timeout)) for offset in offsets]


async def settled(tasks: list[asyncio.Task]) -> list[type[KafkaApiError] | None | str]:
    """Each wait's verdict: None (replicated), the refusal's class it raised, or "waiting"."""
    for _ in range(5):
        await asyncio.sleep(0)
    return [_verdict(task) if task.done() else "waiting" for task in tasks]


def _verdict(task: asyncio.Task) -> type[KafkaApiError] | None:
    refusal = task.exception()
    assert refusal is None or isinstance(refusal, KafkaApiError), refusal
    return None if refusal is None else type(refusal)


def test_acks_all_waits_end_as_the_hw_reaches_their_offsets(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader_of(tmp_path, [1, 2, 3], [], Clock())
        append(partition, 3)
        tasks = waits(partition, [3, 1, 2])
        partition.update_follower(2, 3)
        append(partition, 1)  # the LEO moves, the HW does not
        assert await settled(tasks) == ["waiting"] * 3
        partition.update_follower(3, 2)
        assert await settled(tasks) == ["waiting", None, None]
        partition.update_follower(3, 3)
        assert await settled(tasks) == [None, None, None]

    asyncio.run(scenario())


def test_acks_all_waits_end_when_leadership_moves_or_the_log_goes_offline(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader_of(tmp_path / "a", [1, 2, 3], [], Clock())
        append(partition, 2)
        tasks = waits(partition, [1, 2])
        partition.update_state(PartitionState(2, 4, [1, 2, 3], [2, 3], partition_epoch=8))
        assert await settled(tasks) == [NotLeaderError] * 2

        offline = leader_of(tmp_path / "b", [1, 2, 3], [], Clock())
        append(offline, 1)
        tasks = waits(offline, [1])
        offline.go_offline()
        assert await settled(tasks) == [KafkaStorageError]

    asyncio.run(scenario())


def test_an_acks_all_wait_times_out_and_later_waits_still_end(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader_of(tmp_path, [1, 2], [], Clock())
        append(partition, 2)
        with pytest.raises(RequestTimedOutError):
            await partition.wait_replicated(1, 0.01)
        tasks = waits(partition, [2])
        partition.update_follower(2, 2)
        assert await settled(tasks) == [None]
        append(partition, 1)
        tasks = waits(partition, [3])
        partition.update_state(PartitionState(1, 3, [1, 2, 3], [1], partition_epoch=8))
        # a lone ISR, below min.insync.replicas=2: the HW moves, the wait fails
        assert await settled(tasks) == [NotEnoughReplicasAfterAppendError]

    asyncio.run(scenario())


def test_records_of_the_last_seconds_count_as_recently_written(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = Clock()
        partition = leader_of(tmp_path, [1, 2], [], clock)
        append(partition, 1)
        clock.now += RECENT_S + 1  # offset 0 was written long ago
        big = bytearray(record_batch(b"x" * (RECENT_BYTES // 2)))
        for _ in range(3):  # offsets 1-3, 1.5 MiB, written now
            partition.append_as_leader(bytearray(big), validate_batches(big), 1)
        assert partition.recently_written(1), "written moments ago, more than RECENT_BYTES before the end"
        assert not partition.recently_written(0)
        clock.now += RECENT_S + 1
        assert not partition.recently_written(1)
        assert partition.recently_written(3)  # still in the last RECENT_BYTES

    asyncio.run(scenario())
