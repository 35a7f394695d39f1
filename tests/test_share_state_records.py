"""`__share_group_state` in-process: the ShareSnapshot/ShareUpdate records byte for byte as
Kafka's schemas lay them out (share-coordinator/src/main/resources/common/message), the share
coordinator's state replayed from a snapshot and its updates (and fencing), and the
share-partition's write-then-apply steps (plan, apply or abandon, restore)."""

from __future__ import annotations

import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.write_share_group_state.v0.request import StateBatch as WireStateBatch
from manual_clock import ManualClock

from logbus.cluster.share_partition import AckBatch, AckType, RecordState, SharePartition, SharePartitionConfig
from logbus.coordinator.records import RecordFormatError, coordinator_partition
from logbus.coordinator.share_coordinator import RedundantOffsets, ShareStates
from logbus.coordinator.share_records import (
    SNAPSHOT,
    UPDATE,
    ShareKey,
    ShareState,
    ShareUpdate,
    StateBatch,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_key,
    encode_snapshot,
    encode_update,
    topic_id_text,
)
from logbus.errors import KafkaApiError
from logbus.protocol.codec import encode

TOPIC_ID = uuid.UUID("52be70a9-f16a-4d78-ac10-04af559458d7")  # Kafka's "Ur5wqfFqTXisEASvVZRY1w"
KEY = ShareKey("gs1", TOPIC_ID, 3)


def q(value: int) -> bytes:
    return struct.pack(">q", value)


def i(value: int) -> bytes:
    return struct.pack(">i", value)


def h(value: int) -> bytes:
    return struct.pack(">h", value)


# ---------------------------------------------------------------- the records


def test_keys_are_the_record_type_then_group_topic_id_and_partition() -> None:
    body = h(3) + b"gs1" + TOPIC_ID.bytes + i(3)  # ShareSnapshotKey/ShareUpdateKey v0: not flexible
    assert encode_key(SNAPSHOT, KEY) == h(0) + body
    assert encode_key(UPDATE, KEY) == h(1) + body
    assert decode_key(h(1) + body) == (UPDATE, KEY)
    with pytest.raises(RecordFormatError):
        decode_key(h(3) + body)  # a consumer group's record type
    with pytest.raises(RecordFormatError):
        decode_key(h(0) + body[:-1])


def test_snapshot_value_is_kafkas_flexible_v0_layout() -> None:
    state = ShareState(state_epoch=2, leader_epoch=5, start_offset=100,
                       batches=(StateBatch(100, 104, 2, 1), StateBatch(105, 105, 0, 3)),
                       snapshot_epoch=7, create_timestamp=1_700_000_000_000, write_timestamp=1_700_000_000_500)
    expected = (h(0) + i(7) + i(2) + i(5) + q(100) + q(1_700_000_000_000) + q(1_700_000_000_500)
                + b"\x03"  # compact array of 2
                + q(100) + q(104) + b"\x02" + h(1) + b"\x00"
                + q(105) + q(105) + b"\x00" + h(3) + b"\x00"
                + b"\x00")  # no tagged fields (DeliveryCompleteCount left at its default)
    assert encode_snapshot(state) == expected
    assert decode_snapshot(expected) == state


def test_update_value_is_kafkas_flexible_v0_layout_and_skips_tagged_fields() -> None:
    update = ShareUpdate(snapshot_epoch=7, leader_epoch=6, start_offset=-1, batches=(StateBatch(9, 12, 4, 5),))
    expected = h(0) + i(7) + i(6) + q(-1) + b"\x02" + q(9) + q(12) + b"\x04" + h(5) + b"\x00" + b"\x00"
    assert encode_update(update) == expected
    assert decode_update(expected) == update
    with_count = expected[:-1] + b"\x01\x00\x04" + i(42)  # Kafka 4.2's DeliveryCompleteCount (tag 0)
    assert decode_update(with_count) == update
    with pytest.raises(RecordFormatError):
        decode_update(h(1) + expected[2:])  # a version this broker does not know
    with pytest.raises(RecordFormatError):
        decode_update(expected[:20])


def test_a_state_batch_is_laid_out_as_the_rpcs_state_batch() -> None:
    """The records' StateBatch and WriteShareGroupState's have the same fields: kio's encoding agrees."""
    wire = b"".join(encode(WireStateBatch(first_offset=9, last_offset=12, delivery_state=4, delivery_count=5)))
    assert encode_update(ShareUpdate(0, 0, 0, (StateBatch(9, 12, 4, 5),)))[-len(wire) - 1:-1] == wire


def test_the_coordinator_key_and_its_partition_are_kafkas() -> None:
    assert topic_id_text(TOPIC_ID) == "Ur5wqfFqTXisEASvVZRY1w"
    assert KEY.coordinator_key() == "gs1:Ur5wqfFqTXisEASvVZRY1w:3"
    # Utils.abs("gs1:Ur5wqfFqTXisEASvVZRY1w:3".hashCode()) % 50, as Java computes it
    code = 0
    for char in KEY.coordinator_key():
        code = (31 * code + ord(char)) & 0xFFFFFFFF
    code = code - (1 << 32) if code >= 1 << 31 else code
    assert coordinator_partition(KEY.coordinator_key(), 50) == abs(code) % 50


