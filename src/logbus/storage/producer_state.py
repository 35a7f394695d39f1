"""Idempotent producer state of one partition: the last five batches per producer id.

A batch from producer (id, epoch) with sequence numbers [first, last] is:
- a duplicate when it equals one of the producer's five cached batches: it is acknowledged
  with the offset it got the first time and not written again;
- in order when first == previous last + 1 (mod 2^31), or when the producer is new to this
  partition, or starts a new epoch at sequence 0;
- otherwise out of order (OUT_OF_ORDER_SEQUENCE_NUMBER), or fenced when its epoch is older
  than the one seen (INVALID_PRODUCER_EPOCH).

The state is snapshotted to `<offset>.snapshot` (JSON) on clean shutdown and segment roll (the
roll's snapshot is written by a worker thread: see storage/jobs.py), and rebuilt after that
offset from the batch headers in the log on start.
"""

from __future__ import annotations

import glob
import json
import os
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from ..protocol.records import NO_PRODUCER_ID, BatchHeader
from .files import replace_file

CACHED_BATCHES = 5
SEQUENCE_WRAP = 1 << 31


class SequenceCheck(Enum):
    OK = "ok"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"
    FENCED = "fenced"


@dataclass(slots=True)
class CachedBatch:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[CachedBatch] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_timestamp: int = -1


class ProducerStateManager:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader) -> tuple[SequenceCheck, CachedBatch | None]:
        """Classify an incoming batch; for duplicates, also the batch it repeats."""
        entry = self.producers.get(header.producer_id)
        if header.producer_id == NO_PRODUCER_ID or entry is None:
            return SequenceCheck.OK, None
        if header.producer_epoch < entry.epoch:
            return SequenceCheck.FENCED, None
        if header.producer_epoch > entry.epoch:
            ok = header.base_sequence == 0
            return (SequenceCheck.OK if ok else SequenceCheck.OUT_OF_ORDER), None
        for cached in entry.batches:
            if cached.first_seq == header.base_sequence and cached.last_seq == header.last_sequence:
                return SequenceCheck.DUPLICATE, cached
        if not entry.batches:
            return SequenceCheck.OK, None
        expected = (entry.batches[-1].last_seq + 1) % SEQUENCE_WRAP
        ok = header.base_sequence == expected
        return (SequenceCheck.OK if ok else SequenceCheck.OUT_OF_ORDER), None

    def update(self, header: BatchHeader) -> None:
        """Record a batch now in the log (headers carry their assigned offsets)."""
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_epoch)
            self.producers[header.producer_id] = entry
        entry.batches.append(
            CachedBatch(
                header.base_sequence, header.last_sequence, header.base_offset,
                header.last_offset, header.max_timestamp,
            )
        )
        entry.last_timestamp = header.max_timestamp

    def forget_after(self, offset: int) -> None:
        """Drop cached batches at or past `offset` (the log was truncated there)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            entry.batches = deque(kept, maxlen=CACHED_BATCHES)
            if not kept:
                del self.producers[pid]

    def drop_snapshots_after(self, offset: int) -> None:
        """Remove snapshots of offsets past `offset` (the log was truncated there)."""
        for snapshot in self._snapshot_offsets():
            if snapshot > offset:
                os.unlink(self._snapshot_path(snapshot))

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        """Forget producers whose last batch is older than `expiration_ms` (by its timestamp, as Kafka)."""
        for pid in [p for p, e in self.producers.items() if now_ms - e.last_timestamp >= expiration_ms]:
            del self.producers[pid]

    # ------------------------------------------------------------------ snapshots

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}.snapshot")

    def write_snapshot(self, offset: int) -> None:
        self.write_snapshot_state(offset, self.snapshot_state())

    def snapshot_state(self) -> dict[str, dict]:
        """The state as snapshotted (taken on the event loop; written later by a worker thread)."""
        return {
            str(pid): {
                "epoch": entry.epoch,
                "last_timestamp": entry.last_timestamp,
                "batches": [
                    [b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp]
                    for b in entry.batches
                ],
            }
            for pid, entry in self.producers.items()
        }

    def write_snapshot_state(self, offset: int, state: dict[str, dict]) -> None:
        """Write `<offset>.snapshot` and drop older snapshots; blocking file work."""
        path = self._snapshot_path(offset)
        replace_file(path, json.dumps(state), sync=False)
        for old in self._snapshot_offsets():
            if old != offset:
                os.unlink(self._snapshot_path(old))

    def _snapshot_offsets(self) -> list[int]:
        names = glob.glob(os.path.join(self.directory, "*.snapshot"))
        return sorted(int(os.path.basename(name).split(".")[0]) for name in names)

    def load_snapshot(self, log_end_offset: int) -> int:
        """Load the newest snapshot not past the log end; returns the offset it covers to."""
        for offset in reversed(self._snapshot_offsets()):
            if offset > log_end_offset:
                os.unlink(self._snapshot_path(offset))
                continue
            try:
                with open(self._snapshot_path(offset), encoding="utf-8") as handle:
                    state = json.load(handle)
            except (OSError, ValueError):
                continue
            self.producers = {}
            for pid, raw in state.items():
                entry = ProducerEntry(raw["epoch"], last_timestamp=raw["last_timestamp"])
                entry.batches.extend(CachedBatch(*b) for b in raw["batches"])
                self.producers[int(pid)] = entry
            return offset
        return 0
