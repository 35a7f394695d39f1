"""All partition logs of the log dirs (`log.dirs`), their checkpoints and background upkeep.

Files in each log dir, as Kafka lays them out: `meta.properties` (the same cluster and broker
id in every dir), `.lock`, `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks) listing the partitions in that dir,
`.kafka_cleanshutdown` (present only between a clean stop and the next start), and one
`<topic>-<partition>/` directory per partition. At start every dir is scanned and a partition
is loaded from whichever dir holds it; a new partition goes to the dir holding the fewest
partitions (Kafka's rule; ties go to the dir listed first). `cleaner-offset-checkpoint` is
kept in the first dir only. With one dir this is exactly Kafka's single-dir layout.

Blocking file work (fsync, checkpoint writes) runs in a thread pool so the event loop never
waits on the disk; different partitions flush in parallel. Work no request waits for (a roll's
producer snapshot, removing deleted segments' files after `file.delete.delay.ms`) runs in
order in one more thread (`FileJobs`).

A log dir whose disk fails (an OSError from an append, roll, flush or checkpoint write: a full
disk, an I/O error) goes offline, as in Kafka (KIP-112): its logs are closed without writing,
nothing is written to it again (no checkpoint, no clean-shutdown marker, no new partition) and
the `dir failure listeners` (the replica manager) take its partitions offline. The other dirs go
on. A restart brings the dir back (recovering its logs as after a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import glob
import logging
import os
import resource
import shutil
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..config import LogConfig, load_properties
from . import checkpoints
from .cleaner import LogCleaner
from .files import syncfs, syncfs_available
from .jobs import FileJobs
from .log import PartitionLog, now_ms
from .segment import OpenSegments

log = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
SYNCFS_ABOVE_LOGS = 64  # a clean shutdown with more logs to fsync syncs each log dir's file system once
META_PROPERTIES = "meta.properties"
LOCK_FILE = ".lock"
LOAD_CHUNK = 64  # logs loaded by one I/O job (see load_logs)
MAX_PREFERRED_DIRS = 10_000  # bounds what AlterReplicaLogDirs requests for absent partitions can pile up


T = TypeVar("T")
DirFailureListener = Callable[[str, list[tuple[str, int]]], None]


def _write_all(snapshots: list[tuple[str, Callable[[], None]]]) -> dict[str, OSError]:
    """Run each `(log dir, blocking write)` (a worker thread); the first OSError of each log dir,
    whose other writes are then skipped."""
    failed: dict[str, OSError] = {}
    for log_dir, write in snapshots:
        if log_dir not in failed:
            try:
                write()
            except OSError as exc:
                failed[log_dir] = exc
    return failed


class DataDirRefusedError(Exception):
    """A log dir is another cluster's or broker's, another broker process holds it, it cannot be
    read, or two log dirs hold the same partition."""


def _default_open_segment_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 100_000
    return max(soft // 9, 16)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    topic, sep, index = name.rpartition("-")
    if not sep or not index.isdigit():
        return None
    return topic, int(index)


class LogManager:
    def __init__(self, log_dirs: str | Sequence[str], io_threads: int = 8, producer_expiration_ms: int = 86_400_000,
                 open_segment_limit: int | None = None, clock: Callable[[], int] = now_ms) -> None:
        """`log_dirs`: one directory, or several (`log.dirs`); the first also holds the cleaner's
        checkpoint. `open_segment_limit`: segments whose files stay open (3 descriptors each); by
        default as many as a third of the soft descriptor limit allows, the rest left to
        connections. `clock`: wall-clock milliseconds for retention, roll and flush (tests pass their own)."""
        self.clock = clock
        self.log_dirs: list[str] = [log_dirs] if isinstance(log_dirs, str) else list(log_dirs)
        if not self.log_dirs or len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"log dirs must be distinct and at least one: {self.log_dirs}")
        self.data_dir = self.log_dirs[0]
        self.producer_expiration_ms = producer_expiration_ms
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self._flush_candidates: set[PartitionLog] = set()  # the logs `flush_due_logs` looks at
        self.placement: dict[tuple[str, int], str] = {}  # partition -> the log dir holding it (see _place)
        self._dir_counts: dict[str, int] = dict.fromkeys(self.log_dirs, 0)  # partitions placed in each log dir
        self.preferred_dirs: dict[tuple[str, int], str] = {}  # AlterReplicaLogDirs before the partition exists
        self._io_threads = io_threads
        self._pool = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="logbus-io")
        self._jobs_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="logbus-files")
        self.jobs = FileJobs(self._jobs_thread)
        self._open_segment_limit = open_segment_limit
        self.open_segments = OpenSegments(open_segment_limit or _default_open_segment_limit())
        self._tasks: list[asyncio.Task] = []  # the upkeep rounds (see _every)
        self._upkeep_stopping: asyncio.Event | None = None
        self._cleaner_task: asyncio.Task | None = None
        self.syncfs_above = SYNCFS_ABOVE_LOGS
        self.high_watermarks: dict[tuple[str, int], int] = {}  # as read at start
        self.high_watermark_source: Callable[[], dict[tuple[str, int], int]] = lambda: {}
        self.clean_shutdown = False  # every log dir was shut down cleanly
        self._cleanly_shut: set[str] = set()  # log dirs that were
        self._recovery_points: dict[tuple[str, int], int] = {}
        self._log_starts: dict[tuple[str, int], int] = {}
        self._checkpoints_read: dict[str, tuple[dict[tuple[str, int], int], ...]] = {}  # during open
        self.unloaded: set[tuple[str, int]] = set()  # partitions found in the log dirs, not loaded yet
        self.cleaner: LogCleaner | None = None
        self._lock_fds: list[int] = []
        self.offline_dirs: dict[str, str] = {}  # failed log dir -> why
        self._dir_failure_listeners: list[DirFailureListener] = []
        self._closing: set[asyncio.Task] = set()  # logs of failed dirs being closed

    def lock(self) -> None:
        """Hold `<log dir>/.lock` (flock) in every log dir for the life of the process, as Kafka does.

        Two brokers writing one data dir would corrupt each other's segments and checkpoints.
        """
        for log_dir in self.log_dirs:
            self._lock_fds.append(self._lock_dir(log_dir))

    @staticmethod
    def _lock_dir(log_dir: str) -> int:
        try:
            os.makedirs(log_dir, exist_ok=True)
            fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DataDirRefusedError(f"log dir {log_dir} cannot be used: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirRefusedError(f"{log_dir} is in use by another broker process") from None
        return fd

    async def run_blocking(self, fn: Callable, *args: object) -> object:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # ------------------------------------------------------------------ start-up

    def open(self, broker_id: int, cluster_id: str) -> None:
        """Prepare every log dir, read its checkpoints and find its partitions; logs are loaded by
        `load_log`. A log dir that cannot be read refuses the start (Kafka would serve the others)."""
        if self._open_segment_limit is None:  # the soft limit may have been raised since
            self.open_segments.limit = _default_open_segment_limit()
        for log_dir in self.log_dirs:
            try:
                self._open_dir(log_dir, broker_id, cluster_id)
            except OSError as exc:
                raise DataDirRefusedError(
                    f"log dir {log_dir} cannot be used: {exc.strerror or exc}"
                    + (f" ({exc.filename})" if exc.filename else "")
                ) from None
        self._merge_checkpoints()
        self._checkpoints_read.clear()
        self.unloaded.update(self.placement)
        self.clean_shutdown = len(self._cleanly_shut) == len(self.log_dirs)
        self.cleaner = LogCleaner(self.data_dir, self.logs, self.unloaded)

    def _open_dir(self, log_dir: str, broker_id: int, cluster_id: str) -> None:
        os.makedirs(log_dir, exist_ok=True)
        self._check_meta_properties(log_dir, broker_id, cluster_id)
        marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
        if os.path.exists(marker):
            os.unlink(marker)
            self._cleanly_shut.add(log_dir)
        for key in self._partitions_in(log_dir):
            if key in self.placement:
                raise DataDirRefusedError(
                    f"{partition_dir_name(*key)} is in two log dirs, {self.placement[key]} and {log_dir}: "
                    f"remove one copy before starting"
                )
            self._place(key, log_dir)
        self._checkpoints_read[log_dir] = tuple(
            checkpoints.read_offsets(os.path.join(log_dir, name))
            for name in (RECOVERY_POINT_FILE, LOG_START_FILE, HIGH_WATERMARK_FILE)
        )

    def _merge_checkpoints(self) -> None:
        """Each partition's checkpoint entries, from the dir holding it.

        A partition moved to another dir while the broker was stopped is still listed in its old
        dir's files: its log start offset and high watermark there describe the same data and are
        used when the dir holding it has none; its recovery point is not (copied files may not all
        be on disk yet), so after an unclean shutdown all of its segments are checked.
        """
        for log_dir, (recovery, starts, watermarks) in self._checkpoints_read.items():
            for target, entries, borrowed in ((self._recovery_points, recovery, False),
                                              (self._log_starts, starts, True),
                                              (self.high_watermarks, watermarks, True)):
                for key, offset in entries.items():
                    holder = self.placement.get(key, log_dir)
                    if holder == log_dir or (borrowed and key not in target):
                        target[key] = offset

    @staticmethod
    def _check_meta_properties(log_dir: str, broker_id: int, cluster_id: str) -> None:
        """Write meta.properties (Kafka's ZooKeeper-mode version 0) or check that it is ours.

        A data dir of another cluster or broker is refused, as Kafka refuses it: above all when
        the metadata store was lost and a new cluster id made, since starting would delete every
        partition dir the new, empty metadata does not know.
        """
        path = os.path.join(log_dir, META_PROPERTIES)
        if not os.path.exists(path):
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(f"version=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n")
            return
        found = load_properties(path)
        for key, expected in (("cluster.id", cluster_id), ("broker.id", str(broker_id))):
            if found.get(key, expected) != expected:
                raise DataDirRefusedError(
                    f"{path} has {key}={found[key]}, but this broker's is {expected}: refusing to start "
                    f"on another broker's data dir (was the metadata store lost?)"
                )

    @staticmethod
    def _partitions_in(log_dir: str) -> list[tuple[str, int]]:
        found = []
        for name in sorted(os.listdir(log_dir)):
            parsed = parse_partition_dir(name)
            if parsed and os.path.isdir(os.path.join(log_dir, name)):
                found.append(parsed)
        return found

    def partitions_per_dir(self) -> dict[str, int]:
        return dict(self._dir_counts)

    def _place(self, key: tuple[str, int], log_dir: str) -> None:
        """Record where a partition is; the per-dir counts follow (counting all placements for
        each new partition cost O(partitions²) when thousands were created together)."""
        previous = self.placement.get(key)
        if previous != log_dir:
            if previous is not None:
                self._dir_counts[previous] -= 1
            self.placement[key] = log_dir
            self._dir_counts[log_dir] += 1

    def _unplace(self, key: tuple[str, int]) -> None:
        previous = self.placement.pop(key, None)
        if previous is not None:
            self._dir_counts[previous] -= 1

    def least_loaded_dir(self) -> str:
        """Where a new partition goes: the online log dir holding the fewest partitions, as in
        Kafka (the first dir when every one is offline: opening a log there then fails)."""
        return min(self.live_dirs or self.log_dirs, key=self._dir_counts.__getitem__)

    @property
    def live_dirs(self) -> list[str]:
        return [log_dir for log_dir in self.log_dirs if log_dir not in self.offline_dirs]

    def log_dir_for(self, topic: str, partition: int) -> str:
        """The log dir holding the partition; for a new one the dir AlterReplicaLogDirs named for
        it (Kafka's preferred log dir), else the least loaded."""
        key = (topic, partition)
        return self.placement.get(key) or self.preferred_dirs.get(key) or self.least_loaded_dir()

    def prefer_log_dir(self, topic: str, partition: int, log_dir: str) -> None:
        """Create the partition in `log_dir` when it comes (it is not hosted yet), as Kafka's
        `maybeUpdatePreferredLogDir` does; `log_dir` is one of `log_dirs`. Past
        MAX_PREFERRED_DIRS waiting entries, new ones are not kept (the usual placement applies)."""
        key = (topic, partition)
        if key in self.preferred_dirs or len(self.preferred_dirs) < MAX_PREFERRED_DIRS:
            self.preferred_dirs[key] = log_dir

    def _new_log(self, log_dir: str, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        directory = os.path.join(log_dir, partition_dir_name(topic, partition))
        log_ = PartitionLog(directory, topic, partition, config, self.clock)
        log_.on_io_error = functools.partial(self.fail_dir, log_dir)
        log_.on_flush_candidate = self._flush_candidates.add
        log_.jobs = self.jobs
        return log_

    def load_log(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        """Open (or create) a partition's log, recovering it after an unclean shutdown."""
        log_dir = self.log_dir_for(topic, partition)
        return self._register(log_dir, self._read_log(topic, partition, config, log_dir))

    async def load_logs(self, wanted: Iterable[tuple[str, int, LogConfig]]) -> list[PartitionLog]:
        """`load_log` for many partitions (at start-up, or the replicas of new topics), in the I/O
        threads, so that the event loop serves meanwhile: in chunks of up to LOAD_CHUNK logs, each
        chunk one job (at most as many at once as there are threads). One job per log cost each
        log several thread handoffs and GIL switches; on a loaded machine each of them waits for
        the scheduler, and creating 10,000 empty logs took many times the CPU it used. A log
        that cannot be opened (its dir is offline) is logged and left out."""
        entries = list(wanted)
        size = max(1, min(LOAD_CHUNK, -(-len(entries) // self._io_threads)))  # all threads busy when few
        slots = asyncio.Semaphore(self._io_threads)

        async def load(chunk: list[tuple[str, int, LogConfig]]) -> list[PartitionLog]:
            async with slots:
                placed = [(topic, partition, config, self._dir_placed(topic, partition))
                          for topic, partition, config in chunk]
                reads = await asyncio.get_running_loop().run_in_executor(self._pool, self._read_logs, placed)
            return [self._register(log_dir, read) for (_, _, _, log_dir), read in zip(placed, reads, strict=True)
                    if read is not None and self._still_online(log_dir, read)]

        chunks = await asyncio.gather(*(load(entries[i:i + size]) for i in range(0, len(entries), size)))
        return [log_ for chunk in chunks for log_ in chunk]

    def _dir_placed(self, topic: str, partition: int) -> str:
        """The log dir of a log about to be loaded, placed now (on the event loop, where the
        placement changes) so that the next new partition counts it."""
        log_dir = self.log_dir_for(topic, partition)
        if (topic, partition) not in self.placement:
            self._place((topic, partition), log_dir)
        return log_dir

    def _read_logs(self, placed: list[tuple[str, int, LogConfig, str]]) -> list[PartitionLog | None]:
        """`_read_log` for each of a chunk (any thread); None for a log that cannot be opened."""
        reads: list[PartitionLog | None] = []
        for topic, partition, config, log_dir in placed:
            try:
                read = self._read_log(topic, partition, config, log_dir)
            except OSError:
                log.exception("cannot open the log of %s-%d; it opens on the next change or restart", topic, partition)
                reads.append(None)
                continue
            reads.append(read)
        return reads

    def _still_online(self, log_dir: str, read: PartitionLog) -> bool:
        """False (the log's files closed again) when its dir failed while it loaded."""
        if log_dir in self.offline_dirs:
            read.close_files()
            return False
        return True

    def _read_log(self, topic: str, partition: int, config: LogConfig, log_dir: str) -> PartitionLog:
        """The file work of `load_log` in `log_dir` (any thread): the log, loaded, its segments not
        yet counted against the descriptor budget and all but the active one closed (they open on
        first use)."""
        key = (topic, partition)
        if log_dir in self.offline_dirs:
            raise OSError(errno.EIO, f"log dir {log_dir} is offline")
        directory = os.path.join(log_dir, partition_dir_name(topic, partition))
        clean_shutdown = log_dir in self._cleanly_shut
        log_ = self._new_log(log_dir, topic, partition, config)
        try:
            cut = log_.load(self._recovery_points.get(key, 0), self._log_starts.get(key, 0), clean_shutdown)
        except Exception:  # one partition must never keep the broker from starting
            log.exception("loading %s-%d failed: recovering all its segments and producer state", topic, partition)
            log_.close_files()
            for snapshot in glob.glob(os.path.join(directory, "*.snapshot")):
                os.unlink(snapshot)  # derived data: rebuilt from the log
            log_ = self._new_log(log_dir, topic, partition, config)
            cut = log_.load(0, self._log_starts.get(key, 0), clean_shutdown=False)
        if cut:
            log.warning("recovered %s-%d: truncated %d bytes of torn or corrupt tail", topic, partition, cut)
        for segment in log_.segments[:-1]:
            segment.release()
        return log_

    def _register(self, log_dir: str, log_: PartitionLog) -> PartitionLog:
        """A loaded log joins the manager (event loop): its placement, checkpoints, descriptor budget."""
        key = (log_.topic, log_.partition)
        self._place(key, log_dir)
        self.preferred_dirs.pop(key, None)
        self.unloaded.discard(key)
        self.logs[key] = log_
        self._flush_candidates.add(log_)  # a log loaded after a crash may hold records to flush
        log_.track_segments(self.open_segments)
        return log_

    def remove_orphan_dirs(self, known: set[tuple[str, int]]) -> None:
        """Delete partition dirs the metadata no longer knows (a DeleteTopics cut short)."""
        for log_dir in self.log_dirs:
            for key in self._partitions_in(log_dir):
                if key not in known:
                    shutil.rmtree(os.path.join(log_dir, partition_dir_name(*key)), ignore_errors=True)
                    self._unplace(key)
                    self.unloaded.discard(key)

    async def delete_log(self, topic: str, partition: int) -> None:
        log_ = self.logs.pop((topic, partition), None)
        self.unloaded.discard((topic, partition))
        self.high_watermarks.pop((topic, partition), None)
        self._unplace((topic, partition))
        if self.cleaner is not None:
            self.cleaner.forget((topic, partition))
        if log_ is not None:
            await log_.delete(self.run_blocking)

    # ------------------------------------------------------------------ failed dirs

    def add_dir_failure_listener(self, listener: DirFailureListener) -> None:
        """Call `listener(log_dir, partitions)` when a log dir goes offline, with the partitions
        whose logs it held."""
        self._dir_failure_listeners.append(listener)

    def fail_dir(self, log_dir: str, exc: OSError) -> None:
        """Take `log_dir` offline after a disk error in it (once; later errors add nothing)."""
        if log_dir in self.offline_dirs or log_dir not in self.log_dirs:
            return
        self.offline_dirs[log_dir] = exc.strerror or str(exc)
        lost = [key for key in self.logs if self.placement.get(key) == log_dir]
        log.error("log dir %s failed (%s): its %d partitions are offline on this broker until it restarts",
                  log_dir, self.offline_dirs[log_dir], len(lost))
        self._closing = {task for task in self._closing if not task.done()}
        for key in lost:
            self._closing.add(asyncio.get_running_loop().create_task(self.logs.pop(key).close_offline()))
        for listener in self._dir_failure_listeners:
            listener(log_dir, lost)

    async def _in_dir(self, log_dir: str, job: Callable[..., None], *args: object) -> None:
        """Blocking file work in `log_dir`, in a worker thread; an OSError takes the dir offline."""
        try:
            await self.run_blocking(job, *args)
        except OSError as exc:
            self.fail_dir(log_dir, exc)

    # ------------------------------------------------------------------ background

    def start(self, retention_check_ms: int, checkpoint_ms: int, flush_check_ms: int,
              cleaner_backoff_ms: int | None = None, log_start_checkpoint_ms: int | None = None) -> None:
        """Start upkeep; the log cleaner runs every `cleaner_backoff_ms` unless that is None.

        As in Kafka, recovery points (and high watermarks) are checkpointed every `checkpoint_ms`
        (log.flush.offset.checkpoint.interval.ms), log start offsets every
        `log_start_checkpoint_ms` (log.flush.start.offset.checkpoint.interval.ms; default: the same).
        """
        log_start_ms = checkpoint_ms if log_start_checkpoint_ms is None else log_start_checkpoint_ms
        self._upkeep_stopping = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._every(retention_check_ms, self.apply_retention)),
            asyncio.create_task(self._every(checkpoint_ms, self.write_recovery_checkpoints)),
            asyncio.create_task(self._every(log_start_ms, self.write_log_start_checkpoint)),
            asyncio.create_task(self._every(flush_check_ms, self.flush_due_logs)),
        ]
        if cleaner_backoff_ms is not None and self.cleaner is not None:
            self._cleaner_task = asyncio.create_task(self._every(cleaner_backoff_ms, self.cleaner.clean_due_logs))
            self._tasks.append(self._cleaner_task)

    async def _every(self, interval_ms: int, job: Callable) -> None:
        """Run `job` every interval until `_stop_upkeep`; a failure is logged once, not every
        round (a full disk lasts)."""
        interval = max(interval_ms, 10) / 1000
        failing = ""
        while not await self._upkeep_stopped_within(interval):
            try:
                await job()
            except Exception as exc:  # keep the broker up; the next round retries
                if repr(exc) != failing:
                    log.exception("background job %s failed (retrying every %.1f s)", job.__name__, interval)
                failing = repr(exc)
            else:
                if failing:
                    log.info("background job %s works again", job.__name__)
                failing = ""

    async def _upkeep_stopped_within(self, seconds: float) -> bool:
        """Wait `seconds`, or less if upkeep stops meanwhile; whether it stopped."""
        assert self._upkeep_stopping is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._upkeep_stopping.wait(), seconds)
        return self._upkeep_stopping.is_set()

    async def _stop_upkeep(self) -> None:
        """End the upkeep rounds, letting one under way finish, as Kafka's scheduler awaits its
        running tasks at shutdown. Cancelling it would not stop its file work in a worker thread:
        a periodic checkpoint write went on beside the shutdown's own write of the same file
        (one `.tmp` for both), whose rename then failed, took the log dir offline and left no
        clean-shutdown marker after a clean exit (issue 26), or renamed a stale checkpoint over
        the final one. The cleaner's round is cancelled: `LogCleaner.stop` abandons its cleaning."""
        if self._upkeep_stopping is not None:
            self._upkeep_stopping.set()
        if self._cleaner_task is not None:
            self._cleaner_task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def apply_retention(self) -> int:
        """Delete old segments, and forget idempotent producers idle past producer.id.expiration.ms."""
        now = self.clock()
        deleted = 0
        for log_ in list(self.logs.values()):
            deleted += await log_.delete_old_segments(now)
            log_.producer_state.expire(now, self.producer_expiration_ms)
        return deleted

    async def flush_due_logs(self) -> None:
        """Flush the logs flush.messages or flush.ms make due. Only the candidates are looked at:
        the logs appended to or reconfigured since (`PartitionLog.on_flush_candidate`), and
        those time may still make due; an idle broker's pass costs nothing per log (it looked
        at every log every second: issue 25)."""
        now = self.clock()
        due = []
        for log_ in list(self._flush_candidates):
            if self.logs.get((log_.topic, log_.partition)) is not log_:
                self._flush_candidates.discard(log_)  # removed, or its dir failed
            elif log_.flush_due(now):
                due.append(log_)
            elif not log_.flush_may_come_due():
                self._flush_candidates.discard(log_)
        await self._at_most_io_threads(log_.flush(self.run_blocking) for log_ in due)

    async def _at_most_io_threads(self, jobs: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
        """Run fsync jobs with no more at once than the pool has threads: a waiting job would
        hold its segments' descriptors open (pinned) for nothing, past the descriptor budget."""
        slots = asyncio.Semaphore(self._io_threads)

        async def bounded(job: Coroutine[Any, Any, T]) -> T:
            async with slots:
                return await job

        return await asyncio.gather(*(bounded(job) for job in jobs))

    async def write_checkpoints(self) -> None:
        await self.write_recovery_checkpoints()
        await self.write_log_start_checkpoint()

    async def write_recovery_checkpoints(self) -> None:
        """The recovery-point and high-watermark checkpoints of every online log dir (in a worker thread)."""
        recovery = self._per_dir(self._read_at_start(self._recovery_points, self.unloaded)
                                 | {key: log_.recovery_point for key, log_ in self.logs.items()})
        # a log loaded at start is hosted by a partition (the source) only once they all are
        watermarks = self._per_dir(self._read_at_start(self.high_watermarks, [*self.unloaded, *self.logs])
                                   | self.high_watermark_source())
        for log_dir in recovery:
            await self._in_dir(log_dir, self._write_recovery_files, log_dir, recovery[log_dir], watermarks[log_dir])

    @staticmethod
    def _write_recovery_files(log_dir: str, recovery: dict, watermarks: dict) -> None:
        checkpoints.write_offsets(os.path.join(log_dir, RECOVERY_POINT_FILE), recovery)
        checkpoints.write_offsets(os.path.join(log_dir, HIGH_WATERMARK_FILE), watermarks)

    async def write_log_start_checkpoint(self) -> None:
        starts = self._per_dir(self._read_at_start(self._log_starts, self.unloaded)
                               | {key: log_.log_start_offset for key, log_ in self.logs.items()})
        for log_dir, entries in starts.items():
            await self._in_dir(log_dir, checkpoints.write_offsets, os.path.join(log_dir, LOG_START_FILE), entries)

    @staticmethod
    def _read_at_start(entries: dict[tuple[str, int], int],
                       keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The checkpoint entries read at start for `keys`: a checkpoint written while the logs
        load (or at a stop before they all are) keeps those of the logs not loaded yet."""
        return {key: entries[key] for key in keys if key in entries}

    def _per_dir(self, offsets: dict[tuple[str, int], int]) -> dict[str, dict[tuple[str, int], int]]:
        """Split per-partition entries by the online log dir holding each partition (every such
        dir gets a file, empty if need be; a partition without a dir, e.g. one that failed to
        open, goes with the first dir, where it would be created). Offline dirs get nothing."""
        split: dict[str, dict[tuple[str, int], int]] = {log_dir: {} for log_dir in self.live_dirs}
        for key, offset in offsets.items():
            log_dir = self.placement.get(key, self.data_dir)
            if log_dir in split:
                split[log_dir][key] = offset
        return split

    async def _close_logs(self) -> None:
        """Close every log durably (Kafka's flush-then-close). Up to `syncfs_above` logs with
        unsynced records are fsynced one by one; beyond, each log dir holding one is synced
        once with syncfs(2) after they all closed (issue 25: a broker closing 3,333 logs that
        had moved spent most of 53 s in 13,000 fsyncs, one awaited job per log). That also
        makes their producer snapshots durable before the clean-shutdown marker. The logs close
        on the event loop one after the other (nothing to wait for once upkeep stopped), and
        their producer snapshots are written in at most `io_threads` jobs (`_write_snapshots`)."""
        moved = [key for key, log_ in self.logs.items() if log_.unsynced]
        fsync_each = len(moved) <= self.syncfs_above or not syncfs_available()

        async def close(key: tuple[str, int], fsync: bool) -> tuple[str, Callable[[], None] | None]:
            return self.placement.get(key, self.data_dir), await self.logs[key].close(self.run_blocking, fsync)

        snapshots = await self._at_most_io_threads(close(key, True) for key in (moved if fsync_each else []))
        for key, log_ in list(self.logs.items()):
            if not log_.deleted:
                snapshots.append(await close(key, False))
        await self._write_snapshots([(log_dir, write) for log_dir, write in snapshots if write is not None])
        if fsync_each:
            return
        for log_dir in {self.placement.get(key, self.data_dir) for key in moved}:
            if log_dir in self.live_dirs:
                await self._in_dir(log_dir, syncfs, log_dir)
        live = set(self.live_dirs)
        for key in moved:
            if self.placement.get(key, self.data_dir) in live:
                self.logs[key].synced_with_its_file_system()

    async def _write_snapshots(self, snapshots: list[tuple[str, Callable[[], None]]]) -> None:
        """Write closing logs' producer snapshots (`(log dir, blocking write)` each) in at most
        `io_threads` jobs; an OSError takes that log dir offline (no clean-shutdown marker) and
        the rest of its snapshots are not tried."""
        per_job = -(-len(snapshots) // self._io_threads)
        jobs = [snapshots[first:first + per_job] for first in range(0, len(snapshots), per_job or 1)]
        for failures in await asyncio.gather(*(self.run_blocking(_write_all, job) for job in jobs)):
            for log_dir, exc in failures.items():
                self.fail_dir(log_dir, exc)

    async def shutdown(self) -> None:
        """Stop upkeep, fsync every log, write checkpoints and the clean-shutdown marker."""
        await self._stop_upkeep()
        if self.cleaner is not None:
            self.cleaner.stop()
        self.jobs.cancel_delayed()
        await self._close_logs()
        await self.write_checkpoints()
        if self._closing:
            await asyncio.wait(self._closing)
        for log_dir in self.live_dirs:  # an offline dir's logs are recovered at the next start
            if log_dir not in self._cleanly_shut and any(self.placement.get(key) == log_dir for key in self.unloaded):
                continue  # logs still to recover after a crash: the next start recovers them
            with open(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), "w", encoding="utf-8"):
                pass
        self._pool.shutdown(wait=True)
        self._jobs_thread.shutdown(wait=True)
        while self._lock_fds:
            os.close(self._lock_fds.pop())  # releases the flock
