"""A partition's leader epochs (Kafka's LeaderEpochFileCache): which epoch wrote which offsets.

Entries are (leader epoch, start offset), in `leader-epoch-checkpoint` (Kafka's checkpoint
format). A new epoch is written without fsync, on the event loop (two fsyncs cost ~9 ms there);
`unsynced` tells the log's next flush to fsync the file before its recovery point passes the
epoch's start, and recovery reads the epochs past the recovery point back from the batches.
A truncation from the end (a follower cut back to its leader's log) is fsynced before the
follower goes on (in a worker thread): a dropped epoch that came back after a crash would
mislead the next divergence check.
A truncation from the start (retention, DeleteRecords) is flushed like a new epoch: an old
entry that survives a crash only names offsets the log no longer has.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from . import checkpoints

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, directory: str, entries: Iterable[tuple[int, int]] = ()) -> None:
        self.path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        self.entries: list[tuple[int, int]] = list(entries)
        self.unsynced = False  # written since the last fsync

    def read_file(self) -> list[tuple[int, int]]:
        """The checkpoint's entries (ValueError when the file is damaged; [] when there is none)."""
        return [(int(epoch), int(start)) for epoch, start in checkpoints.read_lines(self.path, 2)]

    def replace(self, entries: list[tuple[int, int]], sync: bool = True) -> None:
        """Write `entries` (file first, then memory: a failed write changes nothing)."""
        checkpoints.write_epochs(self.path, entries, sync=sync)
        self.entries = entries

    def assign(self, epoch: int, start_offset: int) -> None:
        """A new epoch starts at `start_offset` (nothing when it is not newer than the latest).
        Raises OSError (a full disk) with nothing changed."""
        if self.entries and self.entries[-1][0] >= epoch:
            return
        self.replace([*self.entries, (epoch, start_offset)], sync=False)
        self.unsynced = True

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers it.

        The latest epoch ends at the log end. An older one ends where the next epoch starts and
        is answered with the largest known epoch at or below it, or itself when it predates every
        known epoch. An epoch above the latest, or any epoch of a log with none, is unknown: (-1, -1).
        """
        if not self.entries or epoch < 0:
            return -1, -1
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        later = [(e, start) for e, start in self.entries if e > epoch]
        if not later:
            return -1, -1
        earlier = [e for e, _ in self.entries if e <= epoch]
        return (earlier[-1] if earlier else epoch), later[0][1]

    def epoch_for(self, offset: int) -> int:
        """The epoch under which `offset` was written (-1 when unknown)."""
        found = -1
        for epoch, start in self.entries:
            if start > offset:
                break
            found = epoch
        return found

    def start_of(self, epoch: int) -> int | None:
        """Where `epoch` begins (None when this log has no batch of it)."""
        return next((start for e, start in self.entries if e == epoch), None)

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget the epochs that start at or after `end_offset` (the log was cut there). The
        caller fsyncs `path` off the event loop before it goes on (PartitionLog.truncate_to)."""
        kept = [(epoch, start) for epoch, start in self.entries if start < end_offset]
        if kept != self.entries:
            self.replace(kept, sync=False)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: earlier epochs go, the one holding it starts there."""
        kept = [(epoch, start) for epoch, start in self.entries if start >= start_offset]
        before = [(epoch, start) for epoch, start in self.entries if start < start_offset]
        if before and (not kept or kept[0][1] > start_offset):
            kept.insert(0, (before[-1][0], start_offset))
        if kept != self.entries:
            self.replace(kept, sync=False)
            self.unsynced = True
