"""In-process unit tests of the storage classes (no broker process): index, segment, log, manager.

They drive `PartitionLog` and `LogManager` directly on a tmp dir, with the clock passed in where
time matters (retention, roll, flush), so that time-dependent behaviour costs no real seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_storage import record_batch

from logbus.config import BrokerConfig, LogConfig, log_config
from logbus.protocol.records import validate_batches
from logbus.storage import checkpoints
from logbus.storage.files import syncfs_available
from logbus.storage.index import OffsetIndex
from logbus.storage.log import PartitionLog
from logbus.storage.manager import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_FILE,
    LOAD_CHUNK,
    LOG_START_FILE,
    RECOVERY_POINT_FILE,
    LogManager,
)
from logbus.storage.producer_state import ProducerStateManager

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


# An index entry per batch: no log is within one index interval, so every log that moved gets a
# snapshot at close (a smaller one is replayed by the next start instead: see
# test_a_log_within_one_index_interval_gets_no_snapshot_at_close).
SNAPSHOT_AT_CLOSE = {"index.interval.bytes": "0"}


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


def test_a_clean_shutdown_syncs_and_snapshots_only_what_moved_since_the_last_time(tmp_path) -> None:
    """Kafka's flush-then-close at shutdown: an idle log, or one flushed up to its end, is not
    fsynced again, and a producer snapshot at its end is not written again (issue 25: an fsync
    costs about a millisecond even of a file with nothing to write, and 2,000 idle partitions
    took 7-10 s to shut down); the next start still finds every log and producer as it was."""
    data = str(tmp_path / "data")
    config = make_config(**SNAPSHOT_AT_CLOSE)

    async def run(appends: dict[int, list[bytes]], flushed: set[int]) -> tuple[list[str], list[PartitionLog]]:
        manager = LogManager(data)
        manager.open(0, "cluster")
        logs = [manager.load_log("t", p, config) for p in range(3)]
        for p, batches in appends.items():
            for raw in batches:
                logs[p].append(bytearray(raw), validate_batches(raw), 0)
        for p in flushed:
            await logs[p].flush(manager.run_blocking)
        synced: list[str] = []
        run_blocking = manager.run_blocking

        async def recording(fn, *args):  # noqa: ANN001, ANN202 - notes the logs a shutdown fsyncs
            if fn.__name__ == "_fsync_all":
                synced.extend(os.path.basename(segment.directory) for segment in args[0])
            return await run_blocking(fn, *args)

        manager.run_blocking = recording
        await manager.shutdown()
        return synced, logs

    def snapshots() -> dict[str, tuple[list[str], int]]:
        found = {}
        for p in range(3):
            directory = os.path.join(data, f"t-{p}")
            names = files(directory, ".snapshot")
            found[f"t-{p}"] = (names, os.stat(os.path.join(directory, names[-1])).st_ino if names else 0)
        return found

    produced = [record_batch(b"p%d" % i, producer_id=7, sequence=i) for i in range(2)]
    synced, _ = asyncio.run(run({1: produced, 2: [record_batch(b"a"), record_batch(b"b")]}, flushed={1}))
    assert sorted(set(synced)) == ["t-2"], "only the log with records past its recovery point"
    first = snapshots()
    assert [names for names, _ in first.values()] == [[], [f"{2:020d}.snapshot"], [f"{2:020d}.snapshot"]], \
        "none for the empty log"

    synced, _ = asyncio.run(run({0: [record_batch(b"c")]}, flushed=set()))
    assert sorted(set(synced)) == ["t-0"]
    second = snapshots()
    assert second["t-0"][0] == [f"{1:020d}.snapshot"]
    assert second["t-1"] == first["t-1"] and second["t-2"] == first["t-2"], "not written again"

    synced, logs = asyncio.run(run({}, flushed=set()))
    assert synced == []
    assert [log_.log_end_offset for log_ in logs] == [1, 2, 2]
    assert set(logs[1].producer_state.producers) == {7}, "the producer is back from the kept snapshot"


ROLLING_EACH_BATCH = make_config(**{"segment.bytes": "200"}, **SNAPSHOT_AT_CLOSE)


def shut_down_after_a_roll(data: str) -> PartitionLog:
    """A log of producer 7 (sequences 0-2), a segment per batch (the last roll's snapshot at
    offset 2), closed cleanly (its snapshot at 3)."""

    async def scenario() -> PartitionLog:
        manager = LogManager(data)
        manager.open(0, "cluster")
        log_ = manager.load_log("t", 0, ROLLING_EACH_BATCH)
        for sequence in range(3):
            raw = record_batch(b"p" * 100, producer_id=7, sequence=sequence)
            log_.append(bytearray(raw), validate_batches(raw), 0)
        await log_.jobs.drain()
        await manager.shutdown()
        return log_

    return asyncio.run(scenario())


def reloaded(data: str) -> tuple[PartitionLog, list[str]]:
    """The log `t-0` of `data` as the next start loads it, and its snapshots once loaded."""

    async def scenario() -> tuple[PartitionLog, list[str]]:
        manager = LogManager(data)
        manager.open(0, "cluster")
        log_ = manager.load_log("t", 0, ROLLING_EACH_BATCH)
        snapshots = files(log_.directory, ".snapshot")
        await manager.shutdown()
        return log_, snapshots

    return asyncio.run(scenario())


def test_a_clean_shutdown_writes_its_snapshot_in_place_and_leaves_the_older_one(tmp_path) -> None:
    """Kafka's takeSnapshot at close: `<end>.snapshot` is written directly (no temporary file
    renamed over it) and the roll's older snapshot is not removed at shutdown (issue 25: the file
    work per log is what a broker closing thousands of logs waits for)."""
    data = str(tmp_path / "data")
    renames: list[str] = []
    real_replace = os.replace

    def recording_replace(source, target, **kwargs):  # noqa: ANN001, ANN003, ANN202 - notes renames
        renames.append(os.path.basename(target))
        return real_replace(source, target, **kwargs)

    os.replace = recording_replace
    try:
        log_ = shut_down_after_a_roll(data)
    finally:
        os.replace = real_replace
    assert files(log_.directory, ".snapshot") == [f"{2:020d}.snapshot", f"{3:020d}.snapshot"]
    assert f"{3:020d}.snapshot" not in renames
    assert set(reloaded(data)[0].producer_state.producers) == {7}


@pytest.mark.parametrize("damage", ["torn", "empty", "wrong shape"])
def test_a_damaged_shutdown_snapshot_is_deleted_and_the_state_rebuilt(tmp_path, damage: str) -> None:
    """A shutdown snapshot torn by a crash while it was written (or otherwise damaged) is deleted
    at the next load, as Kafka's CorruptSnapshotException, and the state comes from the older
    snapshot plus the log after it: the log is the truth, the snapshot a cache."""
    data = str(tmp_path / "data")
    before = shut_down_after_a_roll(data).producer_state.snapshot_state()
    path = os.path.join(data, "t-0", f"{3:020d}.snapshot")
    text = open(path, encoding="utf-8").read()  # noqa: SIM115 - read whole
    damaged = {"torn": text[: len(text) // 2], "empty": "", "wrong shape": '{"7": []}'}[damage]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(damaged)
    log_, snapshots = reloaded(data)
    assert log_.producer_state.snapshot_state() == before
    assert snapshots == [f"{2:020d}.snapshot"]
    raw = record_batch(b"next", producer_id=7, sequence=3)
    assert log_.producer_state.check(validate_batches(raw)[0])[0].value == "ok", "the sequence goes on"


def test_a_log_within_one_index_interval_gets_no_snapshot_at_close(tmp_path) -> None:
    """A log whose records since its last snapshot lie within one index interval of its active
    segment gets no snapshot at close: the next start replays those few bytes into the producer
    state, as cheaply as it would load a snapshot. A log past one interval gets its snapshot
    (issue 25: creating 10,000 snapshot files was most of a stop)."""
    data = str(tmp_path / "data")

    async def shut_down(appends: dict[int, int]) -> list[PartitionLog]:
        manager = LogManager(data)
        manager.open(0, "cluster")
        logs = [manager.load_log("t", p, make_config(**{"index.interval.bytes": "1000"})) for p in range(2)]
        for p, count in appends.items():
            for sequence in range(logs[p].log_end_offset, logs[p].log_end_offset + count):
                raw = record_batch(b"v" * 200, producer_id=7 + p, sequence=sequence)
                logs[p].append(bytearray(raw), validate_batches(raw), 0)
        await manager.shutdown()
        return logs

    asyncio.run(shut_down({0: 2, 1: 6}))
    assert files(os.path.join(data, "t-0"), ".snapshot") == [], "two batches: replayed by the next start"
    assert files(os.path.join(data, "t-1"), ".snapshot") == [f"{6:020d}.snapshot"], "past one index interval"
    logs = asyncio.run(shut_down({}))
    assert [set(log_.producer_state.producers) for log_ in logs] == [{7}, {8}]
    assert [b.last_seq for b in logs[0].producer_state.producers[7].batches] == [0, 1], "replayed from the log"
    assert files(os.path.join(data, "t-0"), ".snapshot") == []


def test_a_load_keeps_the_snapshot_it_used_and_the_one_before(tmp_path) -> None:
    """Shutdowns leave older snapshots; a load deletes all but the one it used and the next
    older one (a truncation below the newest replays from that), so they cannot pile up in a
    partition that never rolls."""
    state = ProducerStateManager(str(tmp_path))
    for offset in (2, 5, 9, 12):
        state.take_snapshot(offset, {"7": {"epoch": 0, "last_timestamp": offset, "batches": []}})
    loaded = ProducerStateManager(str(tmp_path))
    assert loaded.load_snapshot(10) == 9
    assert loaded.producers[7].last_timestamp == 9
    assert sorted(p.name for p in tmp_path.glob("*.snapshot")) == [f"{5:020d}.snapshot", f"{9:020d}.snapshot"]


@pytest.mark.skipif(not syncfs_available(), reason="syncfs(2) is Linux's")
def test_a_clean_shutdown_of_many_moved_logs_syncs_each_log_dir_once(tmp_path) -> None:
    """Beyond `syncfs_above` logs with unsynced records, a clean shutdown syncs each log dir's
    file system once instead of fsyncing every log's files (issue 25: 3,333 moved logs took most
    of a 53 s exit); their recovery points still reach the log ends, so the next start is clean
    and recovers nothing."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    config = make_config()
    calls: list[tuple[str, tuple]] = []

    async def shut_down_after_appends() -> None:
        manager = LogManager(dirs)
        manager.open(0, "cluster")
        manager.syncfs_above = 2
        logs = [manager.load_log("t", p, config) for p in range(4)]
        for p, log_ in enumerate(logs):
            for i in range(p + 1):
                append(log_, b"v%d" % i)
        run_blocking = manager.run_blocking

        async def recording(fn, *args):  # noqa: ANN001, ANN202 - notes the blocking jobs of the shutdown
            calls.append((fn.__name__, args))
            return await run_blocking(fn, *args)

        manager.run_blocking = recording
        await manager.shutdown()

    asyncio.run(shut_down_after_appends())
    assert [name for name, _ in calls if name == "_fsync_all"] == [], "no log fsynced one by one"
    assert sorted(args[0] for name, args in calls if name == "syncfs") == dirs, "each log dir once"
    recovery = {}
    for log_dir in dirs:
        assert os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE))
        recovery |= checkpoints.read_offsets(os.path.join(log_dir, RECOVERY_POINT_FILE))
    assert recovery == {("t", p): p + 1 for p in range(4)}, "recovery points at the log ends"

    async def restart() -> list[int]:
        manager = LogManager(dirs)
        manager.open(0, "cluster")
        assert manager.clean_shutdown
        ends = [manager.load_log("t", p, config).log_end_offset for p in range(4)]
        await manager.shutdown()
        return ends

    assert asyncio.run(restart()) == [1, 2, 3, 4]


