"""Kafka's checkpoint files: a version line, a count line, then one entry per line.

`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
`replication-offset-checkpoint` in the data dir hold `<topic> <partition> <offset>` lines;
each partition's `leader-epoch-checkpoint` holds `<epoch> <start offset>` lines. Writes go
to a temporary file that is fsynced and renamed over the old one, so a crash leaves either
the old or the new file, never a torn one. A partition's leader-epoch checkpoint is written
on the event loop without the fsyncs (`sync=False`) and made durable by `files.fsync_file` with the
log's next flush (see `PartitionLog._track_epoch`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from .files import read_small_file, replace_file

log = logging.getLogger(__name__)

VERSION = 0
T = TypeVar("T")


class MalformedCheckpointError(ValueError):
    pass


def write_lines(path: str, entries: Iterable[str], sync: bool = True) -> None:
    """Replace the file atomically; `sync=False` leaves both fsyncs to `files.fsync_file`."""
    lines = list(entries)
    replace_file(path, f"{VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines), sync)


def read_lines(path: str, fields: int) -> list[list[str]]:
    """Entries of a checkpoint file split on spaces; [] when absent.

    Raises MalformedCheckpointError when the version, count or an entry is not as written.
    """
    try:
        lines = read_small_file(path).decode("utf-8").splitlines()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError:
        raise MalformedCheckpointError(f"{path}: not text") from None
    if len(lines) < 2 or lines[0].strip() != str(VERSION) or not lines[1].strip().isdigit():
        raise MalformedCheckpointError(f"{path}: bad version or count line")
    entries = [line.split() for line in lines[2 : 2 + int(lines[1])]]
    if len(entries) != int(lines[1]) or any(len(entry) != fields for entry in entries):
        raise MalformedCheckpointError(f"{path}: entries do not match the count or have the wrong fields")
    return entries


def _read_parsed(path: str, fields: int, parse: Callable[..., T]) -> list[T]:
    """Parsed entries; a malformed file is logged and treated as absent.

    Every checkpoint is a hint a broker can do without: a missing recovery point means more
    recovery, a missing log start offset means the first segment's base offset. Refusing to
    start over one damaged file would be worse.
    """
    try:
        return [parse(*entry) for entry in read_lines(path, fields)]
    except ValueError as exc:  # MalformedCheckpointError, or a field that is not a number
        log.warning("ignoring checkpoint file %s: %s", path, exc)
        return []


def write_offsets(path: str, offsets: dict[tuple[str, int], int]) -> None:
    write_lines(path, (f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())))


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    return dict(_read_parsed(path, 3, lambda t, p, o: ((t, int(p)), int(o))))


def write_epochs(path: str, epochs: list[tuple[int, int]], sync: bool = True) -> None:
    write_lines(path, (f"{epoch} {start}" for epoch, start in epochs), sync)

