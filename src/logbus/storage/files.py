"""Replacing a small file atomically: write a temporary file, rename it over the old one.

A crash leaves either the old or the new file, never a torn one. With `sync`, the temporary
file is fsynced before the rename and its directory after it, so once `replace_file` returns the
new content survives a power cut; without, `fsync_file` makes it durable later (off the event
loop). Checkpoints, producer-state snapshots and the embedded metadata store all write this way.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os


def replace_file(path: str, text: str, sync: bool = True) -> None:
    """Replace `path` with `text`; a failed write removes its temporary file."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_path(os.path.dirname(path) or ".")


def read_small_file(path: str) -> bytes:
    """The whole content of a small file (a checkpoint, a producer snapshot) in raw system calls:
    a text-mode `open` builds three file objects, a cost loading 10,000 logs pays twice per log.
    Raises OSError (FileNotFoundError when absent)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def fsync_file(path: str) -> None:
    """Make a file written with `sync=False` durable: its bytes, then its directory entry."""
    fsync_path(path)
    fsync_path(os.path.dirname(path) or ".")


def fsync_path(path: str) -> None:
    """fsync a file or a directory by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _libc_syncfs() -> ctypes._CFuncPtr | None:
    """Linux's syncfs(2), or None where the C library has none (macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return libc.syncfs
    except (OSError, AttributeError, TypeError):
        return None


_SYNCFS = _libc_syncfs()


def syncfs_available() -> bool:
    return _SYNCFS is not None


def syncfs(path: str) -> None:
    """Write back every dirty file of the file system holding `path` and wait for it (one
    syscall for what would be thousands of fsyncs; since Linux 5.8 it reports a writeback error
    of any file there, as fsync would). Raises OSError on failure."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _SYNCFS(fd) != 0:  # type: ignore[misc]
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
    finally:
        os.close(fd)
