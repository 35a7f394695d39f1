"""In-process tests of the storage half of transactions (issue 13): open transactions and the
first unstable offset, the last stable offset, the `.txnindex` of aborted transactions (Kafka's
34-byte entries), recovery, producer snapshots, followers, and the log cleaner's handling of
transactions (real files in tmp dirs; the cleaner's time is passed in)."""

from __future__ import annotations

import asyncio
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from test_storage_unit import make_config

from logbus.cluster.metadata import PartitionState
from logbus.cluster.partition import Partition
from logbus.errors import KafkaApiError
from logbus.protocol.records import (
    TRANSACTIONAL_BIT,
    build_batch,
    check_client_batch,
    iter_headers,
    iter_records,
    read_header,
    validate_batches,
    whole_batches_length,
)
from logbus.storage.cleaner import LogCleaner
from logbus.storage.log import InvalidProducerEpochError, PartitionLog
from logbus.storage.manager import LogManager
from logbus.storage.producer_state import ProducerStateManager

NOW = 1_000_000
TXN_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, LSO


# ---------------------------------------------------------------------- helpers


def open_log(directory: Path, clean: bool = True, recovery_point: int = 0,
             segment_bytes: int = 1 << 20) -> PartitionLog:
    config = make_config(**{"segment.bytes": str(segment_bytes)})
    log_ = PartitionLog(str(directory), "t", 0, config, clock=lambda: NOW)
    log_.load(recovery_point, 0, clean)
    return log_


def txn(log_: PartitionLog, producer_id: int, sequence: int, count: int = 1, epoch: int = 0) -> int:
    """Append a transactional batch of `count` records as leader; returns its base offset."""
    raw = build_batch([(None, b"t%d" % i) for i in range(count)], NOW, producer_id=producer_id,
                      producer_epoch=epoch, base_sequence=sequence, attributes=TRANSACTIONAL_BIT)
    return log_.append(bytearray(raw), validate_batches(raw), 0).base_offset


def plain(log_: PartitionLog, value: bytes = b"p") -> int:
    raw = build_batch([(None, value)], NOW)
    return log_.append(bytearray(raw), validate_batches(raw), 0).base_offset