def counting_io_jobs(manager: LogManager) -> list[int]:
    """Count the jobs `manager` hands its I/O threads from now on (the list's one item)."""
    jobs = [0]
    submit = manager._pool.submit

    def counted(*args: object, **kwargs: object) -> object:
        jobs[0] += 1
        return submit(*args, **kwargs)

    manager._pool.submit = counted  # type: ignore[method-assign]
    return jobs


def test_a_clean_shutdown_of_many_logs_is_a_few_io_jobs_and_keeps_every_producer(tmp_path: Path) -> None:
    """Closing 300 logs that moved (records of an idempotent producer, a snapshot due each) takes
    a few I/O jobs, not one or two per log: 10,000 of those thread handoffs were most of a
    broker's 15 s exit at 10,000 partitions (issue 25). The snapshots are all written, so the
    clean restart finds every producer without reading the logs back."""
    partitions = 300
    data = str(tmp_path / "data")
    config = make_config(**SNAPSHOT_AT_CLOSE)

    async def shut_down_after_appends() -> int:
        manager = LogManager(data, io_threads=4)
        manager.open(0, "cluster")
        for p in range(partitions):
            raw = record_batch(b"v", producer_id=100 + p, sequence=0)
            manager.load_log("t", p, config).append(bytearray(raw), validate_batches(raw), 0)
        jobs = counting_io_jobs(manager)
        await manager.shutdown()
        return jobs[0]

    assert asyncio.run(shut_down_after_appends()) <= 4 + 3, "the snapshot jobs, a syncfs, the checkpoints"
    for p in range(partitions):
        assert files(os.path.join(data, f"t-{p}"), ".snapshot") == [f"{1:020d}.snapshot"]

    async def restart() -> list[set[int]]:
        manager = LogManager(data)
        manager.open(0, "cluster")
        assert manager.clean_shutdown
        producers = [set(manager.load_log("t", p, config).producer_state.producers) for p in range(partitions)]
        await manager.shutdown()
        return producers

    assert asyncio.run(restart()) == [{100 + p} for p in range(partitions)]


