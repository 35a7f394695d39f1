"""A partition as this broker hosts it: its log plus replication state.

The log end offset (LEO) is where the next record goes; the high watermark (HW) is how far
every in-sync replica has the log, and consumers read only below it. The leader tracks each
follower's LEO from its fetches, and when it last caught up (Kafka's Replica.updateFetchState):
a follower not caught up for `replica.lag.time.max.ms` leaves the ISR, one that reaches the HW
joins it again; both changes go through the metadata store (`alter_isr`), and take effect when
the new state comes back. HW = the smallest LEO in the ISR. While a change is pending the HW
and acks=all count the *maximal* ISR, the committed one plus any member being added (Kafka's
maximalIsr, KIP-497): once the store has written an expansion, the controller may elect the new
member, so no record it lacks may be acknowledged, even before the leader hears the write
succeeded. A single broker is its whole ISR, so its HW follows its LEO at once. A follower's HW
is the leader's, capped by its own LEO.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import itertools
import time
import weakref
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

from ..errors import (
    KafkaStorageError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    RequestTimedOutError,
)
from ..protocol.records import BatchHeader, EndTxnMarker, build_end_txn_marker
from ..storage.files import fsync_path
from ..storage.log import AppendInfo, PartitionLog
from ..storage.segment import ReadSlice
from .metadata import PartitionState

RECENT_BYTES = 1 << 20  # the tail of a log taken as cached (`recently_written`): one replica.fetch.max.bytes
RECENT_S = 10.0  # and the records written this long ago or less (`recently_written`)
_RECENT_MARK_S = 1.0  # how often the log end is noted for `recently_written`
MARKER_BATCH_BYTES = len(build_end_txn_marker(0, 0, EndTxnMarker(True, 0), 0))  # the same for every marker


@dataclass(frozen=True, slots=True)
class FetchedData:
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    slice: ReadSlice | None
    aborted_transactions: list[tuple[int, int]] | None = None  # read_committed only: (producer id, first offset)


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica)."""

    log_end_offset: int = -1  # unknown until it fetches
    log_start_offset: int = -1  # as its last fetch said (v5+)
    last_caught_up: float = 0.0
    last_fetch_leader_leo: int = -1
    last_fetch_time: float = 0.0
    session: Any = None  # the fetch session its last fetch came in (its `fetched_at`: the session's last fetch)

    def caught_up_at(self, leader_leo: int) -> float:
        """When it was last caught up: a follower that had the leader's whole log at its last fetch
        of this partition still has it when the log has not grown since, as of the latest fetch
        of its session (an incremental fetch names only the partitions that moved, the others
        are fetched again from where they were: KIP-227)."""
        if self.session is not None and self.log_end_offset >= leader_leo:
            return max(self.last_caught_up, self.session.fetched_at)
        return self.last_caught_up

    def is_caught_up(self, leader_leo: int, now: float, max_lag_s: float) -> bool:
        """Kafka's ReplicaState.isCaughtUp: it has the leader's whole log, or had it within
        `max_lag_s`. A follower with the whole log of an idle partition stays in the ISR however
        long its fetch rounds take: dropped after 3 s without a fetch of each (the test
        clusters' replica.lag.time.max.ms), 10,000 new partitions left and rejoined their ISRs
        over and over on a loaded machine, each time a ZooKeeper write, and never settled."""
        return self.log_end_offset == leader_leo or now - self.caught_up_at(leader_leo) <= max_lag_s


IsrRequest = Callable[["Partition", list[int]], None]


