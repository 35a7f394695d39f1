"""Kafka's checkpoint files: a version line, a count line, then one entry per line.

`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
`replication-offset-checkpoint` in the data dir hold `<topic> <partition> <offset>` lines;
each partition's `leader-epoch-checkpoint` holds `<epoch> <start offset>` lines. Writes go
to a temporary file that is fsynced and renamed over the old one, so a crash leaves either
the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

VERSION = 0


def write_lines(path: str, entries: Iterable[str]) -> None:
    lines = list(entries)
    body = f"{VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(body)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_lines(path: str) -> list[list[str]]:
    """Entries of a checkpoint file split on spaces; [] when absent or unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return []
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        return []
    count = int(lines[1])
    return [line.split() for line in lines[2 : 2 + count]]


def write_offsets(path: str, offsets: dict[tuple[str, int], int]) -> None:
    write_lines(path, (f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())))


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, p, o in read_lines(path)}


def write_epochs(path: str, epochs: list[tuple[int, int]]) -> None:
    write_lines(path, (f"{epoch} {start}" for epoch, start in epochs))


def read_epochs(path: str) -> list[tuple[int, int]]:
    return [(int(epoch), int(start)) for epoch, start in read_lines(path)]