# ---------------------------------------------------------------- the share coordinator's state


def replay(states: ShareStates, *records: tuple[bytes, bytes | None]) -> None:
    for key, value in records:
        states.replay(key, value)


def test_a_snapshot_and_its_updates_replay_to_the_written_state() -> None:
    written = ShareStates(updates_per_snapshot=3)
    records = []
    for plan in (lambda: written.initialize(KEY, 0, 10, now_ms=1),
                 lambda: written.write(KEY, 0, 1, 12, (StateBatch(10, 11, 2, 1), StateBatch(12, 14, 0, 1)), now_ms=2),
                 lambda: written.write(KEY, 0, 1, -1, (StateBatch(13, 13, 2, 2),), now_ms=3)):
        change = plan()
        records.append(change.record)
        written.apply(KEY, change)
    assert [decode_key(key)[0] for key, _ in records] == [SNAPSHOT, UPDATE, UPDATE]
    expected = ShareState(0, 1, 12, (StateBatch(12, 12, 0, 1), StateBatch(13, 13, 2, 2), StateBatch(14, 14, 0, 1)),
                          0, 1, 3)
    assert written.states[KEY] == expected
    loaded = ShareStates(updates_per_snapshot=3)
    replay(loaded, *records)
    assert loaded.states[KEY].batches == expected.batches
    assert loaded.states[KEY].start_offset == 12
    # the third update since the snapshot is a snapshot of the whole state
    third = written.write(KEY, 0, 1, 13, (), now_ms=4)
    assert third.snapshot and decode_snapshot(third.record[1]).batches == (StateBatch(13, 13, 2, 2),
                                                                          StateBatch(14, 14, 0, 1))
    # a tombstone deletes; records that do not decode are skipped
    replay(loaded, (b"\x00", b"junk"), (encode_key(SNAPSHOT, KEY), None))
    assert KEY not in loaded.states


def test_the_redundant_prefix_ends_at_the_oldest_latest_snapshot() -> None:
    """Kafka's ShareCoordinatorOffsetsManager: below the oldest of the share-partitions' latest
    snapshots every record is overridden; a share-partition deleted needs nothing after its
    tombstone; a share-partition that stopped writing holds the prefix back."""
    one, two, three = (ShareKey("g", TOPIC_ID, n) for n in range(3))
    redundant = RedundantOffsets()
    assert redundant.prune_below() is None
    redundant.record(one, 0, deleted=False)
    assert redundant.prune_below() is None  # (offset 0: nothing below it)
    redundant.record(two, 1, deleted=False)
    redundant.record(three, 2, deleted=False)
    redundant.record(two, 4, deleted=False)
    redundant.record(three, 5, deleted=False)
    assert redundant.prune_below() is None  # `one` at 0 still needed
    redundant.record(one, 6, deleted=False)
    assert redundant.prune_below() == 4
    redundant.record(two, 7, deleted=True)  # the tombstone is needed until it is pruned itself
    assert redundant.prune_below() == 5
    redundant.record(three, 8, deleted=False)
    redundant.record(one, 9, deleted=False)
    assert redundant.prune_below() == 8 and set(redundant.snapshots) == {one, three}
    redundant.record(one, 10, deleted=True)
    redundant.record(three, 11, deleted=True)
    assert redundant.prune_below() == 11 and not redundant.snapshots


def test_a_replay_names_the_snapshots_that_bound_the_redundant_prefix() -> None:
    written = ShareStates(updates_per_snapshot=2)
    changes = [written.initialize(KEY, 0, 0, now_ms=1)]
    written.apply(KEY, changes[-1])
    for n in range(3):
        changes.append(written.write(KEY, 0, 0, -1, (StateBatch(n, n, 2, 1),), now_ms=2))
        written.apply(KEY, changes[-1])
    changes.append(written.delete(KEY))
    assert [change.snapshot for change in changes] == [True, False, True, False, False]
    loaded = ShareStates(updates_per_snapshot=2)
    snapshots = [loaded.replay(*change.record) for change in changes]
    assert snapshots == [KEY, None, KEY, None, KEY]  # the last: the tombstone
    assert loaded.replay(encode_key(UPDATE, KEY), None) is None
    assert loaded.replay(b"\x00", b"junk") is None


def test_writes_merge_as_ranges_and_bad_batches_are_refused() -> None:
    states = ShareStates(updates_per_snapshot=500)
    states.apply(KEY, states.initialize(KEY, 0, 0, now_ms=0))
    huge = states.write(KEY, 0, 0, 10, (StateBatch(0, 2**62, 2, 1),), now_ms=0)  # costs nothing
    states.apply(KEY, huge)
    states.apply(KEY, states.write(KEY, 0, 0, -1, (StateBatch(20, 29, 0, 2), StateBatch(25, 25, 4, 3)), now_ms=0))
    assert states.states[KEY].batches == (StateBatch(10, 19, 2, 1), StateBatch(20, 24, 0, 2), StateBatch(25, 25, 4, 3),
                                          StateBatch(26, 29, 0, 2), StateBatch(30, 2**62, 2, 1))
    for bad in (StateBatch(5, 4, 2, 1), StateBatch(-1, 4, 2, 1), StateBatch(1, 4, 1, 1)):
        with pytest.raises(KafkaApiError) as refused:
            states.write(KEY, 0, 0, -1, (bad,), now_ms=0)
        assert refused.value.code == ErrorCode.invalid_request
    restored = SharePartition.restore(10, states.states[KEY].batches, SharePartitionConfig(), ManualClock())
    assert restored.start_offset == restored.fetch_offset() == 20 and restored.end_offset == 10 + 2**16  # bounded


