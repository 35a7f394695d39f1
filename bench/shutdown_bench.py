"""How long a broker's log manager takes to shut down N logs that each received records.

    PYTHONPATH=src .venv/bin/python bench/shutdown_bench.py [--partitions 3333] [--reps 3]

In process, no broker: N partitions get three records each (so each has records past its
recovery point, as the logs of a broker under load), then `LogManager.shutdown` runs; prints the
wall and CPU seconds of each repetition and min/median/max. The log-closing part of a broker's
SIGTERM (issue 25). With `--value-bytes` 200 (the default) each log stays within one index
interval and gets no producer snapshot at close; with 2000, each gets one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from logbus.config import BrokerConfig, log_config  # noqa: E402
from logbus.protocol.records import build_batch, validate_batches  # noqa: E402
from logbus.storage.manager import LogManager  # noqa: E402


def shut_down(partitions: int, value_bytes: int) -> tuple[float, float]:
    """Wall and CPU seconds of one shutdown of `partitions` logs holding three records each."""
    raw = build_batch([(None, b"r" * value_bytes)], int(time.time() * 1000))
    headers = validate_batches(raw)
    data_dir = tempfile.mkdtemp(prefix="shutdown-bench-")

    async def run() -> tuple[float, float]:
        manager = LogManager(data_dir)
        manager.open(0, "bench")
        config = log_config(BrokerConfig(), {})
        for p in range(partitions):
            log_ = manager.load_log("bench", p, config)
            for _ in range(3):
                log_.append(bytearray(raw), headers, 0)
        before = resource.getrusage(resource.RUSAGE_SELF)
        began = time.perf_counter()
        await manager.shutdown()
        wall = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_SELF)
        return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime

    try:
        return asyncio.run(run())
    finally:
        shutil.rmtree(data_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=3333)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--value-bytes", type=int, default=200)
    args = parser.parse_args()
    walls = []
    for rep in range(args.reps):
        wall, cpu = shut_down(args.partitions, args.value_bytes)
        walls.append(wall)
        print(f"rep {rep}: {args.partitions} logs shut down in {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"wall min/median/max {min(walls):.2f}/{statistics.median(walls):.2f}/{max(walls):.2f} s"
          f" (load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