class Partition:
    def __init__(self, topic: str, index: int, topic_id: str, broker_id: int, log: PartitionLog,
                 state: PartitionState, high_watermark: int, alter_isr: IsrRequest | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.broker_id = broker_id
        self.log = log
        self.state = state
        self.clock = clock
        self._alter_isr = alter_isr
        self.high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        log.on_high_watermark(self.high_watermark)
        self._data_waiters: set[asyncio.Future[None]] = set()
        self._watches: list[weakref.ref[Any]] = []  # follower fetch sessions' ChangeWatch
        self._changed = asyncio.Event()  # HW, LEO or state moved: DeleteRecords waiters look again
        self._replication_waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # acks=all: a heap by offset
        self._waiter_order = itertools.count()
        self._end_marks: collections.deque[tuple[float, int]] = collections.deque()  # (time, LEO then)
        self.appended_bytes = 0  # bytes appended as leader since this broker opened the log
        self.followers: dict[int, FollowerState] = {}
        self.isr_change_pending = False
        self._isr_retry_at = 0.0  # after a failed ISR change, none is asked for before this
        self.maximal_isr = list(state.isr)
        self.offline = False  # its log dir failed: nothing is read or written here any more
        self._become(state)
        self._maybe_advance_high_watermark()

    # ------------------------------------------------------------------ roles

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def is_follower(self) -> bool:
        return not self.is_leader and self.broker_id in self.state.replicas and self.state.leader >= 0

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def update_state(self, state: PartitionState) -> None:
        old = self.state
        self.state = state
        self.isr_change_pending = False
        self._isr_retry_at = 0.0
        self.maximal_isr = list(state.isr)
        if state.leader_epoch != old.leader_epoch or state.leader != old.leader:
            self._become(state)
        self.followers = {b: f for b, f in self.followers.items() if b in state.replicas}
        for broker in state.replicas:
            if broker != self.broker_id and self.is_leader:
                self.followers.setdefault(broker, FollowerState(last_caught_up=self.clock()))
        self._maybe_advance_high_watermark()
        self._wake()

    def _become(self, state: PartitionState) -> None:
        """A new leader epoch: as leader, followers' positions are unknown until they fetch
        (those in the ISR count as caught up now, as Kafka does)."""
        now = self.clock()
        self.followers = {}
        if self.is_leader:
            for broker in state.replicas:
                if broker != self.broker_id:
                    self.followers[broker] = FollowerState(last_caught_up=now if broker in state.isr else 0.0)

    def go_offline(self) -> None:
        """Its log dir failed (Kafka's HostedPartition.Offline): produces waiting for acks=all
        and fetches waiting for data are answered now (KAFKA_STORAGE_ERROR)."""
        self.offline = True
        self._wake()

    # ------------------------------------------------------------------ leader: appends

    def append_as_leader(self, data: bytearray, headers: list[BatchHeader], acks: int) -> AppendInfo:
        self._check_can_append(acks)
        self._mark_log_end()
        info = self.log.append(data, headers, self.leader_epoch)
        if not info.duplicate:
            self._appended(len(data))
        return info

    def append_control_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                              coordinator_epoch: int) -> AppendInfo:
        """Write a transaction's COMMIT or ABORT marker at the current leader epoch. Markers are
        always written with acks=all (Kafka's WriteTxnMarkers), so min.insync.replicas applies;
        the log refuses an older producer or coordinator epoch (KafkaApiError)."""
        self._check_can_append(-1)
        self._mark_log_end()
        info = self.log.append_control_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                              self.leader_epoch)
        self._appended(MARKER_BATCH_BYTES)
        return info

    def _check_can_append(self, acks: int) -> None:
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.broker_id} is not the leader of {self}")
        if acks == -1 and len(self.state.isr) < self.log.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{len(self.state.isr)} in-sync replicas, min.insync.replicas is "
                f"{self.log.config.min_insync_replicas}"
            )

    def _appended(self, size: int) -> None:
        """Count the bytes for fetches waiting on min_bytes; move the HW (a lone leader's) or wake
        the followers waiting in a fetch (and read_committed consumers waiting at the LSO, which
        a marker's HW move makes stable)."""
        self.appended_bytes += size
        if not self._maybe_advance_high_watermark():
            self._wake()

    def replicated(self, offset: int) -> bool:
        """For acks=all: True once every ISR member has everything before `offset` and the ISR
        still meets min.insync.replicas, False while that may yet happen; raises the refusal once
        it can no longer happen here: KafkaStorageError (offline), NotLeaderError,
        NotEnoughReplicasAfterAppendError (the HW is there but the ISR is too small)."""
        self._check_still_leading()
        if self.high_watermark < offset:
            return False
        if len(self.maximal_isr) < self.log.config.min_insync_replicas:
            raise NotEnoughReplicasAfterAppendError(
                f"{len(self.maximal_isr)} in-sync replicas, min.insync.replicas is "
                f"{self.log.config.min_insync_replicas}"
            )
        return True

    async def wait_replicated(self, offset: int, timeout: float) -> None:
        """Kafka's DelayedProduce: return once `replicated(offset)`; raise its refusal, or
        RequestTimedOutError when it is not replicated after `timeout`.

        The wait is woken only when its verdict can have changed: the HW reached `offset`, or
        this replica stopped leading or went offline (`_wake_replication_waiters`), not at every
        append or follower fetch: a leader with many produces in flight looked at each of them
        several times per batch replicated."""
        try:
            async with asyncio.timeout(timeout):
                while not self.replicated(offset):
                    waiter = asyncio.get_running_loop().create_future()
                    heapq.heappush(self._replication_waiters, (offset, next(self._waiter_order), waiter))
                    await waiter
        except TimeoutError:
            if not self.replicated(offset):
                raise RequestTimedOutError(f"{self} has not replicated offset {offset} in {timeout} s") from None

    def _wake_replication_waiters(self) -> None:
        """Wake the acks=all waits that `replicated` can now decide: all of them when this replica
        no longer leads or is offline, else those the HW reached."""
        waiters = self._replication_waiters
        if self.offline or not self.is_leader:
            woken = [waiter for _, _, waiter in waiters]
            waiters.clear()
        else:
            woken = []
            while waiters and waiters[0][0] <= self.high_watermark:
                woken.append(heapq.heappop(waiters)[2])
        for waiter in woken:
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------------ leader: followers

    def update_follower(self, broker_id: int, fetch_offset: int, log_start_offset: int = -1,
                        session: Any = None) -> None:
        """A follower fetched from `fetch_offset`: it has everything before it, and its log
        starts at `log_start_offset` (a DeleteRecords waiting for it wakes when that moved).
        `session`: the fetch session it came in, whose later fetches keep it caught up
        (`FollowerState.caught_up_at`)."""
        follower = self.followers.get(broker_id)
        if follower is None or not self.is_leader:
            return
        follower.session = session
        if log_start_offset != follower.log_start_offset:
            follower.log_start_offset = log_start_offset
            self._wake()
        now = self.clock()
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            follower.last_caught_up = now
        elif fetch_offset >= follower.last_fetch_leader_leo >= 0:
            follower.last_caught_up = max(follower.last_caught_up, follower.last_fetch_time)
        follower.last_fetch_leader_leo = leader_leo
        follower.last_fetch_time = now
        follower.log_end_offset = fetch_offset
        self._maybe_expand_isr(broker_id, follower)
        self._maybe_advance_high_watermark()

    def _maybe_expand_isr(self, broker_id: int, follower: FollowerState) -> None:
        """A follower that has the log up to the HW, from this leader's epoch on, joins the ISR."""
        if broker_id in self.state.isr or not self._may_change_isr() or broker_id not in self.state.target_replicas:
            return  # (a replica a reassignment removes never joins again)
        epoch_start = self.log.epoch_cache.start_of(self.leader_epoch)
        epoch_start = self.log.log_end_offset if epoch_start is None else epoch_start
        if follower.log_end_offset >= max(self.high_watermark, epoch_start):
            self._request_isr([*self.state.isr, broker_id])

    def read_replica_candidates(self, fetch_offset: int) -> list[tuple[int, int, float]]:
        """(broker id, log end offset, seconds since caught up) of the in-sync followers that hold
        `fetch_offset`: those a consumer may be sent to read from (Kafka's
        findPreferredReadReplica; a follower out of the ISR may lag ever further)."""
        now = self.clock()
        return [
            (broker, follower.log_end_offset, now - follower.caught_up_at(self.log.log_end_offset))
            for broker, follower in self.followers.items()
            if broker in self.state.isr and follower.log_start_offset <= fetch_offset <= follower.log_end_offset
        ]

    def shrink_isr_if_lagging(self, max_lag_s: float) -> None:
        """Drop followers not caught up for `max_lag_s` from the ISR (the leader stays)."""
        if not self.is_leader or not self._may_change_isr():
            return
        now, leader_leo = self.clock(), self.log.log_end_offset
        lagging = [b for b in self.state.isr if b != self.broker_id and
                   (f := self.followers.get(b)) is not None and not f.is_caught_up(leader_leo, now, max_lag_s)]
        if lagging:
            self._request_isr([b for b in self.state.isr if b not in lagging])

    def _may_change_isr(self) -> bool:
        return not self.isr_change_pending and self.clock() >= self._isr_retry_at

    def _request_isr(self, isr: list[int]) -> None:
        if self._alter_isr is not None:
            self.isr_change_pending = True
            self.maximal_isr = [*self.state.isr, *(b for b in isr if b not in self.state.isr)]
            self._alter_isr(self, isr)

    def isr_change_failed(self, maybe_written: bool, retry_after_s: float = 0.0) -> None:
        """The ISR change asked for did not come back. When the store surely did not write it
        (a conditional update lost its race, or it was never sent) the committed ISR counts
        again; when it may have (the store went out of reach mid-write) an added member keeps
        counting until the next state arrives. Either way a new change may be asked for, after
        `retry_after_s` (not at every fetch of a follower while the store is out of reach)."""
        self.isr_change_pending = False
        self._isr_retry_at = self.clock() + retry_after_s
        if not maybe_written:
            self.maximal_isr = list(self.state.isr)
            self._maybe_advance_high_watermark()

    def _maybe_advance_high_watermark(self) -> bool:
        """Move the HW to the smallest LEO in the ISR (never back); True when it moved."""
        if not self.is_leader:
            return False
        candidates = [self.log.log_end_offset]
        for broker in self.maximal_isr:
            if broker != self.broker_id:
                follower = self.followers.get(broker)
                candidates.append(follower.log_end_offset if follower else -1)
        new_hw = min(candidates)
        if new_hw > self.high_watermark:
            self._advance_high_watermark(new_hw)
            return True
        return False

    def _advance_high_watermark(self, new_hw: int) -> None:
        """Move the HW forward: the log learns which transactions are stable (the cleaner cleans
        up to them), and fetchers waiting wake."""
        self.high_watermark = new_hw
        self.log.on_high_watermark(new_hw)
        self._wake()

    # ------------------------------------------------------------------ log start (DeleteRecords)

    def delete_records_before(self, offset: int) -> int:
        """As leader: move the log start offset to `offset` (DeleteRecords); returns the new one.
        Followers adopt it from their next fetch answer (`follow_log_start_offset`): the
        fetches waiting on it wake to tell them."""
        start = self.log.delete_records_before(offset)
        self._wake()
        return start

    def low_watermark(self, live_brokers: Container[int]) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset of this replica and of
        the followers on live brokers (-1 for one that has not fetched in this leader epoch)."""
        starts = [f.log_start_offset for broker, f in self.followers.items() if broker in live_brokers]
        return min([self.log.log_start_offset, *starts])

    async def wait_low_watermark(self, offset: int, live_brokers: Container[int], timeout: float) -> None:
        """Kafka's DelayedDeleteRecords: return once every live replica's log starts at `offset`
        or later; raise RequestTimedOutError after `timeout`, NotLeaderError if leadership moved,
        KafkaStorageError if this replica went offline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.is_leader and not self.offline and self.low_watermark(live_brokers) < offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RequestTimedOutError(f"the replicas of {self} do not start at {offset} after {timeout} s")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
        self._check_still_leading()

    def _check_still_leading(self) -> None:
        """The refusal of a wait on this leader that can no longer end here: KafkaStorageError
        (its log dir failed), NotLeaderError (leadership moved)."""
        if self.offline:
            raise KafkaStorageError(f"the log dir of {self} failed")
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.broker_id} no longer leads {self}")

    def follow_log_start_offset(self, leader_log_start: int) -> None:
        """As follower, Kafka's maybeIncrementLogStartOffset(LeaderOffsetIncremented): the
        leader's log start (DeleteRecords, retention) becomes this log's, never past this
        replica's HW, so records deleted on the leader do not come back if this replica leads."""
        if leader_log_start > self.log.log_start_offset:
            self.log.delete_records_before(min(leader_log_start, self.high_watermark))

    # ------------------------------------------------------------------ follower

    def append_as_follower(self, data: bytes | memoryview, headers: list[BatchHeader], leader_hw: int) -> None:
        self._mark_log_end()
        self.log.append_as_follower(data, headers)
        self.appended_bytes += len(data)
        self.follow_high_watermark(leader_hw)

    def follow_high_watermark(self, leader_hw: int) -> None:
        new_hw = min(leader_hw, self.log.log_end_offset)
        if new_hw > self.high_watermark:
            self._advance_high_watermark(new_hw)

    async def truncate_to(self, offset: int) -> None:
        """Cut the log at `offset` under its I/O lock (a flush in a worker never sees a segment's
        descriptor closed under it) and make the cut durable off the event loop."""
        async with self.log.io_lock:
            await asyncio.to_thread(_fsync_paths, self.log.truncate_to(offset))
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    async def truncate_fully_and_start_at(self, offset: int) -> None:
        async with self.log.io_lock:
            await asyncio.to_thread(_fsync_paths, self.log.truncate_fully_and_start_at(offset))
        self.high_watermark = offset

    # ------------------------------------------------------------------ reads

    @property
    def last_stable_offset(self) -> int:
        """min(HW, first offset of a transaction not yet stable): where read_committed reads stop."""
        return self.log.last_stable_offset(self.high_watermark)

    def read(self, offset: int, max_bytes: int, committed_only: bool = True,
             read_committed: bool = False, min_one_batch: bool = True) -> FetchedData:
        """Bytes from `offset`; consumers read below the HW, followers up to the LEO. Without
        `min_one_batch` nothing is read when the first batch is larger than `max_bytes`.

        read_committed readers read below the last stable offset and get the transactions
        aborted in what they read (Kafka's LocalLog.read with includeAbortedTxns): an empty
        list when there is nothing to read, None for the other readers.
        """
        stable = self.last_stable_offset
        limit = stable if read_committed else self.high_watermark if committed_only else self.log.log_end_offset
        found = self.log.read(offset, max_bytes, limit, min_one_batch)
        aborted = self.log.aborted_transactions_in(offset, found) if read_committed else None
        return FetchedData(self.high_watermark, stable, self.log.log_start_offset, found, aborted)

    def recently_written(self, offset: int) -> bool:
        """Whether a read from `offset` starts in the last `RECENT_BYTES` of the log, or in records
        written at most `RECENT_S` ago: bytes written moments ago (a follower or consumer at the
        tail, or a follower that many produces in flight keep megabytes behind), taken as in the
        page cache without asking the kernel (a mmap, mincore and munmap per read, which at the
        tail cost a follower's fetch more than the copy)."""
        marks, now = self._end_marks, self.clock()
        while marks and marks[0][0] < now - RECENT_S:
            marks.popleft()
        if marks and offset >= marks[0][1]:
            return True
        segment = self.log.active_segment
        return offset >= segment.base_offset and segment.size - segment.offset_index.lookup(offset) <= RECENT_BYTES

    def _mark_log_end(self) -> None:
        """Before an append: note the log end every `_RECENT_MARK_S`, so that `recently_written`
        knows where the records of the last `RECENT_S` begin (those from a mark taken at time t
        on were written at t or later; truncated and written again, later still)."""
        marks, now = self._end_marks, self.clock()
        if not marks or now - marks[-1][0] >= _RECENT_MARK_S:
            marks.append((now, self.log.log_end_offset))
            while marks[0][0] < now - RECENT_S:
                marks.popleft()

    def wake_on_data(self, waiter: asyncio.Future[None]) -> None:
        """Complete `waiter` the next time the HW or the LEO moves. A fetch waiting on many
        partitions hands them all one future (no task per partition) and `forget_waiter`s it."""
        self._data_waiters.add(waiter)

    def forget_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._data_waiters.discard(waiter)

    def add_watch(self, watch: Any) -> None:
        """Call `watch.changed(self)` each time the HW, the LEO or the state moves, for as long as
        `watch` lives (a follower fetch session's `delayed_fetch.ChangeWatch`)."""
        live = [ref for ref in self._watches if ref() is not None]
        if not any(ref() is watch for ref in live):
            live.append(weakref.ref(watch))
        self._watches = live

    def _wake(self) -> None:
        waiters, self._data_waiters = self._data_waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        for ref in self._watches:
            if (watch := ref()) is not None:
                watch.changed(self)
        self._wake_replication_waiters()
        self._changed.set()
        self._changed = asyncio.Event()

    def __repr__(self) -> str:
        return f"{self.topic}-{self.index}"



def _fsync_paths(paths: list[str]) -> None:
    for path in paths:
        fsync_path(path)
