"""In-process unit tests of the storage classes (no broker process): index, segment, log, manager.

They drive `PartitionLog` and `LogManager` directly on a tmp dir, with the clock passed in where
time matters (retention, roll, flush), so that time-dependent behaviour costs no real seconds.
"""

from __future__ import annotations

import struct
import threading

from logbus.storage.index import OffsetIndex

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