@pytest.mark.skipif(not syncfs_available(), reason="syncfs(2) is Linux's")
def test_a_producer_snapshot_that_cannot_be_written_at_shutdown_leaves_only_its_dir_unclean(tmp_path: Path) -> None:
    """A snapshot write failing at shutdown (its disk gone) takes that log dir offline, as any
    other disk error does: no clean-shutdown marker there, so its logs are recovered at the next
    start; the other dir still shuts down cleanly and the stop itself does not fail."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]

    async def shut_down_with_a_lost_partition_dir() -> dict[str, str]:
        manager = LogManager(dirs)
        manager.open(0, "cluster")
        manager.syncfs_above = 0  # the logs close without fsync: the snapshot is the first write
        for p, log_dir in enumerate(dirs):
            manager.prefer_log_dir("t", p, log_dir)
            raw = record_batch(b"v", producer_id=7, sequence=0)
            manager.load_log("t", p, make_config(**SNAPSHOT_AT_CLOSE)).append(bytearray(raw), validate_batches(raw), 0)
        shutil.rmtree(os.path.join(dirs[0], "t-0"))  # its snapshot has nowhere to go
        await manager.shutdown()
        return manager.offline_dirs

    offline = asyncio.run(shut_down_with_a_lost_partition_dir())
    assert list(offline) == [dirs[0]]
    assert not os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE))
    assert os.path.exists(os.path.join(dirs[1], CLEAN_SHUTDOWN_FILE))
    assert files(os.path.join(dirs[1], "t-1"), ".snapshot") == [f"{1:020d}.snapshot"]


def test_a_stop_lets_a_checkpoint_write_under_way_finish_before_writing_the_final_ones(tmp_path) -> None:
    """A periodic checkpoint write still in its worker thread when a clean stop begins (a slow
    disk) ends before the stop writes its own (issue 26). The stop used to cancel the round and
    go on: the two writes shared the `.tmp` file, the loser's rename failed and took the log dir
    offline (no clean-shutdown marker after a clean exit), or the stale periodic checkpoint
    landed over the final one, as here, where the shutdown's write goes first."""
    data_dir = str(tmp_path / "data")
    periodic_began, final_written = threading.Event(), threading.Event()

    async def stop_during_a_slow_checkpoint() -> None:
        manager = LogManager(data_dir)
        manager.open(0, "c")
        log_ = manager.load_log("t", 0, make_config())
        append(log_, b"a")
        append(log_, b"b")  # not flushed: a periodic checkpoint now says recovery point 0
        run_blocking = manager.run_blocking
        stopping = False

        def slow_write(*args: object) -> None:  # the disk takes a second, unless the stop writes first
            periodic_began.set()
            final_written.wait(1)
            LogManager._write_recovery_files(*args)

        async def with_a_slow_periodic_checkpoint(fn, *args):  # noqa: ANN001, ANN202
            if fn.__name__ != "_write_recovery_files":
                return await run_blocking(fn, *args)
            if not stopping:
                return await run_blocking(slow_write, *args)
            await run_blocking(fn, *args)
            final_written.set()
            return None

        manager.run_blocking = with_a_slow_periodic_checkpoint
        manager.start(3_600_000, 10, 3_600_000)
        began = time.monotonic()
        while not periodic_began.is_set() and time.monotonic() - began < 30:
            await asyncio.sleep(0.01)
        assert periodic_began.is_set()
        stopping = True
        await manager.shutdown()
        assert not manager.offline_dirs

    asyncio.run(stop_during_a_slow_checkpoint())
    assert os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN_FILE))
    assert checkpoints.read_offsets(os.path.join(data_dir, RECOVERY_POINT_FILE)) == {("t", 0): 2}, (
        "the final checkpoint, not the stale periodic one"
    )


