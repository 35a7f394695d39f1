"""Log cleaner throughput: how fast compaction rewrites a log, in MB of log read per second.

    .venv/bin/python bench/cleaner_bench.py [--mb 200] [--record-size 1000] [--keys 10000]
                                            [--batch 100] [--codecs none,gzip,snappy,lz4,zstd]

For each codec: writes `--mb` MB of `--record-size`-byte records, `--batch` records per batch,
cycling over `--keys` keys, into a fresh compacted PartitionLog (64 MiB segments) in a temporary
directory, rolls the active segment, and times one LogCleaner cleaning of the whole log (building
the key -> latest offset map, rewriting every batch that lost records with its codec, fsyncing
the cleaned segments and swapping them in). In process, no broker and no network: the number is
the cleaner's own. Values are half random, half zeros, so the codecs have something to do.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import tempfile
import time

from logbus.config import BrokerConfig, log_config
from logbus.protocol.records import (
    HEADER_SIZE,
    build_batch,
    iter_raw_records,
    read_header,
    rebuild_batch,
)
from logbus.storage.cleaner import LogCleaner
from logbus.storage.log import PartitionLog, now_ms

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
SEGMENT_BYTES = 64 << 20
MB = 1_000_000


def make_batch(keys: list[bytes], values: list[bytes], codec: int) -> bytes:
    """One batch with the given records, compressed with `codec` (through the cleaner's own encoder)."""
    plain = build_batch(list(zip(keys, values, strict=True)), now_ms())
    if codec == 0:
        return plain
    header = read_header(plain)
    records = list(iter_raw_records(plain[HEADER_SIZE:], header.record_count))
    return rebuild_batch(dataclasses.replace(header, attributes=header.attributes | codec), records)


def fill(log: PartitionLog, args: argparse.Namespace, codec: int) -> tuple[int, int]:
    """Append about args.mb MB of records; returns (records, uncompressed record bytes)."""
    rng = random.Random(7)
    half = args.record_size // 2
    batches = max(1, args.mb * MB // (args.record_size * args.batch))
    for number in range(batches):
        first = number * args.batch
        keys = [b"key-%08d" % ((first + i) % args.keys) for i in range(args.batch)]
        values = [rng.randbytes(half) + bytes(args.record_size - half) for _ in range(args.batch)]
        batch = bytearray(make_batch(keys, values, codec))
        log.append(batch, [read_header(batch)], leader_epoch=0)
    log.roll()
    return batches * args.batch, batches * args.batch * args.record_size


def bench_codec(args: argparse.Namespace, name: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="logbus-cleaner-bench-") as data_dir:
        config = log_config(BrokerConfig({"log.cleanup.policy": "compact", "log.segment.bytes": str(SEGMENT_BYTES)}))
        log = PartitionLog(os.path.join(data_dir, "bench-0"), "bench", 0, config)
        log.load(0, 0, True)
        records, raw_bytes = fill(log, args, CODECS[name])
        cleaner = LogCleaner(data_dir, {("bench", 0): log})
        plan = cleaner.plan(("bench", 0), log, now_ms())
        assert plan is not None, "the log is not cleanable"
        began = time.perf_counter()
        assert asyncio.run(cleaner.clean(plan)) == 1, "the cleaning was not swapped in"
        seconds = time.perf_counter() - began
        cleaner.stop()
        stats = cleaner.stats
        return {
            "records": records, "record_mb": raw_bytes / MB, "log_mb": stats.bytes_read / MB,
            "cleaned_mb": stats.bytes_written / MB, "removed": stats.records_removed, "seconds": seconds,
            "log_mb_per_s": stats.bytes_read / MB / seconds, "record_mb_per_s": raw_bytes / MB / seconds,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="record bytes to write (MB)")
    parser.add_argument("--record-size", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100, help="records per batch")
    parser.add_argument("--codecs", default="none,zstd", help=f"comma-separated, of {','.join(CODECS)}")
    args = parser.parse_args()
    print(f"{args.mb} MB of {args.record_size}-byte records over {args.keys} keys, {args.batch} per batch")
    columns = ("log MB", "cleaned MB", "removed", "seconds", "log MB/s", "record MB/s")
    print(f"{'codec':8} " + " ".join(f"{column:>11}" for column in columns))
    for name in args.codecs.split(","):
        r = bench_codec(args, name)
        print(f"{name:8} {r['log_mb']:11.1f} {r['cleaned_mb']:11.1f} {r['removed']:11d} {r['seconds']:11.2f} "
              f"{r['log_mb_per_s']:11.1f} {r['record_mb_per_s']:11.1f}", flush=True)


if __name__ == "__main__":
    main()
