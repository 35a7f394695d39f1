"""One share group's state of one partition, on its leader (KIP-932): a sans-I/O state machine.

Records of a share-partition between the share-partition start offset (SPSO, `start_offset`)
and the end offset (SPEO, `end_offset`: the first offset never acquired) are *in flight*, each
in one of Kafka's states:
- Available: may be acquired (again);
- Acquired: delivered to one member, locked for `lock_duration_ms`; its delivery count was
  bumped when it was acquired;
- Acknowledged (accepted) and Archived (rejected, given up after the delivery limit, a gap in
  the log, or below the log start): done.
A record acquired and then released (by the member, by its lock expiring, or because its member
left) becomes Available again, or Archived once its delivery count reached `delivery_count_limit`.
The SPSO moves past the done records at its front; at most `max_record_locks` records are in
flight (records past that are not acquired until the SPSO moves).

Acquisition is driven by what the leader read from the log: `fetch_offset` says where to read
(the first Available record, else the SPEO), `acquire` takes the batches read (their first and
last offsets) and acquires what it may, in whole batches ("batch optimized") or exactly up to the
records asked for. Acknowledgements (`acknowledge`) are checked whole before any applies: every
offset named must be Acquired by the member acknowledging. Time and lock timers come from a
`Clock`; `on_released` is called whenever records became Available (a waiting fetch may take
them).

Persistence (write, then apply; see share_partitions.py): `plan_acknowledge` checks
acknowledgements and says what to write (the state batches of their records' new states, the
records released since the last write, the start offset after them); their records stay
Acquired, and no lock expiry or member release takes them, until `apply_acknowledge` (the write
succeeded) or `abandon` (it failed: nothing changed). `restore` rebuilds a share-partition from
its persisted state: Acquired is never persisted, so what was acquired is Available again with
the delivery count last written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from kio.schema.errors import ErrorCode

from ..coordinator.clock import Clock, Timer
from ..coordinator.share_records import StateBatch, batches_of
from ..errors import KafkaApiError


class RecordState(Enum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """The acknowledge types of ShareFetch/ShareAcknowledge (Renew: ShareFetch/ShareAcknowledge v2)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
PERSISTED = {RecordState.AVAILABLE: 0, RecordState.ACQUIRED: 0, RecordState.ACKNOWLEDGED: 2, RecordState.ARCHIVED: 4}
RESTORED = {0: RecordState.AVAILABLE, 2: RecordState.ACKNOWLEDGED, 4: RecordState.ARCHIVED}
RESTORED_SPAN = 1 << 16  # offsets past the SPSO a restore takes: far past any in-flight window (a bound
# against a damaged or hostile state, whose batches may name 2^62 offsets)


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2000  # group.share.partition.max.record.locks


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Consecutive offsets acquired with the same delivery count (ShareFetch's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One acknowledgement batch: offsets first..last (inclusive), one type for all or one per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]

    def type_of(self, offset: int) -> int:
        return self.types[0] if len(self.types) == 1 else self.types[offset - self.first_offset]


@dataclass(frozen=True, slots=True)
class AckPlan:
    """Checked acknowledgements and what to write before they apply: `writes` (the records'
    persisted states after them, and those of records released since the last write) and the
    start offset after them."""

    member_id: str
    batches: tuple[AckBatch, ...]
    offsets: frozenset[int]
    writes: tuple[StateBatch, ...]
    start_offset: int
    flushed: frozenset[int]  # the released records whose state the write carries


@dataclass(eq=False, slots=True)
class _Lock:
    """The acquisition lock of the records one acquire (or renew) gave one member."""

    member_id: str
    offsets: set[int]
    timer: Timer | None = None


@dataclass(slots=True)
class InFlightRecord:
    state: RecordState
    delivery_count: int = 0
    lock: _Lock | None = field(default=None, repr=False)

    @property
    def member_id(self) -> str | None:
        return self.lock.member_id if self.lock is not None else None


class SharePartition:
    def __init__(self, start_offset: int, config: SharePartitionConfig, clock: Clock,
                 on_released: Callable[[], None] = lambda: None) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.config = config
        self.clock = clock
        self.on_released = on_released
        self.records: dict[int, InFlightRecord] = {}
        self._available: set[int] = set()  # the Available offsets below the SPEO (redeliveries waiting)
        self._pending: set[int] = set()  # offsets of acknowledgements being written
        self.unwritten: set[int] = set()  # offsets released (or archived) since the last write

    @classmethod
    def restore(cls, start_offset: int, batches: Iterable[StateBatch], config: SharePartitionConfig, clock: Clock,
                on_released: Callable[[], None] = lambda: None) -> SharePartition:
        """A share-partition as its persisted state describes it: the offsets between the start
        offset and the last one persisted that no batch names are Available, never delivered."""
        share = cls(start_offset, config, clock, on_released)
        for batch in batches:
            for offset in range(max(batch.first_offset, start_offset), min(batch.last_offset + 1,
                                                                           start_offset + RESTORED_SPAN)):
                share.records[offset] = InFlightRecord(RESTORED.get(batch.delivery_state, RecordState.AVAILABLE),
                                                       batch.delivery_count)
        share.end_offset = max(share.records, default=start_offset - 1) + 1
        for offset in range(start_offset, share.end_offset):
            record = share.records.setdefault(offset, InFlightRecord(RecordState.AVAILABLE))
            if record.state is RecordState.AVAILABLE:
                share._available.add(offset)
        share._advance()
        return share

    # ---------------------------------------------------------------- acquisition

    def fetch_offset(self) -> int | None:
        """Where the log should be read from for the next acquisition: the first Available record,
        else the SPSO's end when it may grow; None when nothing can be acquired now."""
        if self._available:
            return min(self._available)
        return self.end_offset if self.in_flight < self.config.max_record_locks else None

    @property
    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def lag(self, end: int) -> int:
        """The records from the SPSO to `end` (the high watermark) not yet delivered for good:
        KIP-1226's share-partition lag (end - SPSO - the records in flight already done)."""
        done = sum(1 for offset, record in self.records.items() if offset < end and record.state in DONE)
        return max(end - self.start_offset - done, 0)

    def acquire(self, member_id: str, batches: Iterable[tuple[int, int] | tuple[int, int, bool]], max_records: int,
                whole_batches: bool = True) -> list[AcquiredRange]:
        """Acquire for `member_id` what it may of `batches` ((first, last) offsets of the batches
        read from `fetch_offset`, in order, and whether it is a control batch): Available records
        and records never acquired, up to `max_records` (rounded up to a batch's end when
        `whole_batches`) and `max_record_locks` in flight. Offsets between batches (removed by
        compaction) and control batches (transaction markers) are archived as they are passed."""
        acquired: list[int] = []
        cursor = self.fetch_offset()
        for first, last, *control in batches:
            if len(acquired) >= max(max_records, 1):
                break
            if last >= self.end_offset and self.in_flight >= self.config.max_record_locks:
                break
            if cursor is not None:
                self._archive_unread(cursor, first)
            cursor = last + 1
            if control and control[0]:
                self._archive_unread(first, last + 1)
                self._pass(last + 1)
                continue
            for offset in range(max(first, self.start_offset), last + 1):
                if not whole_batches and len(acquired) >= max_records:
                    break
                if self._take(offset):
                    acquired.append(offset)
        if not acquired:
            return []
        lock = _Lock(member_id, set(acquired))
        for offset in acquired:
            self.records[offset].lock = lock
        lock.timer = self.clock.call_later(self.config.lock_duration_ms, self._expire, lock)
        return self._ranges(acquired)

    def _take(self, offset: int) -> bool:
        """Acquire `offset` if it may be: Available, or the next never acquired."""
        if offset >= self.end_offset:
            self._pass(offset)
            self.records[offset] = InFlightRecord(RecordState.AVAILABLE)
            self.end_offset = offset + 1
        record = self.records[offset]
        if record.state is not RecordState.AVAILABLE:
            return False
        self._available.discard(offset)
        record.state = RecordState.ACQUIRED
        record.delivery_count += 1
        return True

    def _archive_unread(self, first: int, end: int) -> None:
        """Available offsets below the SPEO that the log has no record for (compacted away, or a
        control batch): a restored share-partition knows them only as not yet delivered."""
        for offset in range(max(first, self.start_offset), min(end, self.end_offset)):
            record = self.records[offset]
            if record.state is RecordState.AVAILABLE:
                record.state = RecordState.ARCHIVED
                self._available.discard(offset)
                self.unwritten.add(offset)
        self._advance()

    def _pass(self, offset: int) -> None:
        """The offsets from the SPEO to `offset` hold nothing to deliver: archived."""
        for gap in range(self.end_offset, offset):
            self.records[gap] = InFlightRecord(RecordState.ARCHIVED)
        self.end_offset = max(self.end_offset, offset)
        self._advance()

    def _ranges(self, offsets: Sequence[int]) -> list[AcquiredRange]:
        ranges: list[AcquiredRange] = []
        for offset in offsets:
            count = self.records[offset].delivery_count
            if ranges and ranges[-1].last_offset == offset - 1 and ranges[-1].delivery_count == count:
                ranges[-1] = AcquiredRange(ranges[-1].first_offset, offset, count)
            else:
                ranges.append(AcquiredRange(offset, offset, count))
        return ranges

    # ---------------------------------------------------------------- acknowledgement

    def acknowledge(self, member_id: str, batches: Sequence[AckBatch]) -> None:
        """Apply a member's acknowledgements, all or none: KafkaApiError INVALID_REQUEST for a
        malformed batch, INVALID_RECORD_STATE when an offset is not Acquired by `member_id`."""
        for batch in batches:
            self._check(member_id, batch)
        self._apply_all(member_id, batches)

    def plan_acknowledge(self, member_id: str, batches: Sequence[AckBatch]) -> AckPlan:
        """Check a member's acknowledgements as `acknowledge` does and say what to write first;
        their records are held (Acquired) until `apply_acknowledge` or `abandon`."""
        for batch in batches:
            self._check(member_id, batch)
        planned: dict[int, tuple[int, int]] = {}
        done: set[int] = set()
        for batch in batches:
            for offset in range(batch.first_offset, batch.last_offset + 1):
                ack_type = batch.types[0] if len(batch.types) == 1 else batch.type_of(offset)
                if ack_type == AckType.RENEW:
                    continue
                count = self.records[offset].delivery_count
                state = self._acknowledged_state(ack_type, count)
                planned[offset] = (PERSISTED[state], count)
                if state in DONE:
                    done.add(offset)
        flushed, self.unwritten = frozenset(self.unwritten - planned.keys()), set()
        states = {**self._persisted(flushed), **planned}
        offsets = frozenset(o for b in batches for o in range(b.first_offset, b.last_offset + 1))
        self._pending |= offsets
        return AckPlan(member_id, tuple(batches), offsets, batches_of(states), self._start_after(done), flushed)

    def apply_acknowledge(self, plan: AckPlan) -> None:
        """The plan's write succeeded: its acknowledgements apply."""
        self._pending -= plan.offsets
        batches = [b for b in plan.batches if all(o in self.records for o in range(b.first_offset, b.last_offset + 1))]
        self._apply_all(plan.member_id, batches)
        self.unwritten -= plan.offsets  # (what they released is written already)

    def abandon(self, plan: AckPlan) -> None:
        """The plan's write failed: nothing changed; records whose lock ran out meanwhile are released."""
        self._pending -= plan.offsets
        self.unwritten |= plan.flushed
        released = False
        for offset in sorted(plan.offsets):
            record = self.records.get(offset)
            if record is not None and record.lock is not None and record.lock.timer is None:
                released |= self._release(offset, record)
        self._advance()
        if released:
            self.on_released()

    def write_pending(self) -> tuple[tuple[StateBatch, ...], frozenset[int]]:
        """The state batches of the records released since the last write (taken: `unwritten` is
        empty after), and their offsets (to give back with `rewrite` when the write fails)."""
        flushed, self.unwritten = frozenset(self.unwritten), set()
        return batches_of(self._persisted(flushed)), flushed

    def rewrite(self, offsets: Iterable[int]) -> None:
        """Records whose state a failed write carried: the next write carries it again."""
        self.unwritten.update(offsets)

    def _persisted(self, offsets: Iterable[int]) -> dict[int, tuple[int, int]]:
        return {o: (PERSISTED[r.state], r.delivery_count) for o in offsets if (r := self.records.get(o)) is not None}

    def _acknowledged_state(self, ack_type: int, delivery_count: int) -> RecordState:
        if ack_type == AckType.ACCEPT:
            return RecordState.ACKNOWLEDGED
        if ack_type == AckType.RELEASE and delivery_count < self.config.delivery_count_limit:
            return RecordState.AVAILABLE
        return RecordState.ARCHIVED

    def _start_after(self, done: set[int]) -> int:
        """The SPSO once the offsets `done` are done too."""
        offset = self.start_offset
        while offset < self.end_offset and (offset in done or self.records[offset].state in DONE):
            offset += 1
        return offset

    def _apply_all(self, member_id: str, batches: Sequence[AckBatch]) -> None:
        released = False
        for batch in batches:
            for offset in range(batch.first_offset, batch.last_offset + 1):
                released |= self._apply(member_id, offset, batch.type_of(offset))
        self._advance()
        if released:
            self.on_released()

    def _check(self, member_id: str, batch: AckBatch) -> None:
        size = batch.last_offset - batch.first_offset + 1
        if size < 1 or len(batch.types) not in (1, size):
            raise KafkaApiError(ErrorCode.invalid_request, "Invalid acknowledgement batch.")
        if any(t not in AckType._value2member_map_ for t in batch.types):
            raise KafkaApiError(ErrorCode.invalid_request, "Invalid acknowledge type.")
        if batch.first_offset < self.start_offset or batch.last_offset >= self.end_offset:
            raise KafkaApiError(ErrorCode.invalid_record_state,
                                f"Offsets {batch.first_offset}-{batch.last_offset} are not in flight.")
        for offset in range(batch.first_offset, batch.last_offset + 1):
            record = self.records[offset]
            if record.state is not RecordState.ACQUIRED or record.member_id != member_id or offset in self._pending:
                raise KafkaApiError(ErrorCode.invalid_record_state,
                                    f"Offset {offset} is not acquired by member {member_id}.")

    def _apply(self, member_id: str, offset: int, ack_type: int) -> bool:
        """One offset's acknowledgement; True when it became Available."""
        record = self.records[offset]
        if ack_type == AckType.RENEW:
            self._unlock(offset, record)
            lock = _Lock(member_id, {offset})
            record.lock = lock
            lock.timer = self.clock.call_later(self.config.lock_duration_ms, self._expire, lock)
            return False
        if ack_type == AckType.RELEASE:
            return self._release(offset, record)
        self._unlock(offset, record)
        record.state = RecordState.ACKNOWLEDGED if ack_type == AckType.ACCEPT else RecordState.ARCHIVED
        return False

    # ---------------------------------------------------------------- release

    def release_member(self, member_id: str) -> None:
        """The member left (or its session ended): its acquired records are released."""
        released = False
        for offset in range(self.start_offset, self.end_offset):
            record = self.records[offset]
            if record.state is RecordState.ACQUIRED and record.member_id == member_id and offset not in self._pending:
                released |= self._release(offset, record)
        self._advance()
        if released:
            self.on_released()

    def _expire(self, lock: _Lock) -> None:
        """A lock's duration passed: what it still holds is released."""
        lock.timer = None
        released = False
        for offset in sorted(lock.offsets):
            record = self.records.get(offset)
            if record is not None and record.lock is lock and offset not in self._pending:
                released |= self._release(offset, record)
        self._advance()
        if released:
            self.on_released()

    def _release(self, offset: int, record: InFlightRecord) -> bool:
        self._unlock(offset, record)
        self.unwritten.add(offset)
        if record.delivery_count >= self.config.delivery_count_limit:
            record.state = RecordState.ARCHIVED
            return False
        record.state = RecordState.AVAILABLE
        self._available.add(offset)
        return True

    @staticmethod
    def _unlock(offset: int, record: InFlightRecord) -> None:
        lock, record.lock = record.lock, None
        if lock is None:
            return
        lock.offsets.discard(offset)
        if not lock.offsets and lock.timer is not None:
            lock.timer.cancel()
            lock.timer = None

    # ---------------------------------------------------------------- the start offset

    def _advance(self) -> None:
        """The SPSO moves past the done records at the front."""
        while self.start_offset < self.end_offset and self.records[self.start_offset].state in DONE:
            del self.records[self.start_offset]
            self.start_offset += 1

    def move_log_start(self, log_start: int) -> None:
        """Records below the log start (deleted by retention or DeleteRecords) are gone: the SPSO
        moves up to it, archiving what was in flight below it."""
        if log_start <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start, self.end_offset)):
            record = self.records.pop(offset)
            self._unlock(offset, record)
            self._available.discard(offset)
        self.start_offset = log_start
        self.end_offset = max(self.end_offset, log_start)

    def close(self) -> None:
        """Cancel every lock timer (the share-partition leaves memory)."""
        for offset, record in list(self.records.items()):
            self._unlock(offset, record)
