"""The share-partition state machine (KIP-932) in-process, on a manual clock: acquisition, lock
expiry, the delivery-count limit, release, reject, the SPSO's advance, the record-lock bound."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from manual_clock import ManualClock

from logbus.cluster.share_partition import (
    AckBatch,
    AckType,
    AcquiredRange,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)
from logbus.errors import KafkaApiError

LOCK_MS = 1000


def make(start: int = 0, **config: Any) -> tuple[SharePartition, ManualClock, list[int]]:
    clock = ManualClock()
    releases: list[int] = []
    partition = SharePartition(start, SharePartitionConfig(lock_duration_ms=LOCK_MS, **config), clock,
                               on_released=lambda: releases.append(clock.now))
    return partition, clock, releases


def ack(partition: SharePartition, member: str, first: int, last: int, *types: AckType) -> None:
    partition.acknowledge(member, [AckBatch(first, last, tuple(int(t) for t in types))])


def states(partition: SharePartition) -> dict[int, RecordState]:
    return {offset: record.state for offset, record in partition.records.items()}


def test_acquire_new_records_in_whole_batches() -> None:
    partition, _, _ = make()
    assert partition.fetch_offset() == 0
    acquired = partition.acquire("m1", [(0, 4), (5, 9)], max_records=3)
    assert acquired == [AcquiredRange(0, 4, 1)]  # a whole batch, past max_records
    assert partition.end_offset == 5 and partition.fetch_offset() == 5
    assert partition.acquire("m2", [(5, 9)], max_records=2, whole_batches=False) == [AcquiredRange(5, 6, 1)]


def test_accept_advances_the_start_offset_past_done_records_only() -> None:
    partition, clock, _ = make()
    partition.acquire("m1", [(0, 4)], max_records=10)
    ack(partition, "m1", 1, 2, AckType.ACCEPT)
    assert partition.start_offset == 0  # offset 0 is still acquired
    ack(partition, "m1", 0, 0, AckType.ACCEPT)
    assert partition.start_offset == 3
    ack(partition, "m1", 3, 4, AckType.ACCEPT)
    assert partition.start_offset == 5 and partition.records == {}
    assert clock.live() == 0  # every record acknowledged: the lock's timer is gone


def test_release_makes_records_available_again_with_a_higher_delivery_count() -> None:
    partition, _, releases = make()
    partition.acquire("m1", [(0, 2)], max_records=10)
    ack(partition, "m1", 1, 1, AckType.RELEASE)
    assert len(releases) == 1 and partition.fetch_offset() == 1
    assert partition.acquire("m2", [(0, 2)], max_records=10) == [AcquiredRange(1, 1, 2)]


def test_reject_archives_and_is_never_redelivered() -> None:
    partition, clock, _ = make()
    partition.acquire("m1", [(0, 1)], max_records=10)
    ack(partition, "m1", 0, 1, AckType.REJECT)
    assert partition.start_offset == 2
    clock.advance(LOCK_MS * 2)
    assert partition.acquire("m2", [(0, 1)], max_records=10) == []


def test_lock_expiry_releases_the_acquired_records() -> None:
    partition, clock, releases = make()
    partition.acquire("m1", [(0, 3)], max_records=10)
    ack(partition, "m1", 0, 0, AckType.ACCEPT)
    clock.advance(LOCK_MS - 1)
    assert states(partition)[1] is RecordState.ACQUIRED and not releases
    clock.advance(1)
    assert {o: s for o, s in states(partition).items()} == {o: RecordState.AVAILABLE for o in (1, 2, 3)}
    assert releases == [clock.now]
    with pytest.raises(KafkaApiError) as refused:  # too late: the lock is gone
        ack(partition, "m1", 1, 1, AckType.ACCEPT)
    assert refused.value.code == ErrorCode.invalid_record_state
    assert partition.acquire("m2", [(0, 3)], max_records=10) == [AcquiredRange(1, 3, 2)]


def test_delivery_count_limit_archives_on_the_last_release() -> None:
    partition, clock, _ = make(delivery_count_limit=2)
    partition.acquire("m1", [(0, 0)], max_records=1)
    clock.advance(LOCK_MS)  # first delivery timed out: available again
    assert partition.acquire("m1", [(0, 0)], max_records=1) == [AcquiredRange(0, 0, 2)]
    ack(partition, "m1", 0, 0, AckType.RELEASE)  # second delivery released: the limit is reached
    assert partition.start_offset == 1 and partition.fetch_offset() == 1


def test_renew_extends_the_lock() -> None:
    partition, clock, releases = make()
    partition.acquire("m1", [(0, 1)], max_records=10)
    clock.advance(LOCK_MS // 2)
    ack(partition, "m1", 0, 0, AckType.RENEW)
    clock.advance(LOCK_MS // 2)
    assert states(partition) == {0: RecordState.ACQUIRED, 1: RecordState.AVAILABLE} and len(releases) == 1
    clock.advance(LOCK_MS // 2)
    assert states(partition)[0] is RecordState.AVAILABLE


def test_acknowledgement_by_another_member_is_refused_whole() -> None:
    partition, _, _ = make()
    partition.acquire("m1", [(0, 1)], max_records=10)
    partition.acquire("m2", [(2, 3)], max_records=10)
    with pytest.raises(KafkaApiError) as refused:
        partition.acknowledge("m1", [AckBatch(0, 1, (1,)), AckBatch(2, 2, (1,))])
    assert refused.value.code == ErrorCode.invalid_record_state
    assert states(partition)[0] is RecordState.ACQUIRED  # nothing applied


@pytest.mark.parametrize("batch", [AckBatch(0, 1, (1, 1, 1)), AckBatch(1, 0, (1,)), AckBatch(0, 0, (9,))])
def test_malformed_acknowledgement_is_an_invalid_request(batch: AckBatch) -> None:
    partition, _, _ = make()
    partition.acquire("m1", [(0, 1)], max_records=10)
    with pytest.raises(KafkaApiError) as refused:
        partition.acknowledge("m1", [batch])
    assert refused.value.code == ErrorCode.invalid_request


def test_acknowledging_offsets_never_in_flight_is_refused_without_walking_them() -> None:
    partition, _, _ = make()
    partition.acquire("m1", [(0, 1)], max_records=10)
    with pytest.raises(KafkaApiError) as refused:
        ack(partition, "m1", 0, 2**62, AckType.ACCEPT)
    assert refused.value.code == ErrorCode.invalid_record_state


def test_per_offset_types_and_gaps() -> None:
    partition, _, _ = make()
    partition.acquire("m1", [(0, 3)], max_records=10)
    ack(partition, "m1", 0, 3, AckType.ACCEPT, AckType.GAP, AckType.RELEASE, AckType.REJECT)
    assert partition.start_offset == 2 and states(partition) == {2: RecordState.AVAILABLE, 3: RecordState.ARCHIVED}


def test_member_leaving_releases_only_its_records() -> None:
    partition, _, releases = make()
    partition.acquire("m1", [(0, 1)], max_records=10)
    partition.acquire("m2", [(2, 3)], max_records=10)
    partition.release_member("m1")
    assert states(partition) == {0: RecordState.AVAILABLE, 1: RecordState.AVAILABLE,
                                 2: RecordState.ACQUIRED, 3: RecordState.ACQUIRED}
    assert len(releases) == 1


def test_record_locks_bound_what_is_in_flight() -> None:
    partition, _, _ = make(max_record_locks=4)
    assert partition.acquire("m1", [(0, 2), (3, 5), (6, 8)], max_records=100) == [AcquiredRange(0, 5, 1)]
    assert partition.fetch_offset() is None  # 6 in flight: nothing more until the SPSO moves
    ack(partition, "m1", 0, 3, AckType.ACCEPT)
    assert partition.fetch_offset() == 6


def test_compacted_gaps_between_batches_are_archived() -> None:
    partition, _, _ = make()
    assert partition.acquire("m1", [(0, 1), (5, 6)], max_records=10) == [AcquiredRange(0, 1, 1),
                                                                         AcquiredRange(5, 6, 1)]
    ack(partition, "m1", 0, 1, AckType.ACCEPT)
    assert partition.start_offset == 5


def test_log_start_moving_up_archives_what_it_passes() -> None:
    partition, clock, _ = make(start=10)
    partition.acquire("m1", [(10, 14)], max_records=10)
    partition.move_log_start(12)
    assert partition.start_offset == 12 and set(partition.records) == {12, 13, 14}
    partition.move_log_start(20)
    assert partition.start_offset == partition.end_offset == 20 and partition.records == {}
    assert clock.live() == 0


def test_control_batches_are_archived_not_acquired() -> None:
    partition, _, _ = make()
    assert partition.acquire("m1", [(0, 1, False), (2, 2, True)], max_records=10) == [AcquiredRange(0, 1, 1)]
    assert partition.end_offset == 3 and partition.fetch_offset() == 3
    ack(partition, "m1", 0, 1, AckType.ACCEPT)
    assert partition.start_offset == 3


def test_lag_leaves_out_the_records_after_the_start_offset_already_done() -> None:
    """KIP-1226's lag: the high watermark minus the SPSO, less the records in flight already
    acknowledged or archived (acquired and available ones still count)."""
    partition, _, _ = make(start=10)
    assert partition.lag(15) == 5
    partition.acquire("m1", [(10, 19)], max_records=10)
    ack(partition, "m1", 12, 13, AckType.ACCEPT)
    ack(partition, "m1", 15, 15, AckType.REJECT)
    ack(partition, "m1", 16, 16, AckType.RELEASE)
    assert partition.start_offset == 10 and partition.lag(25) == 15 - 3
    ack(partition, "m1", 10, 11, AckType.ACCEPT)  # the SPSO moves past 10..13
    assert partition.start_offset == 14 and partition.lag(25) == 25 - 14 - 1
    assert partition.lag(12) == 0  # a start offset past the high watermark is no backlog
