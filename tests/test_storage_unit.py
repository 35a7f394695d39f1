"""In-process unit tests of the storage classes (no broker process): index, segment, log, manager.

They drive `PartitionLog` and `LogManager` directly on a tmp dir, with the clock passed in where
time matters (retention, roll, flush), so that time-dependent behaviour costs no real seconds.
"""

from __future__ import annotations

import asyncio
import os
import struct
import threading
import time
from pathlib import Path

from test_storage import record_batch

from logbus.config import BrokerConfig, LogConfig, log_config
from logbus.protocol.records import validate_batches
from logbus.storage.index import OffsetIndex
from logbus.storage.log import PartitionLog
from logbus.storage.manager import LogManager

# ---------------------------------------------------------------------- index


def test_index_flushes_from_another_thread_never_duplicate_or_lose_entries(tmp_path) -> None:
    """The event loop appends and flushes while an fsync thread flushes the same index (issue 11 #10)."""
    index = OffsetIndex(str(tmp_path / "00000000000000000000.index"), 0)
    stop = threading.Event()
    failures: list[BaseException] = []

    def hammer() -> None:
        try:
            while not stop.is_set():
                index.flush()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for thread in threads:
        thread.start()
    entries = 30_000
    try:
        for i in range(entries):
            index.append(i, i * 10)
            if i % 3 == 0:
                index.flush()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    index.close()
    assert not failures, failures
    raw = (tmp_path / "00000000000000000000.index").read_bytes()
    assert len(raw) == entries * 8
    assert list(struct.iter_unpack(">II", raw)) == [(i, i * 10) for i in range(entries)]


# ---------------------------------------------------------------------- helpers


def make_config(**overrides: str) -> LogConfig:
    return log_config(BrokerConfig(), overrides)


def append(log_: PartitionLog, value: bytes, epoch: int = 0, timestamp: int | None = None) -> int:
    """Append a one-record batch as leader; returns its offset."""
    raw = record_batch(value, timestamp=timestamp)
    return log_.append(bytearray(raw), validate_batches(raw), epoch).base_offset


def open_log(directory: str, config: LogConfig, recovery_point: int = 0, clean: bool = True) -> PartitionLog:
    log_ = PartitionLog(directory, "t", 0, config)
    log_.load(recovery_point, 0, clean)
    return log_


def files(directory: str, suffix: str) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(suffix))


# ---------------------------------------------------------------------- blocking work off the loop


def test_file_delete_delay_ms_keeps_removed_segments_as_deleted_files_until_it_passes(tmp_path) -> None:
    """Retention renames a segment's files to `.deleted` at once; they go after file.delete.delay.ms."""

    async def scenario(delay_ms: int) -> tuple[list[str], float]:
        manager = LogManager(str(tmp_path / f"delay-{delay_ms}"))
        config = make_config(**{"segment.bytes": "200", "file.delete.delay.ms": str(delay_ms)})
        log_ = manager.load_log("t", 0, config)
        for i in range(6):
            append(log_, b"v%d" % i + b"x" * 100)
        log_.delete_records_before(4)
        began = time.monotonic()
        assert await manager.apply_retention() >= 3
        renamed = files(log_.directory, ".deleted")
        while files(log_.directory, ".deleted") and time.monotonic() - began < 10:
            await asyncio.sleep(0.01)
        gone_after = time.monotonic() - began
        assert not files(log_.directory, ".deleted"), "the .deleted files were removed"
        await manager.shutdown()
        return renamed, gone_after

    renamed, gone_after = asyncio.run(scenario(400))
    assert len(renamed) >= 9 and {name.split(".")[1] for name in renamed} == {"log", "index", "timeindex"}
    assert gone_after >= 0.4, "kept for file.delete.delay.ms"
    renamed, gone_after = asyncio.run(scenario(0))
    assert renamed == [] or gone_after < 0.4


def test_a_rolls_producer_snapshot_is_written_by_the_worker(tmp_path) -> None:
    async def scenario() -> list[str]:
        manager = LogManager(str(tmp_path / "data"))
        log_ = manager.load_log("t", 0, make_config(**{"segment.bytes": "200"}))
        raw = record_batch(b"p" * 100, producer_id=7, sequence=0)
        log_.append(bytearray(raw), validate_batches(raw), 0)
        append(log_, b"q" * 100)  # rolls: the snapshot at offset 1 goes to the worker
        await log_.jobs.drain()
        found = files(log_.directory, ".snapshot")
        await manager.shutdown()
        return found

    assert asyncio.run(scenario()) == [f"{1:020d}.snapshot"]


def test_leader_epochs_past_the_recovery_point_are_read_back_from_the_batches(tmp_path) -> None:
    """The epoch checkpoint is not fsynced at once: after a crash, a stale or damaged file is completed
    from the batches' leader epochs."""
    directory = str(tmp_path / "t-0")
    log_ = open_log(directory, make_config())
    append(log_, b"a", epoch=1)
    append(log_, b"b", epoch=1)
    append(log_, b"c", epoch=3)
    assert log_.epochs == [(1, 0), (3, 2)]
    checkpoint = os.path.join(directory, "leader-epoch-checkpoint")
    assert Path(checkpoint).read_text(encoding="utf-8") == "0\n2\n1 0\n3 2\n", "written before the records"
    for segment in log_.segments:
        segment.close()

    with open(checkpoint, "w", encoding="utf-8") as handle:
        handle.write("0\n1\n1 0\n")  # the version before epoch 3: lost with the page cache
    assert open_log(directory, make_config(), recovery_point=1, clean=False).epochs == [(1, 0), (3, 2)]
    with open(checkpoint, "w", encoding="utf-8") as handle:
        handle.write("0\n2\n1 0\n")  # torn
    assert open_log(directory, make_config(), recovery_point=3, clean=False).epochs == [(1, 0), (3, 2)]
    assert Path(checkpoint).read_text(encoding="utf-8") == "0\n2\n1 0\n3 2\n", "rewritten"


def test_a_flush_fsyncs_the_epoch_checkpoint_before_the_recovery_point_passes_it(tmp_path) -> None:
    synced: list[list[str]] = []

    async def run_blocking(fn, segments, files_=()):  # noqa: ANN001, ANN202 - records what a flush syncs
        synced.append(list(files_))
        fn(segments, files_)

    async def scenario() -> None:
        log_ = open_log(str(tmp_path / "t-0"), make_config())
        append(log_, b"a", epoch=2)
        await log_.flush(run_blocking)
        append(log_, b"b", epoch=2)
        await log_.flush(run_blocking)
        assert log_.recovery_point == 2

    asyncio.run(scenario())
    assert [len(files_) for files_ in synced] == [1, 0], "the checkpoint once, with the flush after the new epoch"