def test_a_cancelled_flush_holds_the_log_until_its_fsync_thread_is_done(tmp_path) -> None:
    """A flush cancelled while its fsync runs in a worker thread (the producer's connection closed
    while its acknowledgement waited on the flush, as at a broker's stop) keeps the log's
    io_lock until that thread is done: a thread cannot be cancelled, and the close that comes
    next must not close the descriptors it is syncing (issue 26)."""
    seen: list[bool] = []
    fsync_began, closed = threading.Event(), threading.Event()

    async def cancel_a_flush_then_close() -> None:
        manager = LogManager(str(tmp_path / "data"))
        log_ = manager.load_log("t", 0, make_config())
        append(log_, b"a")

        async def with_a_slow_flush(fn, *args):  # noqa: ANN001, ANN202 - the disk takes a second, or until the close
            def slow_fsync(segments, files) -> None:  # noqa: ANN001
                fsync_began.set()
                closed.wait(1)
                seen.append(all(segment._open_fd is not None for segment in segments))
                fn(segments, files)

            return await manager.run_blocking(slow_fsync if fn.__name__ == "_fsync_all" else fn, *args)

        flush = asyncio.create_task(log_.flush(with_a_slow_flush))
        began = time.monotonic()
        while not fsync_began.is_set() and time.monotonic() - began < 30:
            await asyncio.sleep(0.01)
        flush.cancel()
        await log_.close(manager.run_blocking, True)
        closed.set()
        with contextlib.suppress(asyncio.CancelledError):
            await flush
        assert flush.cancelled()
        await manager.shutdown()

    asyncio.run(cancel_a_flush_then_close())
    assert seen == [True], "the descriptors stayed open while the cancelled flush's thread synced them"


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


# ---------------------------------------------------------------------- descriptor budget


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory in memory (tmpfs) when there is one: thousands of files are created and fsynced."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="logbus-test-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_three_thousand_partitions_work_within_a_small_descriptor_budget(fast_dir: Path) -> None:
    """Segment files beyond the budget are closed and opened again on use (issue 11 #5)."""
    tmp_path = fast_dir
    partitions, budget, config = 3000, 100, make_config(**{"segment.bytes": "300"})
    rolled = range(0, partitions, 100)  # these get three segments, the others one

    def value(p: int, i: int) -> bytes:
        return b"%d-%d" % (p, i) + b"w" * 100

    async def scenario() -> None:
        manager = LogManager(str(tmp_path / "data"), open_segment_limit=budget)
        before = open_descriptors()
        logs = [manager.load_log("wide", p, config) for p in range(partitions)]
        for p, log_ in enumerate(logs):
            for i in range(3 if p in rolled else 1):
                append(log_, value(p, i))
        assert len(manager.open_segments) <= budget
        assert open_descriptors() - before <= 3 * budget + 10
        await asyncio.gather(*(logs[p].flush(manager.run_blocking) for p in rolled))
        assert all(logs[p].recovery_point == 3 for p in rolled)
        for p in rolled:
            assert len(logs[p].segments) == 3
            for i in range(3):
                found = logs[p].read(i, 10_000, 3)
                assert found is not None and value(p, i) in found.read()
        region = logs[100].read(0, 10_000, 3).region()  # its own descriptor, outliving eviction
        for log_ in logs[1000:1500]:
            assert value(logs.index(log_), 0) in log_.read(0, 1000, 1).read()
        assert value(100, 0) in os.pread(region.file.fileno(), region.size, region.position)
        region.close()
        assert open_descriptors() - before <= 3 * budget + 10
        await manager.shutdown()
        assert open_descriptors() <= before + 1

    asyncio.run(scenario())

    async def reopened() -> None:
        manager = LogManager(str(tmp_path / "data"), open_segment_limit=budget)
        manager.open(0, "c")
        logs = [manager.load_log("wide", p, config) for p in range(partitions)]
        assert [log_.log_end_offset for log_ in logs] == [3 if p in rolled else 1 for p in range(partitions)]
        assert len(manager.open_segments) <= budget
        await manager.shutdown()

    asyncio.run(reopened())


def wide_value(p: int, i: int) -> bytes:
    return b"%d-%d" % (p, i) + b"w" * 100


