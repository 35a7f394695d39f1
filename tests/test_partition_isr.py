"""The leader's ISR changes and high watermark, in-process on a real log (Kafka's maximalIsr).

Once the metadata store has written an ISR expansion the controller may elect the new member,
so from the moment the leader asks for it, no record that member lacks may count as
acknowledged. These tests hold the store's answer back and check what the HW does meanwhile.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_storage import record_batch
from test_storage_unit import make_config

from logbus.cluster.delayed_fetch import ChangeWatch
from logbus.cluster.metadata import PartitionState
from logbus.cluster.partition import Partition
from logbus.errors import KafkaStorageError, NotEnoughReplicasAfterAppendError, NotLeaderError, RequestTimedOutError
from logbus.protocol.records import validate_batches
from logbus.storage.log import PartitionLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def leader_of(directory: Path, isr: list[int], requests: list[list[int]], clock: Clock) -> Partition:
    """Broker 1 leading replicas 1, 2, 3 with `isr`; ISR changes it asks for land in `requests`."""
    log_ = PartitionLog(str(directory), "t", 0, make_config(**{"min.insync.replicas": "2"}))
    log_.load(0, 0, True)
    state = PartitionState(1, 3, [1, 2, 3], isr, partition_epoch=7)
    return Partition("t", 0, "id", 1, log_, state, 0, lambda _p, isr_: requests.append(isr_), clock)


def append(partition: Partition, count: int) -> None:
    for i in range(count):
        raw = bytearray(record_batch(b"v%d" % i))
        partition.append_as_leader(raw, validate_batches(raw), -1)


def test_a_member_being_added_holds_the_hw_until_the_store_answers(tmp_path: Path) -> None:
    async def scenario() -> None:
        requests: list[list[int]] = []
        partition = leader_of(tmp_path, [1, 2], requests, Clock())
        append(partition, 4)
        partition.update_follower(2, 4)
        partition.update_follower(3, 4)  # caught up: asks to join
        assert requests == [[1, 2, 3]] and partition.high_watermark == 4
        append(partition, 3)
        partition.update_follower(2, 7)
        assert partition.high_watermark == 4, "broker 3 may already be in the stored ISR"
        assert partition.replicated(7) is False
        partition.update_follower(3, 6)
        assert partition.high_watermark == 6
        partition.update_state(PartitionState(1, 3, [1, 2, 3], [1, 2, 3], partition_epoch=8))
        partition.update_follower(3, 7)
        assert partition.high_watermark == 7 and partition.replicated(7) is True

    asyncio.run(scenario())


def expansion_pending(directory: Path) -> Partition:
    """Broker 3 (at offset 0) asked to join; broker 2 has both records appended since."""
    requests: list[list[int]] = []
    partition = leader_of(directory, [1, 2], requests, Clock())
    partition.update_follower(3, 0)
    append(partition, 2)
    partition.update_follower(2, 2)
    assert requests == [[1, 2, 3]] and partition.high_watermark == 0
    return partition


def test_an_expansion_the_store_refused_stops_counting_the_member(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = expansion_pending(tmp_path)
        partition.isr_change_failed(maybe_written=False)
        assert partition.high_watermark == 2 and not partition.isr_change_pending

    asyncio.run(scenario())


def test_an_expansion_of_unknown_outcome_keeps_counting_the_member(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = expansion_pending(tmp_path)
        partition.isr_change_failed(maybe_written=True)
        assert partition.high_watermark == 0 and not partition.isr_change_pending
        partition.update_state(PartitionState(1, 3, [1, 2, 3], [1, 2], partition_epoch=8))
        assert partition.high_watermark == 2, "the store's answer settles it"

    asyncio.run(scenario())


def test_a_member_being_dropped_counts_until_the_store_has_dropped_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        requests: list[list[int]] = []
        clock = Clock()
        partition = leader_of(tmp_path, [1, 2, 3], requests, clock)
        append(partition, 2)
        partition.update_follower(2, 2)
        clock.now += 10
        partition.update_follower(2, 2)
        partition.shrink_isr_if_lagging(5)
        assert requests == [[1, 2]] and partition.high_watermark == 0
        partition.update_state(PartitionState(1, 3, [1, 2, 3], [1, 2], partition_epoch=8))
        assert partition.high_watermark == 2

    asyncio.run(scenario())


def test_a_failed_isr_change_is_asked_for_again_after_its_pause_not_at_every_fetch(tmp_path: Path) -> None:
    async def scenario() -> None:
        requests: list[list[int]] = []
        clock = Clock()
        partition = leader_of(tmp_path, [1, 2], requests, clock)
        partition.update_follower(3, 0)
        assert requests == [[1, 2, 3]]
        partition.isr_change_failed(maybe_written=True, retry_after_s=1.0)
        for _ in range(5):
            partition.update_follower(3, 0)  # fetches while the store is out of reach
        assert requests == [[1, 2, 3]]
        clock.now += 1.0
        partition.update_follower(3, 0)
        assert requests == [[1, 2, 3], [1, 2, 3]]

    asyncio.run(scenario())


def test_delete_records_waits_for_every_live_follower_to_adopt_the_log_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader_of(tmp_path, [1, 2, 3], [], Clock())
        append(partition, 6)
        partition.update_follower(2, 6, 0)
        partition.update_follower(3, 6, 0)
        assert partition.delete_records_before(4) == 4
        waiting = asyncio.ensure_future(partition.wait_low_watermark(4, {1, 2, 3}, 5))
        partition.update_follower(2, 6, 4)
        await asyncio.sleep(0)
        assert not waiting.done(), "broker 3 still starts at 0"
        assert partition.low_watermark({1, 2}) == 4, "a dead broker's replica is not waited for"
        partition.update_follower(3, 6, 4)
        assert await waiting is None
        with pytest.raises(RequestTimedOutError):
            await partition.wait_low_watermark(5, {1, 2, 3}, 0.01)

    asyncio.run(scenario())


def test_delete_records_wait_ends_with_kafka_storage_error_when_the_log_goes_offline(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader_of(tmp_path, [1, 2, 3], [], Clock())
        append(partition, 2)
        partition.update_follower(2, 2, 0)
        partition.delete_records_before(1)
        waiting = asyncio.ensure_future(partition.wait_low_watermark(1, {1, 2}, 30))
        await asyncio.sleep(0)
        assert not waiting.done()
        partition.go_offline()
        with pytest.raises(KafkaStorageError):
            await asyncio.wait_for(waiting, 5)

    asyncio.run(scenario())


def test_replicated_says_not_yet_until_the_hw_is_there_then_refuses_a_small_isr(tmp_path: Path) -> None:
    partition = leader_of(tmp_path, [1, 2], [], Clock())
    append(partition, 2)
    assert partition.replicated(2) is False, "broker 2 has not fetched"
    partition.update_follower(2, 2)
    assert partition.replicated(2) is True
    append(partition, 1)
    partition.update_state(PartitionState(1, 3, [1, 2, 3], [1], partition_epoch=8))
    # the HW is at the log end (a lone ISR) but below min.insync.replicas=2: the records are in
    # the log, not acknowledged
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        partition.replicated(3)
    partition.update_state(PartitionState(2, 4, [1, 2, 3], [2], partition_epoch=9))
    with pytest.raises(NotLeaderError):
        partition.replicated(3)


def test_a_follower_adopts_its_leaders_log_start_up_to_its_high_watermark(tmp_path: Path) -> None:
    log_ = PartitionLog(str(tmp_path), "t", 0, make_config())
    log_.load(0, 0, True)
    follower = Partition("t", 0, "id", 2, log_, PartitionState(1, 3, [1, 2], [1, 2], partition_epoch=1), 0)
    for i in range(5):
        raw = bytearray(record_batch(b"v%d" % i))
        headers = validate_batches(raw)
        log_.append(raw, headers, 3)
    follower.follow_high_watermark(3)
    follower.follow_log_start_offset(4)
    assert log_.log_start_offset == 3, "never past what this replica knows is committed"
    follower.follow_log_start_offset(2)
    assert log_.log_start_offset == 3, "never back"


def test_a_followers_session_keeps_it_caught_up_on_the_partitions_its_fetches_do_not_name(tmp_path: Path) -> None:
    """An incremental fetch names only the partitions that moved (KIP-227): a follower that had the
    whole log stays caught up as of its session's latest fetch while the log does not grow; once
    it grows, only a fetch of the new records catches it up again."""
    async def scenario() -> None:
        requests: list[list[int]] = []
        clock = Clock()
        partition = leader_of(tmp_path, [1, 2, 3], requests, clock)
        append(partition, 1)
        partition.update_follower(3, 1)  # no session: its own fetches only
        append(partition, 1)
        session = ChangeWatch()
        partition.update_follower(2, 2, session=session)
        clock.now += 20
        session.fetched_at = clock.now  # broker 2's session fetched, naming other partitions
        partition.shrink_isr_if_lagging(10)
        assert requests == [[1, 2]], "broker 3 lacks a record since 20 s"
        partition.isr_change_failed(maybe_written=False)
        append(partition, 1)
        clock.now += 20
        session.fetched_at = clock.now
        partition.shrink_isr_if_lagging(10)
        assert requests == [[1, 2], [1]], "broker 2 lacks the records appended since its last fetch of them"

    asyncio.run(scenario())


def test_a_follower_with_the_whole_log_stays_in_the_isr_however_long_since_it_fetched(tmp_path: Path) -> None:
    """Kafka's isCaughtUp: a follower whose log ends where the leader's does is caught up. Dropped
    for a fetch round longer than replica.lag.time.max.ms, the followers of 10,000 idle new
    partitions on a loaded machine left and rejoined their ISRs for minutes (issue 25)."""
    async def scenario() -> None:
        requests: list[list[int]] = []
        clock = Clock()
        partition = leader_of(tmp_path, [1, 2, 3], requests, clock)
        append(partition, 2)
        partition.update_follower(2, 2)
        partition.update_follower(3, 2)
        clock.now += 60
        partition.shrink_isr_if_lagging(10)
        assert requests == []
        append(partition, 1)
        partition.update_follower(2, 3)
        clock.now += 1
        partition.shrink_isr_if_lagging(10)
        assert requests == [[1, 2]], "broker 3 lacks the new record and was last caught up 61 s ago"

    asyncio.run(scenario())


def test_a_new_partitions_follower_that_never_fetched_stays_for_the_lag_time_after_the_election(
        tmp_path: Path) -> None:
    """Kafka's makeLeader: an ISR member's last caught-up time is when this broker became its
    leader. A follower whose new log comes seconds after the leader's (a 10,000-partition
    CreateTopics, issue 25) is dropped only once replica.lag.time.max.ms has passed since then,
    and then only while it still has not got the leader's log end (here, a record written
    before it first fetched)."""
    async def scenario() -> None:
        requests: list[list[int]] = []
        clock = Clock()
        partition = leader_of(tmp_path, [1, 2, 3], requests, clock)
        append(partition, 1)
        clock.now += 29.9
        partition.shrink_isr_if_lagging(30)
        assert requests == []
        partition.update_follower(3, 1)
        clock.now += 0.2
        partition.shrink_isr_if_lagging(30)
        assert requests == [[1, 3]]

    asyncio.run(scenario())


def test_a_change_watch_collects_the_partitions_that_moved_and_wakes_its_fetch(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader_of(tmp_path, [1, 2, 3], [], Clock())
        watch = ChangeWatch()
        watch.watch(partition, ("t", 0))
        await asyncio.wait_for(watch.wait(0.01), 5)  # nothing moved: it times out
        waiting = asyncio.ensure_future(watch.wait(30))
        await asyncio.sleep(0)
        append(partition, 1)
        await asyncio.wait_for(waiting, 5)
        assert watch.take() == {("t", 0)} and watch.take() == set()
        watch.forget_all()
        append(partition, 1)
        assert watch.take() == set(), "a partition not watched again since forget_all counts no more"

    asyncio.run(scenario())
