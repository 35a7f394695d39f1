"""Opening a partition's log from disk: Kafka's LogLoader.

Leftover temporary files are removed, a compaction swap that a crash cut short is completed,
each segment is opened, and after an unclean shutdown the segments past the recovery point are
recovered (framing, CRC and offsets checked, a torn or corrupt tail cut, indexes rebuilt; the
segments after a cut are deleted: they were never flushed). A clean start still checks each
segment's tail after its last index entry; the time indexes are read and checked on first use
(`LogSegment.max_timestamp`). The directory is listed once: the listing tells every step which
files are there. Then the leader epochs are read (from the checkpoint,
or back from the batches past the recovery point when it was not fsynced before a crash) and the
producer state is rebuilt from the last snapshot plus the log after it. A recovered segment's
`.txnindex` is rebuilt by that replay, which then starts from a snapshot at or before the
segment (Kafka's recoverSegment rebuilds the producer state up to it).

The loader works on the `PartitionLog` it is given, before that log serves anything.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import logging
import os
from typing import TYPE_CHECKING

from ..protocol.records import BatchHeader
from .epoch_cache import LEADER_EPOCH_CHECKPOINT
from .segment import LogSegment, segment_name

if TYPE_CHECKING:
    from .log import PartitionLog

logger = logging.getLogger(__name__)

LEFTOVER_SUFFIXES = (".tmp", ".deleted", ".cleaned")


class LogLoader:
    def __init__(self, log: PartitionLog) -> None:
        self.log = log

    def load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> int:
        """Open the segments on disk; recover those past the recovery point after a crash.

        Returns how many bytes recovery cut from torn or corrupt tails.
        """
        listing = _listing_or_new_dir(self.log.directory)
        if listing is None:
            return self._start_empty(recovery_point, log_start_offset, clean_shutdown)
        names = self._remove_leftovers(listing)
        if any(name.endswith(".log.swap") for name in names):
            self._complete_swaps()
            names = _listdir(self.log.directory)
        self.log.producer_state.listed(names)
        listed = set(names)
        bases = self._segment_bases(names)
        for base in bases or [max(log_start_offset, 0)]:
            self.log._add_segment(base, names=listed)
        cut, first_recovered = self._load_segments(recovery_point, clean_shutdown)
        if cut and len(self.log.segments) > 1:
            self._drop_empty_tail_segments()
        self.log.log_start_offset = max(log_start_offset, self.log.segments[0].base_offset)
        self.log.recovery_point = self.log.log_end_offset if clean_shutdown else min(
            recovery_point, self.log.log_end_offset
        )
        self._load_epochs(self.log.log_end_offset if clean_shutdown else self.log.recovery_point,
                          LEADER_EPOCH_CHECKPOINT in listed)
        self._rebuild_producer_state(first_recovered)
        return cut

    def _start_empty(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> int:
        """A log whose directory was just made (a replica new on this broker): one empty segment,
        and nothing to list, recover, or read epochs or producer state from. A CreateTopics of
        10,000 partitions creates this many logs on each broker, and reading back each empty new
        directory cost about a third of its creation."""
        self.log._add_segment(max(log_start_offset, 0), new=True)
        self.log.producer_state.started_empty()
        self.log.log_start_offset = self.log.segments[0].base_offset
        self.log.recovery_point = self.log.log_end_offset if clean_shutdown else min(
            recovery_point, self.log.log_end_offset)
        return 0

    def _remove_leftovers(self, listing: list[str]) -> list[str]:
        """Delete the temporary files a crash left (`.tmp`, `.deleted`, `.cleaned`); the other
        names in the directory. One listing serves the whole load (segments, their index files,
        producer snapshots, epoch checkpoint): thousands of partitions each listed several times
        (a glob per kind of file) made most of a broker's start."""
        names = []
        for name in listing:
            if name.endswith(LEFTOVER_SUFFIXES):
                os.unlink(os.path.join(self.log.directory, name))
            else:
                names.append(name)
        return names

    def _segment_bases(self, names: list[str]) -> list[int]:
        """Base offsets of the `<20 digits>.log` files; any other `.log` file is left alone."""
        bases = []
        for name in names:
            if not name.endswith(".log"):
                continue
            stem = name[:-4]
            if stem.isdigit() and stem.isascii():
                bases.append(int(stem))
            else:
                logger.warning("%s: ignoring %s, not a segment file name", self.log.directory, name)
        return sorted(bases)

    def _load_segments(self, recovery_point: int, clean_shutdown: bool) -> tuple[int, int | None]:
        """Load each segment, recovering those past the recovery point and those with bad indexes.

        As in Kafka, corruption found past the recovery point ends the log there: the segments
        after it were never flushed and are deleted. A flushed segment whose indexes had to be
        rebuilt only loses its own bad tail. Returns how many bytes were cut and the base offset
        of the first segment recovered (None when none was).
        """
        cut = 0
        first_recovered = None
        for i, segment in enumerate(self.log.segments):
            next_base = self.log.segments[i + 1].base_offset if i + 1 < len(self.log.segments) else None
            needs_recovery = not clean_shutdown and (next_base is None or next_base > recovery_point)
            if not needs_recovery and segment.load_state():
                continue
            if not needs_recovery:
                logger.warning("%s: rebuilding the indexes of segment %d", self.log.directory, segment.base_offset)
            segment_cut = segment.recover()
            segment.txn_index.reset()
            first_recovered = segment.base_offset if first_recovered is None else first_recovered
            cut += segment_cut
            if segment_cut and needs_recovery:
                later = self.log.segments[i + 1 :]
                cut += sum(later_segment.size for later_segment in later)
                self.log._delete_segments(later)
                break
        return cut, first_recovered

    def _load_epochs(self, durable_to: int, checkpointed: bool) -> None:
        """The leader epochs, from the checkpoint when it knows the last batch's epoch.

        Otherwise the checkpoint was not fsynced before a crash: its entries that start below
        `durable_to` (the recovery point, which a flush moves only after fsyncing it) are kept
        and the later epoch changes are read from the batch headers. A damaged file (possible
        after an OS crash) is rebuilt from every batch. `checkpointed`: the directory listing
        holds the file (otherwise it is not looked for).
        """
        cache = self.log.epoch_cache
        try:
            found = cache.read_file() if checkpointed else []
        except ValueError as exc:
            logger.warning("%s: rebuilding the leader epochs from the log: %s", self.log.directory, exc)
            found, durable_to = [], -1
        last = self._last_header()
        known = last is None or last.partition_leader_epoch < 0 or (
            bool(found) and found[-1][0] >= last.partition_leader_epoch
        )
        if durable_to >= 0 and (known or durable_to >= self.log.log_end_offset):
            cache.entries = [(epoch, start) for epoch, start in found if start <= self.log.log_end_offset]
            return
        epochs = [(epoch, start) for epoch, start in found if start < durable_to]
        for _, header in self.log._batches_from_offset(max(durable_to, 0)):
            if header.partition_leader_epoch > (epochs[-1][0] if epochs else -1):
                epochs.append((header.partition_leader_epoch, header.base_offset))
        if epochs != found:
            cache.replace(epochs)
        else:
            cache.entries = epochs

    def _last_header(self) -> BatchHeader | None:
        """The header of the log's last batch (None for an empty log)."""
        for segment in reversed(self.log.segments):
            if segment.size and segment.last_loaded_batch is not None:
                return segment.last_loaded_batch  # its load read the tail up to there
            if segment.size:
                tail = collections.deque(segment.headers_from(segment.offset_index.lookup(segment.next_offset - 1)), 1)
                return tail[0] if tail else None
        return None

    def _complete_swaps(self) -> None:
        """Finish a cleaner swap that a crash cut short (Kafka's `.swap` recovery).

        A `.swap` segment is complete (it was fsynced as `.cleaned` before the rename), so it
        replaces every segment whose base offset falls in its offset range. Its offset and time
        indexes are rebuilt, as a crash may have left them half renamed. Its `.txnindex` (the
        replaced segments' entries, renamed first) is kept: one already renamed holds the
        same-named file, which otherwise is the first replaced segment's, whose entries the
        swap's include.
        """
        for path in sorted(glob.glob(os.path.join(self.log.directory, "*.log.swap"))):
            base = int(os.path.basename(path).split(".")[0])
            swap = LogSegment(self.log.directory, base, self.log.config.index_interval_bytes, suffix=".swap")
            swap.recover()
            for old in glob.glob(os.path.join(self.log.directory, "*.log")):
                old_base = int(os.path.basename(old)[:-4])
                if base <= old_base < max(swap.next_offset, base + 1):
                    _unlink_segment_files(self.log.directory, old_base, txn_index=old_base != base)
            swap.rename_suffix("")
            swap.close()

    def _drop_empty_tail_segments(self) -> None:
        while len(self.log.segments) > 1 and self.log.segments[-1].size == 0:
            segment = self.log.segments.pop()
            self.log._base_offsets.pop()
            segment.delete()

    def _rebuild_producer_state(self, first_recovered: int | None) -> None:
        """The last snapshot plus the log after it; from before `first_recovered`, when a
        segment was recovered, so that its `.txnindex` is rebuilt too."""
        upto = self.log.log_end_offset if first_recovered is None else min(first_recovered, self.log.log_end_offset)
        self.log.rebuild_producer_state(self.log.producer_state.load_snapshot(upto, listing=False))


def _listing_or_new_dir(directory: str) -> list[str] | None:
    """The names in the log's directory (`_listdir`); None when there was none: it is made.
    (Listing first spares a log found on disk the failed mkdir, and its exception.)"""
    try:
        return _listdir(directory)
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        return None


def _listdir(directory: str) -> list[str]:
    """The names in `directory`, as glob's `*` matches them (no hidden files)."""
    return [name for name in os.listdir(directory) if not name.startswith(".")]


def _unlink_segment_files(directory: str, base_offset: int, txn_index: bool) -> None:
    stem = os.path.join(directory, segment_name(base_offset))
    for extension in (".log", ".index", ".timeindex") + ((".txnindex",) if txn_index else ()):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stem + extension)