def test_loaded_logs_keep_only_their_active_segment_open_and_open_older_ones_when_read(fast_dir: Path) -> None:
    """A start holds one segment's descriptors per log, not one per segment (issue 25)."""
    data, config, partitions = str(fast_dir / "data"), make_config(**{"segment.bytes": "300"}), 50

    async def write() -> None:
        manager = LogManager(data)
        manager.open(0, "c")
        for p in range(partitions):
            log_ = manager.load_log("t", p, config)
            for i in range(4):  # a segment each
                append(log_, wide_value(p, i))
            assert len(log_.segments) == 4
        await manager.shutdown()

    async def reopen() -> None:
        manager = LogManager(data, open_segment_limit=1000)
        manager.open(0, "c")
        before = open_descriptors()
        logs = await manager.load_logs([("t", p, config) for p in range(partitions)])
        assert [log_.log_end_offset for log_ in logs] == [4] * partitions
        assert len(manager.open_segments) == partitions
        assert open_descriptors() - before <= 3 * partitions + 5
        found = logs[7].read(0, 1000, 4)
        assert found is not None and wide_value(7, 0) in found.read()
        assert len(manager.open_segments) == partitions + 1
        await manager.shutdown()

    asyncio.run(write())
    asyncio.run(reopen())


def test_partitions_new_to_a_starting_broker_spread_over_its_log_dirs(tmp_path: Path) -> None:
    """Logs loaded together at start (a topic created while the broker was down) each go to the
    least loaded dir, counting the ones placed just before."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]

    async def scenario() -> dict[str, int]:
        manager = LogManager(dirs)
        manager.open(0, "c")
        await manager.load_logs([("new", p, make_config()) for p in range(6)])
        counts = manager.partitions_per_dir()
        await manager.shutdown()
        return counts

    assert asyncio.run(scenario()) == dict.fromkeys(dirs, 3)


def test_many_new_logs_are_created_in_chunks_of_io_jobs(tmp_path: Path) -> None:
    """10,000 new replicas were 10,000 I/O jobs, each a few thread handoffs and GIL switches
    that, on a loaded machine, waited for the scheduler (issue 25): a chunk of logs is one job."""
    partitions = 3 * LOAD_CHUNK + 5

    async def scenario() -> tuple[int, list[int]]:
        manager = LogManager(str(tmp_path / "data"), io_threads=2)
        manager.open(0, "c")
        jobs = counting_io_jobs(manager)
        logs = await manager.load_logs([("new", p, make_config()) for p in range(partitions)])
        loading_jobs = jobs[0]
        await manager.shutdown()
        return loading_jobs, sorted(log_.partition for log_ in logs)

    jobs, indexes = asyncio.run(scenario())
    assert indexes == list(range(partitions))
    assert jobs <= 4


def test_a_log_new_here_starts_as_an_empty_directory_loads_and_reopens_as_written(tmp_path: Path) -> None:
    """A log whose directory did not exist is started without reading anything back (issue 25:
    the reads were half of a new log's CPU): the same log as one loaded from an empty directory."""
    def state(log_: PartitionLog) -> tuple:
        return (log_.log_start_offset, log_.log_end_offset, log_.recovery_point, log_.epoch_cache.entries,
                [segment.base_offset for segment in log_.segments], dict(log_.producer_state.producers))

    for clean in (True, False):
        os.makedirs(tmp_path / f"old-{clean}")
        loaded = PartitionLog(str(tmp_path / f"old-{clean}"), "t", 0, make_config())
        loaded.load(3, 7, clean)
        new = PartitionLog(str(tmp_path / f"new-{clean}"), "t", 0, make_config())
        assert new.load(3, 7, clean) == 0
        assert state(new) == state(loaded) and state(new)[:2] == (7, 7)
        loaded.close_files()
        assert append(new, b"first", epoch=2) == 7
        new.close_files()
        again = open_log(str(tmp_path / f"new-{clean}"), make_config(), clean=False)
        assert (again.log_end_offset, again.epoch_cache.entries) == (8, [(2, 7)])
        again.close_files()


def test_a_new_log_is_a_directory_and_a_log_file_until_its_first_write(tmp_path: Path) -> None:
    """Allocating inodes was most of a broker's CPU in a 10,000-partition CreateTopics (issue 25):
    a new log makes its directory and `.log` file only; the index files come with the first
    append (Kafka's lazy indexes), a restart of a still-empty log does not make them, and an
    empty log without them, fsynced, reopened and deleted, is sound."""
    directory = str(tmp_path / "t-0")
    new = PartitionLog(directory, "t", 0, make_config())
    new.load(0, 0, True)
    assert os.listdir(directory) == ["00000000000000000000.log"]
    for segment in new.segments:
        segment.fsync()
    new.close_files()
    again = open_log(directory, make_config(), clean=False)
    assert os.listdir(directory) == ["00000000000000000000.log"]
    assert append(again, b"first") == 0
    assert sorted(os.listdir(directory)) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
        "leader-epoch-checkpoint"]
    again.close_files()
    reopened = open_log(directory, make_config(), clean=True)
    assert reopened.log_end_offset == 1 and len(reopened.segments[0].offset_index) == 1
    reopened.close_files()
    empty = PartitionLog(str(tmp_path / "t-1"), "t", 1, make_config())
    empty.load(0, 0, True)
    empty.segments[0].delete()
    assert os.listdir(tmp_path / "t-1") == []


def test_a_log_that_cannot_be_created_leaves_the_others_of_its_chunk(tmp_path: Path) -> None:
    """A partition whose directory cannot be made is left out (and opens on the next change);
    the logs loaded in the same job are served."""
    data = tmp_path / "data"

    async def scenario() -> list[int]:
        manager = LogManager(str(data))
        manager.open(0, "c")
        (data / "new-3").write_bytes(b"in the way")  # a file where the log's directory goes
        logs = await manager.load_logs([("new", p, make_config()) for p in range(8)])
        indexes = sorted(log_.partition for log_ in logs)
        await manager.shutdown()
        return indexes

    assert asyncio.run(scenario()) == [0, 1, 2, 4, 5, 6, 7]