def test_fencing_of_older_leader_and_state_epochs() -> None:
    states = ShareStates(updates_per_snapshot=500)
    with pytest.raises(KafkaApiError) as unknown:
        states.write(KEY, 0, 1, 0, (), now_ms=0)
    assert unknown.value.code == ErrorCode.unknown_topic_or_partition
    states.apply(KEY, states.initialize(KEY, 1, 0, now_ms=0))
    bumped = states.read(KEY, 4)  # a new leader reads: its epoch is recorded
    assert bumped is not None
    states.apply(KEY, bumped)
    assert states.read(KEY, 4) is None  # nothing to record again
    for call, code in ((lambda: states.read(KEY, 3), ErrorCode.fenced_leader_epoch),
                       (lambda: states.write(KEY, 1, 3, 5, (), now_ms=0), ErrorCode.fenced_leader_epoch),
                       (lambda: states.write(KEY, 0, 4, 5, (), now_ms=0), ErrorCode.fenced_state_epoch),
                       (lambda: states.initialize(KEY, 0, 5, now_ms=0), ErrorCode.fenced_state_epoch)):
        with pytest.raises(KafkaApiError) as fenced:
            call()
        assert fenced.value.code == code


# ---------------------------------------------------------------- the share-partition's side


def share_partition(start: int = 0) -> tuple[SharePartition, ManualClock]:
    clock = ManualClock()
    return SharePartition(start, SharePartitionConfig(lock_duration_ms=1000, delivery_count_limit=3), clock), clock


def test_an_acknowledgement_applies_only_after_its_write() -> None:
    share, clock = share_partition()
    share.acquire("m", [(0, 4)], 10)
    plan = share.plan_acknowledge("m", [AckBatch(0, 1, (int(AckType.ACCEPT),)),
                                        AckBatch(2, 2, (int(AckType.RELEASE),))])
    assert plan.writes == (StateBatch(0, 1, 2, 1), StateBatch(2, 2, 0, 1))
    assert plan.start_offset == 2
    assert share.records[0].state is RecordState.ACQUIRED  # not yet
    clock.advance(1000)  # the lock runs out while the write is in flight: the held records stay
    assert [share.records[o].state for o in range(5)] == [RecordState.ACQUIRED] * 3 + [RecordState.AVAILABLE] * 2
    with pytest.raises(KafkaApiError):  # no second acknowledgement of records being written
        share.plan_acknowledge("m", [AckBatch(0, 0, (int(AckType.ACCEPT),))])
    share.apply_acknowledge(plan)
    assert share.start_offset == 2 and share.records[2].state is RecordState.AVAILABLE


def test_a_failed_write_changes_nothing_and_restore_rebuilds_the_state() -> None:
    share, clock = share_partition()
    share.acquire("m", [(0, 4)], 10)
    plan = share.plan_acknowledge("m", [AckBatch(0, 4, (int(AckType.ACCEPT),))])
    share.abandon(plan)
    assert share.start_offset == 0 and all(r.state is RecordState.ACQUIRED for r in share.records.values())
    share.acknowledge("m", [AckBatch(1, 1, (int(AckType.ACCEPT),))])  # still the member's to acknowledge
    clock.advance(1000)  # the lock runs out: the records released are the next write's
    batches, offsets = share.write_pending()
    assert batches == (StateBatch(0, 0, 0, 1), StateBatch(2, 4, 0, 1)) and offsets == {0, 2, 3, 4}
    restored = SharePartition.restore(0, (StateBatch(1, 1, 2, 1), StateBatch(3, 3, 4, 3), StateBatch(5, 5, 0, 2)),
                                      SharePartitionConfig(), clock)
    assert {o: (r.state, r.delivery_count) for o, r in restored.records.items()} == {
        0: (RecordState.AVAILABLE, 0), 1: (RecordState.ACKNOWLEDGED, 1), 2: (RecordState.AVAILABLE, 0),
        3: (RecordState.ARCHIVED, 3), 4: (RecordState.AVAILABLE, 0), 5: (RecordState.AVAILABLE, 2)}
    assert restored.fetch_offset() == 0 and restored.end_offset == 6
    ranges = restored.acquire("m", [(0, 2), (4, 6)], 10)  # offset 3 was archived; 6 is new
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in ranges] == [(0, 0, 1), (2, 2, 1), (4, 4, 1),
                                                                                    (5, 5, 3), (6, 6, 1)]