def end(log_: PartitionLog, producer_id: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    """Write a COMMIT or ABORT marker; returns its offset."""
    return log_.append_control_marker(producer_id, epoch, commit, coordinator_epoch, 0).base_offset


def txn_entries(log_: PartitionLog) -> list[tuple[int, int, int, int, int]]:
    """Every `.txnindex` entry on disk, segment by segment, as Kafka's fields."""
    entries = []
    for segment in log_.segments:
        if os.path.exists(segment.txn_index.path):
            entries += TXN_ENTRY.iter_unpack(Path(segment.txn_index.path).read_bytes())
    return entries


def txn_files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.txnindex"))}


def open_txns(log_: PartitionLog) -> dict[int, int | None]:
    return {pid: entry.txn_first_offset for pid, entry in log_.producer_state.producers.items()}


def interleaved(log_: PartitionLog) -> None:
    """Producers 1 and 2 interleave; 2 aborts while 1 is open, then 1 commits, 3 aborts alone,
    and 4 stays open. Offsets: 0 plain, 1 p1, 2 p2, 3-4 p1, 5 abort p2, 6 commit p1, 7 p3,
    8 abort p3, 9 p4."""
    plain(log_)
    txn(log_, 1, 0)
    txn(log_, 2, 0)
    txn(log_, 1, 1, count=2)
    end(log_, 2, commit=False)
    end(log_, 1, commit=True)
    txn(log_, 3, 0)
    end(log_, 3, commit=False)
    txn(log_, 4, 0)


# ---------------------------------------------------------------------- first unstable and last stable offsets


def test_an_open_transaction_holds_the_first_unstable_offset_until_its_marker_is_below_the_hw(tmp_path) -> None:
    log_ = open_log(tmp_path / "t-0")
    plain(log_)
    assert log_.first_unstable_offset is None and log_.last_stable_offset(1) == 1
    assert txn(log_, 5, 0, count=3) == 1
    plain(log_)
    assert log_.first_unstable_offset == 1
    assert log_.last_stable_offset(5) == 1 and log_.last_stable_offset(0) == 0, "min(HW, first unstable)"
    assert end(log_, 5, commit=True) == 5
    assert log_.last_stable_offset(5) == 1, "the marker itself is not below the HW yet"
    assert log_.last_stable_offset(6) == 6 and log_.first_unstable_offset is None
    assert txn(log_, 5, 3) == 6 and log_.first_unstable_offset == 6, "the next transaction opens anew"
    assert end(log_, 5, commit=False) == 7
    assert log_.last_stable_offset(8) == 8 and log_.first_unstable_offset is None


def test_interleaved_producers_keep_the_earliest_open_transaction_first(tmp_path) -> None:
    log_ = open_log(tmp_path / "t-0")
    interleaved(log_)
    assert open_txns(log_) == {1: None, 2: None, 3: None, 4: 9}
    assert log_.last_stable_offset(6) == 1, "p1's commit at 6 is not below the HW: p1 is still unstable"
    assert log_.last_stable_offset(7) == 7
    assert log_.last_stable_offset(10) == 9


def test_a_marker_with_an_older_epoch_is_refused_and_a_bumped_one_ends_the_transaction(tmp_path) -> None:
    log_ = open_log(tmp_path / "t-0")
    txn(log_, 7, 0, epoch=2)
    with pytest.raises(KafkaApiError) as refused:
        end(log_, 7, commit=False, epoch=1)
    assert refused.value.code == ErrorCode.invalid_producer_epoch
    end(log_, 7, commit=True, epoch=3, coordinator_epoch=4)  # the coordinator fenced the producer
    assert log_.last_stable_offset(2) == 2 and open_txns(log_) == {7: None}
    txn(log_, 7, 0, epoch=3)
    with pytest.raises(KafkaApiError) as fenced:
        end(log_, 7, commit=False, epoch=3, coordinator_epoch=3)
    assert fenced.value.code == ErrorCode.transaction_coordinator_fenced
    assert log_.log_end_offset == 3, "nothing refused was written"


def test_markers_are_kafkas_control_batches_that_clients_may_not_produce(tmp_path) -> None:
    log_ = open_log(tmp_path / "t-0")
    txn(log_, 9, 0, epoch=1)
    offset = end(log_, 9, commit=False, epoch=1, coordinator_epoch=258)
    found = log_.read(offset, 1 << 20, log_.log_end_offset)
    raw = found.read()
    header = read_header(raw)
    assert (header.attributes, header.producer_id, header.producer_epoch, header.base_sequence) == (0x30, 9, 1, -1)
    assert validate_batches(raw) == [header], "framing and CRC32C hold"
    [record] = iter_records(raw, header)
    assert (record.key, record.value) == (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x01\x02")  # ABORT, epoch 258
    with pytest.raises(KafkaApiError) as refused:
        check_client_batch(header)
    assert refused.value.code == ErrorCode.invalid_record


def coordinator_batch(log_: PartitionLog, producer_id: int, epoch: int, value: bytes = b"offsets") -> int:
    """Append a transactional batch without a sequence, as the group coordinator writes a
    TxnOffsetCommit's offsets (the produce path refuses such a batch from a client)."""
    raw = build_batch([(b"k", value)], NOW, producer_id=producer_id, producer_epoch=epoch, base_sequence=-1,
                      attributes=TRANSACTIONAL_BIT)
    return log_.append(bytearray(raw), validate_batches(raw), 0).base_offset


def test_coordinator_batches_carry_no_sequence_and_are_checked_for_their_epoch_only(tmp_path) -> None:
    log_ = open_log(tmp_path / "t-0")
    assert coordinator_batch(log_, 7, 0, b"first") == 0
    assert coordinator_batch(log_, 7, 0, b"second") == 1, "neither a duplicate of the first nor out of order"
    end(log_, 7, commit=True)
    assert coordinator_batch(log_, 7, 1) == 3, "a new epoch needs no sequence 0 either"
    assert open_txns(log_) == {7: 3}
    with pytest.raises(InvalidProducerEpochError):
        coordinator_batch(log_, 7, 0)
    assert log_.log_end_offset == 4, "the fenced batch was not written"
    txn(log_, 8, 0)
    assert coordinator_batch(log_, 8, 0) == 5, "after a client's batches of the same epoch too"
    with pytest.raises(KafkaApiError) as refused:
        check_client_batch(read_header(build_batch([(None, b"x")], NOW, producer_id=9, producer_epoch=0,
                                                   base_sequence=-1)))
    assert refused.value.code == ErrorCode.invalid_record, "clients still need a sequence with a producer id"


# ---------------------------------------------------------------------- the aborted-transaction index


def test_an_abort_appends_kafkas_34_byte_entry_and_a_commit_none(tmp_path) -> None:
    log_ = open_log(tmp_path / "t-0")
    assert not list((tmp_path / "t-0").glob("*.txnindex")), "created by the first abort only"
    interleaved(log_)
    raw = (tmp_path / "t-0" / f"{0:020d}.txnindex").read_bytes()
    assert len(raw) == 2 * 34
    # p2 aborted at 5 while p1 (from 1) was open: LSO 1; p3 aborted alone at 8: LSO 9
    assert list(TXN_ENTRY.iter_unpack(raw)) == [(0, 2, 2, 5, 1), (0, 3, 7, 8, 9)]


def test_aborted_transactions_are_collected_across_segments(tmp_path) -> None:
    log_ = open_log(tmp_path / "t-0", segment_bytes=300)
    for pid in range(1, 6):  # each transaction's data and marker in its own segment or two
        txn(log_, pid, 0, count=3)
        plain(log_, b"x" * 150)
        end(log_, pid, commit=pid % 2 == 0)
    assert len(log_.segments) >= 5
    assert [entry[1:4] for entry in txn_entries(log_)] == [(1, 0, 4), (3, 10, 14), (5, 20, 24)]
    assert log_.collect_aborted_transactions(0, log_.log_end_offset) == [(1, 0), (3, 10), (5, 20)]
    assert log_.collect_aborted_transactions(5, 20) == [(3, 10)], "ends before 5, starts at 20: left out"
    assert log_.collect_aborted_transactions(14, 21) == [(3, 10), (5, 20)]
    assert log_.collect_aborted_transactions(25, 26) == []


def test_truncation_drops_the_entries_past_the_cut_and_reopens_their_transactions(tmp_path) -> None:
    log_ = open_log(tmp_path / "t-0", segment_bytes=400)
    interleaved(log_)
    log_.truncate_to(8)  # p3's abort marker goes
    assert [entry[3] for entry in txn_entries(log_)] == [5]
    assert len(b"".join(txn_files(tmp_path / "t-0").values())) == 34
    assert open_txns(log_)[3] == 7 and log_.last_stable_offset(8) == 7
    log_.truncate_to(5)  # and p2's
    assert txn_entries(log_) == [] and log_.last_stable_offset(5) == 1
    log_.truncate_fully_and_start_at(50)
    assert txn_files(tmp_path / "t-0") == {} and log_.first_unstable_offset is None


# ---------------------------------------------------------------------- recovery, snapshots, followers


def test_recovery_without_snapshots_rebuilds_open_transactions_and_the_index_byte_for_byte(tmp_path) -> None:
    directory = tmp_path / "t-0"
    log_ = open_log(directory, segment_bytes=300)
    interleaved(log_)
    txn(log_, 5, 0)
    end(log_, 5, commit=False)  # offsets 10, 11: the LSO of this entry is 9 (p4 is open)
    before, state = txn_files(directory), (open_txns(log_), log_.last_stable_offset(12))
    assert len(before) >= 2 and len(log_.segments) >= 3
    log_.close_files()
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()
    for index in directory.glob("*.txnindex"):
        index.write_bytes(TXN_ENTRY.pack(0, 99, 0, 10**9, 0))  # an entry recovery must not trust
    again = open_log(directory, clean=False, recovery_point=0, segment_bytes=300)
    assert txn_files(directory) == before
    assert (open_txns(again), again.last_stable_offset(12)) == state == ({1: None, 2: None, 3: None, 4: 9, 5: None}, 9)


def test_recovery_of_a_cut_log_drops_the_lost_markers_entries(tmp_path) -> None:
    directory = tmp_path / "t-0"
    log_ = open_log(directory)
    interleaved(log_)
    marker = log_.segments[-1].find_position(8)
    log_.close_files()
    with open(directory / f"{0:020d}.log", "r+b") as handle:
        handle.truncate(marker.position + 20)  # a torn write of p3's abort marker and what follows
    again = open_log(directory, clean=False, recovery_point=0)
    assert again.log_end_offset == 8
    assert txn_entries(again) == [(0, 2, 2, 5, 1)]
    assert open_txns(again)[3] == 7 and again.last_stable_offset(8) == 7


def test_a_snapshot_keeps_open_transactions_and_replay_continues_from_it(tmp_path) -> None:
    directory = tmp_path / "t-0"
    log_ = open_log(directory, segment_bytes=400)
    txn(log_, 1, 0, count=3)  # opens at 0 in the first segment
    plain(log_, b"y" * 200)
    plain(log_, b"z" * 200)  # rolls at 4: the snapshot there holds p1's open transaction
    assert (directory / f"{4:020d}.snapshot").exists()
    assert json.loads((directory / f"{4:020d}.snapshot").read_text())["1"]["txn_first_offset"] == 0
    end(log_, 1, commit=False)
    assert log_.segments[-1].base_offset == 4 and txn_entries(log_) == [(0, 1, 0, 5, 6)]
    log_.close_files()
    for first_segment in directory.glob(f"{0:020d}.*"):  # replay must not need the first segment
        first_segment.unlink()
    again = open_log(directory, clean=False, recovery_point=4, segment_bytes=400)
    assert txn_entries(again) == [(0, 1, 0, 5, 6)], "the first offset came from the snapshot"
    assert open_txns(again) == {1: None}


def test_snapshots_round_trip_and_old_snapshots_still_load(tmp_path) -> None:
    log_ = open_log(tmp_path / "t-0")
    interleaved(log_)
    log_.producer_state.write_snapshot(log_.log_end_offset)
    loaded = ProducerStateManager(str(tmp_path / "t-0"))
    assert loaded.load_snapshot(10) == 10
    assert loaded.snapshot_state() == log_.producer_state.snapshot_state()
    assert loaded.ongoing == {9: 4} and loaded.first_unstable_offset == 9
    old = {"3": {"epoch": 1, "last_timestamp": NOW, "batches": [[0, 0, 0, 0, NOW]]}}  # before transactions
    (tmp_path / "t-0" / f"{20:020d}.snapshot").write_text(json.dumps(old))
    assert loaded.load_snapshot(20) == 20
    assert loaded.producers[3].txn_first_offset is None and loaded.first_unstable_offset is None
    assert loaded.producers[3].batches[0].last_offset == 0


def test_a_follower_ends_with_the_leaders_transactions_and_index(tmp_path) -> None:
    leader, follower = open_log(tmp_path / "l", segment_bytes=300), open_log(tmp_path / "f", segment_bytes=300)
    interleaved(leader)
    while follower.log_end_offset < leader.log_end_offset:
        raw = leader.read(follower.log_end_offset, 200, leader.log_end_offset).read()
        data = bytearray(raw[: whole_batches_length(raw)])
        follower.append_as_follower(data, validate_batches(data))
    assert txn_files(tmp_path / "f") == txn_files(tmp_path / "l") != {}
    assert follower.producer_state.snapshot_state() == leader.producer_state.snapshot_state()
    assert follower.last_stable_offset(10) == leader.last_stable_offset(10) == 9


def test_retention_deletes_a_segments_txnindex_with_it(tmp_path) -> None:
    async def scenario() -> None:
        manager = LogManager(str(tmp_path / "data"), clock=lambda: NOW)
        log_ = manager.load_log("t", 0, make_config(**{"file.delete.delay.ms": "0"}))
        for pid in range(1, 4):  # segments 0, 4 and 8, each with an aborted transaction
            txn(log_, pid, 0, count=3)
            end(log_, pid, commit=False)
            log_.roll()
        directory = Path(log_.directory)
        before = txn_files(directory)
        assert len(before) == 3
        log_.delete_records_before(8)
        assert await manager.apply_retention() == 2
        await log_.jobs.drain()
        assert list(txn_files(directory)) == list(before)[2:]
        assert not list(directory.glob("*.deleted"))
        assert log_.collect_aborted_transactions(0, log_.log_end_offset) == [(3, 8)]
        await manager.shutdown()

    asyncio.run(scenario())


def test_partition_reads_report_the_lso_and_read_committed_stops_there(tmp_path) -> None:
    log_ = open_log(tmp_path / "t-0")
    interleaved(log_)
    partition = Partition("t", 0, "id", 1, log_, PartitionState(1, 1, [1], [1]), 10)
    uncommitted = partition.read(0, 1 << 20)
    committed = partition.read(0, 1 << 20, read_committed=True)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (10, 9)
    assert [h.last_offset for h in validate_batches(uncommitted.slice.read())][-1] == 9
    assert [h.last_offset for h in validate_batches(committed.slice.read())][-1] == 8
    assert partition.read(9, 1 << 20, read_committed=True).slice is None


# ---------------------------------------------------------------------- the cleaner

RETENTION_MS = 1000  # delete.retention.ms: markers are written at NOW, so they may go from NOW + 1000


class Cleanings:
    """A compacted log and one LogCleaner over it, cleaning at the time each call says."""

    def __init__(self, directory: Path) -> None:
        config = make_config(**{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                "delete.retention.ms": str(RETENTION_MS)})
        self.log = PartitionLog(str(directory), "t", 0, config, clock=lambda: NOW)
        self.log.load(0, 0, True)
        self.cleaner = LogCleaner(str(directory.parent), {("t", 0): self.log})

    def clean(self, now: int = NOW) -> None:
        """Roll (so everything written is cleanable) and run one cleaning at `now`, the HW at the
        log end (as a partition tells the log: markers below it make their transactions stable)."""
        self.log.roll()
        self.log.on_high_watermark(self.log.log_end_offset)
        plan = self.cleaner.plan(("t", 0), self.log, now)
        assert plan is not None, "a cleaning is due"
        assert asyncio.run(self.cleaner.clean(plan)) == 1

    def batches(self) -> list[tuple[int, bool, int]]:
        """(base offset, control, record count) of every batch in the log."""
        return [(header.base_offset, header.is_control, header.record_count)
                for _, header in self.log._batches_from_offset(0)]

    def values(self) -> list[bytes | None]:
        """What a read_committed reader gets: the values of the records it keeps, in order."""
        data = Partition("t", 0, "id", 1, self.log, PartitionState(1, 1, [1], [1]), self.log.log_end_offset)
        values, offset = [], 0
        while (found := data.read(offset, 1 << 20, read_committed=True)).slice is not None:
            aborted = dict(found.aborted_transactions)
            raw = found.slice.read()
            for header in iter_headers(raw):  # not validate_batches: the cleaner leaves empty batches
                offset = header.last_offset + 1
                if header.is_control or (header.producer_id in aborted and header.is_transactional):
                    aborted.pop(header.producer_id, None) if header.is_control else None
                    continue
                values += [record.value for record in iter_records(raw, header)]
        return values

    def close(self) -> None:
        self.cleaner.stop()


def keyed(log_: PartitionLog, key: bytes, value: bytes, producer_id: int = -1, sequence: int = -1,
          epoch: int = 0) -> int:
    """One keyed record, transactional when `producer_id` is given; returns its offset."""
    transactional = producer_id >= 0
    raw = build_batch([(key, value)], NOW, producer_id=producer_id, producer_epoch=epoch if transactional else -1,
                      base_sequence=sequence, attributes=TRANSACTIONAL_BIT if transactional else 0)
    return log_.append(bytearray(raw), validate_batches(raw), 0).base_offset


@pytest.fixture
def cleanings(tmp_path) -> Iterator[Cleanings]:
    created = Cleanings(tmp_path / "t-0")
    yield created
    created.close()


def test_the_cleaner_removes_aborted_data_then_markers_once_their_data_is_gone_and_retention_passed(
        cleanings: Cleanings) -> None:
    log_ = cleanings.log
    keyed(log_, b"k1", b"v1")  # 0
    keyed(log_, b"k1", b"aborted", producer_id=1, sequence=0)  # 1: must not hide v1 from the key map
    keyed(log_, b"k2", b"c2", producer_id=2, sequence=0)  # 2
    end(log_, 1, commit=False)  # 3
    end(log_, 2, commit=True)  # 4
    keyed(log_, b"k5", b"e", producer_id=1, sequence=1)  # 5
    end(log_, 1, commit=True)  # 6
    keyed(log_, b"k7", b"g", producer_id=2, sequence=1)  # 7
    end(log_, 2, commit=True)  # 8
    keyed(log_, b"k2", b"c2-again")  # 9: 2's record goes, and its transaction has no data left
    entry = (0, 1, 1, 3, 2)

    cleanings.clean()
    assert [b[0] for b in cleanings.batches()] == [0, 3, 4, 5, 6, 7, 8, 9], "the aborted batch went, markers stay"
    assert txn_entries(log_) == [entry], "the ABORT's entry stays with it while its data was in the log"
    assert cleanings.values() == [b"v1", b"e", b"g", b"c2-again"]

    keyed(log_, b"k10", b"z")  # 10: something dirty, for the next cleaning
    cleanings.clean()
    assert [b[0] for b in cleanings.batches()] == [0, 3, 4, 5, 6, 7, 8, 9, 10], "not before delete.retention.ms"
    assert txn_entries(log_) == [], "nothing of the aborted transaction is left to skip"
    assert cleanings.cleaner.delete_horizons[("t", 0)] == NOW + RETENTION_MS, "a cleaning is due then"

    cleanings.clean(NOW + RETENTION_MS)
    assert [b[0] for b in cleanings.batches()] == [0, 5, 6, 7, 8, 9, 10], "3 and 4 went: their data is gone"
    assert cleanings.values() == [b"v1", b"e", b"g", b"c2-again", b"z"]
    assert ("t", 0) not in cleanings.cleaner.delete_horizons
    log_.close_files()
    again = open_log(Path(log_.directory))
    assert again.first_unstable_offset is None and again.last_stable_offset(11) == 11


def test_a_producers_last_batch_stays_empty_even_aborted_and_keeps_its_marker(cleanings: Cleanings) -> None:
    log_ = cleanings.log
    keyed(log_, b"k", b"committed")  # 0
    keyed(log_, b"k", b"aborted", producer_id=4, sequence=0)  # 1: producer 4's last sequence
    end(log_, 4, commit=False)  # 2
    cleanings.clean(NOW + RETENTION_MS)
    assert cleanings.batches() == [(0, False, 1), (1, False, 0), (2, True, 1)]
    assert txn_entries(log_) == [(0, 4, 1, 2, 3)], "its batch is still there: the entry and marker stay"
    assert cleanings.values() == [b"committed"]
    assert log_.producer_state.producers[4].batches[-1].last_seq == 0


def test_a_producer_whose_last_record_is_a_marker_keeps_it_empty_for_fencing(cleanings: Cleanings) -> None:
    log_ = cleanings.log
    keyed(log_, b"k", b"aborted", producer_id=3, sequence=0)  # 0
    end(log_, 3, commit=False, epoch=1)  # 1: the coordinator bumped the epoch to abort
    keyed(log_, b"k", b"later")  # 2
    cleanings.clean()
    assert cleanings.batches() == [(1, True, 1), (2, False, 1)], "the aborted batch is not producer 3's last"
    keyed(log_, b"j", b"dirty")  # 3
    cleanings.clean(NOW + RETENTION_MS)
    assert cleanings.batches() == [(1, True, 0), (2, False, 1), (3, False, 1)], "emptied, not removed"
    keyed(log_, b"i", b"dirty")  # 4
    cleanings.clean(NOW + RETENTION_MS)
    assert cleanings.batches()[0] == (1, True, 0)
    log_.close_files()
    again = open_log(Path(log_.directory))
    assert again.producer_state.producers[3].epoch == 1, "the bumped epoch survives a rebuild from the log"


def test_a_transaction_aborted_past_the_cleanable_range_loses_its_data_not_its_marker(cleanings: Cleanings) -> None:
    log_ = cleanings.log
    keyed(log_, b"k", b"v")  # 0
    keyed(log_, b"k", b"aborted", producer_id=5, sequence=0)  # 1
    keyed(log_, b"m", b"n", producer_id=5, sequence=1)  # 2: producer 5's last batch (kept empty)
    log_.roll()
    end(log_, 5, commit=False)  # 3, in the active segment: not cleaned, its entry found there
    log_.on_high_watermark(log_.log_end_offset)
    plan = cleanings.cleaner.plan(("t", 0), log_, NOW)
    assert plan is not None and plan.end_offset == 3
    assert asyncio.run(cleanings.cleaner.clean(plan)) == 1
    assert cleanings.batches() == [(0, False, 1), (2, False, 0), (3, True, 1)]
    assert txn_entries(log_) == [(0, 5, 1, 3, 4)]
    assert cleanings.values() == [b"v"]


def test_a_shutdown_snapshot_is_taken_past_offset_zero_only(tmp_path) -> None:
    """Kafka's takeSnapshot: an empty log (end 0) has nothing to snapshot; a log with records
    gets `<end>.snapshot`, written once."""
    state = ProducerStateManager(str(tmp_path))
    state.take_snapshot(0, {})
    assert list(tmp_path.glob("*.snapshot")) == []
    state.take_snapshot(3, {"7": {"epoch": 0}})
    assert [p.name for p in tmp_path.glob("*.snapshot")] == [f"{3:020d}.snapshot"]