def test_recovery_after_a_crash_rewrites_only_the_indexes_it_finds_wrong(tmp_path: Path) -> None:
    """Rewriting every index of every log made most of a restart after SIGKILL (issue 25)."""
    directory, config = str(tmp_path / "t-0"), make_config(**{"index.interval.bytes": "1"})
    log_ = open_log(directory, config)
    for i in range(5):
        append(log_, b"v%d" % i)
    for segment in log_.segments:
        segment.close()
    offset_index, time_index = (Path(directory) / f"{0:020d}{suffix}" for suffix in (".index", ".timeindex"))
    right = offset_index.read_bytes(), time_index.read_bytes()
    for index in (offset_index, time_index):
        os.utime(index, ns=(1_000_000_000, 1_000_000_000))

    reopened = open_log(directory, config, recovery_point=0, clean=False)
    assert reopened.log_end_offset == 5
    assert [index.stat().st_mtime_ns for index in (offset_index, time_index)] == [1_000_000_000] * 2
    for segment in reopened.segments:
        segment.close()

    offset_index.write_bytes(right[0][:8] + struct.pack(">II", 1, 5000))  # the second entry points past the log
    reopened = open_log(directory, config, recovery_point=0, clean=False)
    assert reopened.log_end_offset == 5 and reopened.read(3, 1000, 5) is not None
    assert (offset_index.read_bytes(), time_index.read_bytes()) == right
    append(reopened, b"v5")
    for segment in reopened.segments:
        segment.close()
    assert len(offset_index.read_bytes()) == len(right[0]) + 8, "appends go after the rebuilt entries"


def closed_cleanly_with_a_producer(directory: str, config: LogConfig, batches: int) -> list[int]:
    """A log of `batches` batches of one idempotent producer at leader epoch 2, closed as a clean
    shutdown closes it (its producer snapshot at the log end written); its segments' base offsets."""
    log_ = open_log(directory, config)
    for sequence in range(batches):
        raw = record_batch(b"v%d" % sequence, producer_id=7, sequence=sequence, timestamp=1_000 + sequence)
        log_.append(bytearray(raw), validate_batches(raw), 2)
    bases = [segment.base_offset for segment in log_.segments]
    write = asyncio.run(log_.close(run_blocking_here, fsync=True))
    assert write is not None
    write()
    return bases


async def run_blocking_here(fn, *args):  # noqa: ANN001, ANN201 - LogManager.run_blocking without threads
    return fn(*args)


@contextlib.contextmanager
def file_system_calls() -> Iterator[dict[str, list[str]]]:
    """The paths opened (`os.open`, `open`), listed (`os.listdir`) and removed (`os.unlink`)
    meanwhile, by call."""
    import builtins

    calls: dict[str, list[str]] = {"open": [], "listdir": [], "unlink": []}
    os_open, builtin_open, listdir, unlink = os.open, builtins.open, os.listdir, os.unlink

    def counted_os_open(path, *args, **kwargs):  # noqa: ANN001, ANN202
        calls["open"].append(os.path.basename(path))
        return os_open(path, *args, **kwargs)

    def counted_open(path, *args, **kwargs):  # noqa: ANN001, ANN202
        calls["open"].append(os.path.basename(path))
        return builtin_open(path, *args, **kwargs)

    def counted_listdir(path="."):  # noqa: ANN001, ANN202
        calls["listdir"].append(os.path.basename(path))
        return listdir(path)

    def counted_unlink(path, *args, **kwargs):  # noqa: ANN001, ANN202
        calls["unlink"].append(os.path.basename(path))
        return unlink(path, *args, **kwargs)

    os.open, builtins.open, os.listdir, os.unlink = counted_os_open, counted_open, counted_listdir, counted_unlink
    try:
        yield calls
    finally:
        os.open, builtins.open, os.listdir, os.unlink = os_open, builtin_open, listdir, unlink


def test_a_clean_load_lists_the_log_once_and_opens_no_time_or_txn_index_until_used(tmp_path: Path) -> None:
    """Loading 10,000 logs took 12.5-13.5 s of a restart (issue 25). After a clean shutdown a log
    is listed once, for every step; its time indexes and `.txnindex` files (none here) are not
    looked for, and no file is opened twice: the segments' `.log` and `.index` files (the offset
    index finds where each segment's tail starts), the epoch checkpoint and the producer
    snapshot. The producer comes back from the snapshot, the epochs from the checkpoint. The
    active segment's time index is read at the first append, an older one's when it is searched."""
    directory = str(tmp_path / "t-0")
    config = make_config(**{"segment.bytes": "100", "index.interval.bytes": "1"})  # a batch each
    bases = closed_cleanly_with_a_producer(directory, config, batches=3)
    assert len(bases) == 3
    with file_system_calls() as calls:
        log_ = open_log(directory, make_config(**{"index.interval.bytes": "1"}), clean=True)  # no roll now
    assert calls["listdir"] == ["t-0"]
    assert sorted(calls["open"]) == sorted(
        [f"{base:020d}.log" for base in bases] + [f"{base:020d}.index" for base in bases]
        + ["leader-epoch-checkpoint", f"{3:020d}.snapshot"])
    assert (log_.log_end_offset, log_.epochs, set(log_.producer_state.producers)) == (3, [(2, 0)], {7})
    assert [len(batch.batches) for batch in log_.producer_state.producers.values()] == [3]

    with file_system_calls() as calls:
        raw = record_batch(b"v3", producer_id=7, sequence=3, timestamp=2_000)
        assert log_.append(bytearray(raw), validate_batches(raw), 2).base_offset == 3
    assert f"{bases[-1]:020d}.timeindex" in calls["open"]
    assert log_.active_segment.max_timestamp == 2_000
    with file_system_calls() as calls:
        assert log_.offset_for_timestamp(1_001).offset == 1
    assert calls["open"] == [f"{base:020d}.timeindex" for base in bases[:2]], "the segments searched, on first use"
    log_.close_files()

    with file_system_calls() as calls:  # after a crash: the active segment recovered
        log_ = open_log(directory, config, recovery_point=4, clean=False)
    assert calls["listdir"] == ["t-0"]
    assert calls["unlink"] == [f"{3:020d}.snapshot"], "the snapshot after the recovered segment; no .txnindex"
    assert (log_.log_end_offset, set(log_.producer_state.producers)) == (4, {7})
    log_.close_files()


