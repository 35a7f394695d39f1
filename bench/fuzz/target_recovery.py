"""Fuzz target: opening a partition whose segment file holds arbitrary bytes.

Recovery (after a crash, and again at a clean open with the indexes it wrote) must never raise,
and what it keeps must be a valid log: whole batches with intact CRCs, offsets increasing and
indexable, and a log end offset right after the last batch. Each input is tried as is and with
its batches' CRCs made valid, so mutations reach the offset and length rules.
"""

from __future__ import annotations

import os
import tempfile

from bench.fuzz.target_batches import SEEDS as BATCH_SEEDS
from bench.fuzz.target_batches import with_valid_crcs
from logbus.config import BrokerConfig, log_config
from logbus.protocol.records import batch_is_intact, build_batch, iter_headers
from logbus.storage.log import PartitionLog
from logbus.storage.segment import MAX_RELATIVE_OFFSET, segment_name

CONFIG = log_config(BrokerConfig(), {"index.interval.bytes": "64"})


def _segment(*bases: int) -> bytes:
    return b"".join(build_batch([(b"k", b"v%d" % base)] * 2, 1_700_000_000_000, base_offset=base) for base in bases)


SEEDS: list[bytes] = [_segment(0, 2, 4), _segment(0, 2) + BATCH_SEEDS[2], b"".join(BATCH_SEEDS)]


def fuzz_one(data: bytes) -> None:
    _check(data)
    _check(with_valid_crcs(data))


def _check(data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz-recovery-") as root:
        directory = os.path.join(root, "t-0")
        os.makedirs(directory)
        with open(os.path.join(directory, segment_name(0) + ".log"), "wb") as handle:
            handle.write(data)
        end = _open_and_verify(directory, clean=False)
        assert _open_and_verify(directory, clean=True) == end, "a clean open disagrees with recovery"


def _open_and_verify(directory: str, clean: bool) -> int:
    log = PartitionLog(directory, "t", 0, CONFIG)
    try:
        log.load(0, 0, clean_shutdown=clean)
        for segment in log.segments:
            _verify_segment(segment.path, segment.base_offset, segment.next_offset)
        return log.log_end_offset
    finally:
        log.close_files()


def _verify_segment(path: str, base_offset: int, next_offset: int) -> None:
    with open(path, "rb") as handle:
        kept = handle.read()
    expected = base_offset
    size = 0
    for header in iter_headers(kept):
        assert batch_is_intact(kept, header), "a kept batch fails its CRC"
        assert header.base_offset >= expected, "offsets go back"
        assert 0 <= header.last_offset - base_offset <= MAX_RELATIVE_OFFSET, "an offset the index cannot hold"
        expected = header.next_offset
        size += header.size
    assert size == len(kept), "bytes kept after the last whole batch"
    assert next_offset == expected, "the log end offset is not right after the last batch"
