"""In-process tests of the batching of a leader's ISR changes (cluster/isr_changes.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from logbus.cluster.isr_changes import IsrChangeBatcher
from logbus.cluster.metadata import IsrChange, PartitionState, StalePartitionStateError


class RecordingStore:
    """Answers each batch when the test releases it; a change for partition 13 loses its race."""

    def __init__(self) -> None:
        self.batches: list[list[IsrChange]] = []
        self.release = asyncio.Event()

    async def write(self, changes: list[IsrChange]) -> list[PartitionState | BaseException]:
        self.batches.append(changes)
        await self.release.wait()
        return [StalePartitionStateError("moved") if c.index == 13 else
                PartitionState(1, c.leader_epoch, [1, 2, 3], c.isr, c.partition_epoch + 1) for c in changes]


async def settle(done: Callable[[], bool]) -> None:
    """Let the batcher's task run until `done()` (a bounded number of loop turns)."""
    for _ in range(1000):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("the batcher did not finish")


def change(index: int, isr: list[int]) -> IsrChange:
    return IsrChange("t", index, 0, 5, isr)


def test_changes_asked_for_during_a_write_go_together_in_the_next_one() -> None:
    async def scenario() -> None:
        store = RecordingStore()
        answers: list[tuple[str, int, object]] = []
        batcher = IsrChangeBatcher(store.write, lambda owner, c, answer: answers.append((owner, c.index, answer)))
        batcher.submit("p0", change(0, [1, 2]))
        await asyncio.sleep(0)  # the first write is sent alone
        for index in range(1, 5):
            batcher.submit(f"p{index}", change(index, [1, 2, 3]))
        batcher.submit("p13", change(13, [1, 3]))
        assert [len(b) for b in store.batches] == [1]
        store.release.set()
        await settle(lambda: len(answers) == 6)
        assert [[c.index for c in b] for b in store.batches] == [[0], [1, 2, 3, 4, 13]]
        assert [(owner, index) for owner, index, _ in answers] == [
            ("p0", 0), ("p1", 1), ("p2", 2), ("p3", 3), ("p4", 4), ("p13", 13)]
        assert answers[1][2] == PartitionState(1, 0, [1, 2, 3], [1, 2, 3], 6)
        assert isinstance(answers[-1][2], StalePartitionStateError)  # fails alone: the others are written
        assert batcher.batches_written == 2

    asyncio.run(scenario())


def test_a_batch_holds_at_most_max_batch_changes_and_one_per_partition() -> None:
    async def scenario() -> None:
        store = RecordingStore()
        store.release.set()
        answers: list[int] = []
        batcher = IsrChangeBatcher(store.write, lambda _owner, c, _answer: answers.append(c.index), max_batch=3)
        for index in range(7):
            batcher.submit(index, change(index, [1, 2]))
        batcher.submit(2, change(2, [1, 2, 3]))  # not sent yet: replaces the queued change
        await settle(lambda: len(answers) == 7)
        assert [[c.index for c in b] for b in store.batches] == [[0, 1, 2], [3, 4, 5], [6]]
        assert store.batches[0][2].isr == [1, 2, 3]

    asyncio.run(scenario())


def test_a_restarted_followers_expansions_of_one_leader_go_in_one_write() -> None:
    """Its first fetch names all its partitions of this leader; written a thousand at a time one
    after the other, 5,000 expansions took 23 s on a loaded host (issue 25)."""
    async def scenario() -> None:
        store = RecordingStore()
        store.release.set()
        answers: list[int] = []
        batcher = IsrChangeBatcher(store.write, lambda _owner, c, _answer: answers.append(c.index))
        for index in range(5000):
            batcher.submit(index, change(index, [1, 2, 3]))
        await settle(lambda: len(answers) == 5000)
        assert [len(b) for b in store.batches] == [5000]

    asyncio.run(scenario())


def test_a_failed_write_fails_every_change_of_its_batch_and_the_next_batch_goes_on() -> None:
    async def scenario() -> None:
        calls: list[list[IsrChange]] = []

        async def failing_once(changes: list[IsrChange]) -> list[PartitionState | BaseException]:
            calls.append(changes)
            if len(calls) == 1:
                raise RuntimeError("a bug")
            return [PartitionState(1, 0, [1, 2], c.isr, 6) for c in changes]

        answers: list[tuple[int, object]] = []
        batcher = IsrChangeBatcher(failing_once, lambda _owner, c, answer: answers.append((c.index, answer)))
        batcher.submit(0, change(0, [1]))
        batcher.submit(1, change(1, [1]))
        await asyncio.sleep(0)
        batcher.submit(2, change(2, [1, 2]))
        await settle(lambda: len(answers) == 3)
        assert [type(answer).__name__ for _, answer in answers] == ["RuntimeError", "RuntimeError", "PartitionState"]

    asyncio.run(scenario())