def test_a_corrupt_time_index_found_at_first_use_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    """A clean load does not read the time indexes (Kafka's lazy indexes); one found damaged when
    first used is rebuilt from its segment's batches, as a load used to rebuild it: the segment's
    largest timestamp, searches by time and the file itself come out right."""
    directory = str(tmp_path / "t-0")
    config = make_config(**{"index.interval.bytes": "1"})
    closed_cleanly_with_a_producer(directory, config, batches=4)
    time_index = Path(directory) / f"{0:020d}.timeindex"
    right = time_index.read_bytes()
    assert len(right) == 4 * 12
    time_index.write_bytes(struct.pack(">qI", 5_000, 3) + struct.pack(">qI", 4_000, 1))  # out of order
    log_ = open_log(directory, config, clean=True)
    assert log_.log_end_offset == 4
    assert log_.offset_for_timestamp(1_002).offset == 2
    assert log_.active_segment.max_timestamp == 1_003
    assert log_.max_timestamp_offset().offset == 3
    assert time_index.read_bytes() == right, "rebuilt on disk"
    append(log_, b"more", timestamp=3_000)
    log_.close_files()
    assert time_index.read_bytes() == right + struct.pack(">qI", 3_000, 4), "appends go after the rebuilt entries"

    time_index.write_bytes(right[:-5])  # torn: found at the first append, which comes after the whole entries
    log_ = open_log(directory, config, clean=True)
    append(log_, b"last", timestamp=4_000)
    log_.close_files()
    assert time_index.read_bytes() == right + struct.pack(">qI", 3_000, 4) + struct.pack(">qI", 4_000, 5)


def test_checkpoints_and_a_stop_while_logs_load_keep_what_the_unloaded_logs_need(tmp_path: Path) -> None:
    """Logs load after the broker listens: a checkpoint written meanwhile keeps the entries of
    the logs not loaded yet, and a stop before a crash's recovery is done leaves no marker."""
    data, config = str(tmp_path / "data"), make_config()
    keys = [("t", p) for p in range(3)]

    async def write() -> None:
        manager = LogManager(data)
        manager.open(0, "c")
        for _, p in keys:
            log_ = manager.load_log("t", p, config)
            append(log_, b"a")
            append(log_, b"b")
            log_.delete_records_before(1)
            await log_.flush(manager.run_blocking)
        manager.high_watermark_source = lambda: dict.fromkeys(keys, 2)
        await manager.shutdown()

    async def start_and_stop_while_loading() -> None:
        os.unlink(os.path.join(data, CLEAN_SHUTDOWN_FILE))  # as after a SIGKILL
        manager = LogManager(data)
        manager.open(0, "c")
        manager.load_log("t", 0, config)
        await manager.write_checkpoints()
        for name in (RECOVERY_POINT_FILE, LOG_START_FILE, HIGH_WATERMARK_FILE):
            expected = dict.fromkeys(keys, {LOG_START_FILE: 1}.get(name, 2))
            assert checkpoints.read_offsets(os.path.join(data, name)) == expected, name
        await manager.shutdown()
        assert not os.path.exists(os.path.join(data, CLEAN_SHUTDOWN_FILE))

    asyncio.run(write())
    asyncio.run(start_and_stop_while_loading())


# ---------------------------------------------------------------------- time, with an injected clock


class Clock:
    """Wall-clock milliseconds that move only when a test says so."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_retention_ms_deletes_segments_whose_newest_record_is_older_than_it(tmp_path) -> None:
    clock = Clock()

    async def scenario() -> None:
        manager = LogManager(str(tmp_path / "data"), clock=clock, open_segment_limit=50)
        log_ = manager.load_log("t", 0, make_config(**{"segment.bytes": "200", "retention.ms": "60000",
                                                         "file.delete.delay.ms": "0"}))
        for i in range(4):
            append(log_, b"r%d" % i + b"x" * 100, timestamp=clock.now + i * 10_000)
        assert len(log_.segments) == 4
        clock.now += 70_001  # the first two segments' records are now past retention.ms
        assert await manager.apply_retention() == 2
        assert [s.base_offset for s in log_.segments] == [2, 3] and log_.log_start_offset == 2
        clock.now += 20_000  # every record is: the active segment is rolled, never left missing
        assert await manager.apply_retention() == 2
        assert [s.base_offset for s in log_.segments] == [4] and log_.log_end_offset == 4
        await manager.shutdown()

    asyncio.run(scenario())


def test_segment_ms_rolls_by_the_batches_timestamps_or_by_the_clock_without_them(tmp_path) -> None:
    clock = Clock()
    log_ = PartitionLog(str(tmp_path / "t-0"), "t", 0, make_config(**{"segment.ms": "1000"}), clock)
    log_.load(0, 0, True)
    append(log_, b"a", timestamp=clock.now)
    append(log_, b"b", timestamp=clock.now + 1000)
    assert len(log_.segments) == 1, "not more than segment.ms apart"
    append(log_, b"c", timestamp=clock.now + 1001)
    assert [s.base_offset for s in log_.segments] == [0, 2]

    untimed = PartitionLog(str(tmp_path / "u-0"), "u", 0, make_config(**{"segment.ms": "1000"}), clock)
    untimed.load(0, 0, True)
    append(untimed, b"a", timestamp=-1)
    clock.now += 1000
    append(untimed, b"b", timestamp=-1)
    assert len(untimed.segments) == 1
    clock.now += 1
    append(untimed, b"c", timestamp=-1)
    assert [s.base_offset for s in untimed.segments] == [0, 2], "the segment's age by the clock"


def test_flush_ms_makes_a_log_due_once_its_last_flush_is_that_old(tmp_path) -> None:
    clock = Clock()

    async def scenario() -> None:
        manager = LogManager(str(tmp_path / "data"), clock=clock)
        log_ = manager.load_log("t", 0, make_config(**{"flush.ms": "5000"}))
        append(log_, b"a")
        clock.now += 4999
        await manager.flush_due_logs()
        assert log_.recovery_point == 0
        clock.now += 1
        await manager.flush_due_logs()
        assert log_.recovery_point == 1 and log_.last_flush_ms == clock.now
        await manager.shutdown()

    asyncio.run(scenario())


def test_a_flush_pass_looks_only_at_logs_appended_to_or_reconfigured_since(tmp_path) -> None:
    """The flusher's pass every second looks at the logs that an append or a new config may
    have made due, not at every log: an idle broker's pass costs nothing per log (issue 25).
    A log whose flush.ms is lowered is flushed by time without a further append."""
    clock = Clock()

    async def scenario() -> None:
        manager = LogManager(str(tmp_path / "data"), clock=clock)
        logs = [manager.load_log("t", index, make_config()) for index in range(3)]
        await manager.flush_due_logs()
        assert manager._flush_candidates == set(), "nothing to flush: no log is looked at again"
        append(logs[0], b"a")
        assert manager._flush_candidates == {logs[0]}
        await manager.flush_due_logs()
        assert manager._flush_candidates == set(), "flush.ms and flush.messages never: only an append counts"
        assert logs[0].recovery_point == 0
        logs[0].config = make_config(**{"flush.ms": "5000"})
        clock.now += 4999
        await manager.flush_due_logs()
        assert manager._flush_candidates == {logs[0]} and logs[0].recovery_point == 0, "time will make it due"
        clock.now += 1
        await manager.flush_due_logs()
        assert logs[0].recovery_point == 1, "flushed by time, no append since the new config"
        await manager.flush_due_logs()
        assert manager._flush_candidates == set()
        await manager.shutdown()

    asyncio.run(scenario())


# ---------------------------------------------------------------------- checkpoints


def test_log_flush_start_offset_checkpoint_interval_ms_schedules_the_log_start_checkpoint(tmp_path) -> None:
    """The log-start-offset checkpoint has its own interval, apart from the recovery point's."""

    async def scenario(recovery_ms: int, log_start_ms: int) -> tuple[bool, bool]:
        data_dir = tmp_path / f"{recovery_ms}-{log_start_ms}"
        manager = LogManager(str(data_dir))
        log_ = manager.load_log("t", 0, make_config())
        append(log_, b"a")
        log_.delete_records_before(1)
        manager.start(3_600_000, recovery_ms, 3_600_000, None, log_start_ms)
        log_start = data_dir / "log-start-offset-checkpoint"
        recovery = data_dir / "recovery-point-offset-checkpoint"
        began = time.monotonic()
        while not (log_start.exists() or recovery.exists()) and time.monotonic() - began < 10:
            await asyncio.sleep(0.01)
        found = log_start.exists(), recovery.exists()  # the other's interval is an hour
        if found[0]:
            assert log_start.read_text(encoding="utf-8") == "0\n1\nt 0 1\n"
        for task in manager._tasks:
            task.cancel()
        return found

    assert asyncio.run(scenario(3_600_000, 20)) == (True, False)
    assert asyncio.run(scenario(20, 3_600_000)) == (False, True)


def test_leader_epoch_cache_truncates_from_either_end_as_kafka_does(tmp_path) -> None:
    from logbus.storage.epoch_cache import LeaderEpochCache

    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in ((1, 0), (3, 10), (4, 20)):
        cache.assign(epoch, start)
    cache.assign(2, 30)  # older than the latest: ignored
    assert cache.entries == [(1, 0), (3, 10), (4, 20)] and cache.unsynced
    assert cache.end_offset_for(3, 25) == (3, 20) and cache.end_offset_for(4, 25) == (4, 25)
    assert cache.end_offset_for(2, 25) == (1, 10) and cache.end_offset_for(5, 25) == (-1, -1)
    cache.truncate_from_start(15)
    assert cache.entries == [(3, 15), (4, 20)], "the epoch holding the new start begins there"
    cache.truncate_from_end(20)
    assert cache.entries == [(3, 15)]
    assert LeaderEpochCache(str(tmp_path)).read_file() == [(3, 15)], "the file follows"
