"""How long a broker's log manager takes to load N partition logs, and what they hold open.

    PYTHONPATH=src .venv/bin/python bench/log_load_bench.py [--partitions 3000] [--reps 3]
        [--segments 2] [--producers 1] [--profile] [--dir /dev/shm]

In process, no broker: N partitions of one topic get `--segments` segments of a few records
each, written by `--producers` idempotent producers (0: records without a producer id), and
are closed cleanly (`LogManager.shutdown`, which writes `.kafka_cleanshutdown`, and each log's
producer snapshot at its end; every log also has its `leader-epoch-checkpoint`): a broker
stopped with SIGTERM after idempotent produce traffic. Then each repetition loads them all as a
starting broker does (`open`, then `load_logs`, in the I/O threads), once after that clean
shutdown and once as after a SIGKILL (no marker; the recovery points of the checkpoint written
at the shutdown, so only the active segments are recovered), and reports seconds, CPU
milliseconds per log (the process's, every thread: the threads share one interpreter lock, so
CPU, not wall time, bounds the loading), open descriptors and RSS growth per log. `--profile`
prints the top cProfile entries of one more load of each kind, loaded one log after the other
on the main thread (cProfile sees only its own thread). The part of a broker restart spent
loading logs (issue 25); the rest (ZooKeeper, imports) is in bench/scale_bench.py.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from logbus.config import BrokerConfig, log_config  # noqa: E402
from logbus.protocol.records import build_batch, validate_batches  # noqa: E402
from logbus.storage.manager import CLEAN_SHUTDOWN_FILE, LogManager  # noqa: E402

TOPIC = "load"
RECORD = b"r" * 200


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def populate(data_dir: str, partitions: int, segments: int, producers: int) -> None:
    """Every partition: `segments` segments of 4 batches each (from `producers` idempotent
    producers in turn, their sequences in order), then a clean shutdown."""
    config = log_config(BrokerConfig(), {"segment.bytes": str(4 * (len(RECORD) + 100))})
    now = int(time.time() * 1000)

    def batch(i: int) -> bytes:
        if not producers:
            return build_batch([(None, RECORD)], now)
        return build_batch([(None, RECORD)], now, producer_id=1000 + i % producers, producer_epoch=0,
                           base_sequence=i // producers)

    async def write() -> None:
        manager = LogManager(data_dir)
        manager.open(0, "bench")
        for p in range(partitions):
            log_ = manager.load_log(TOPIC, p, config)
            for i in range(4 * segments):
                raw = batch(i)
                log_.append(bytearray(raw), validate_batches(raw), 0)
        await manager.shutdown()

    asyncio.run(write())


def load(data_dir: str, partitions: int, clean: bool, profile: cProfile.Profile | None) -> dict[str, float]:
    """Load every log as a starting broker; seconds, descriptors and RSS kept per log."""
    marker = os.path.join(data_dir, CLEAN_SHUTDOWN_FILE)
    if clean:
        open(marker, "w").close()  # noqa: SIM115 - an empty marker file
    elif os.path.exists(marker):
        os.unlink(marker)
    config = log_config(BrokerConfig(), {})
    result: dict[str, float] = {}

    async def run() -> None:
        gc.collect()
        fds_before, rss_before = fds(), rss_kib()
        began, cpu_began = time.perf_counter(), time.process_time()
        if profile is not None:
            profile.enable()
        manager = LogManager(data_dir)
        manager.open(0, "bench")
        if profile is None:
            await manager.load_logs([(TOPIC, p, config) for p in range(partitions)])
        else:
            for p in range(partitions):
                manager.load_log(TOPIC, p, config)
            profile.disable()
        result["load_s"] = time.perf_counter() - began
        result["cpu_ms_per_log"] = (time.process_time() - cpu_began) * 1000 / partitions
        result["fds_per_log"] = (fds() - fds_before) / partitions
        result["rss_kib_per_log"] = (rss_kib() - rss_before) / partitions
        await manager.shutdown()

    asyncio.run(run())
    return result


def summary(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--segments", type=int, default=2)
    parser.add_argument("--producers", type=int, default=1,
                        help="idempotent producers writing each partition (0: records without a producer id)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--dir", default=None, help="where the data dir goes (default: the system temp dir)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="logbus-load-", dir=args.dir)
    try:
        data_dir = os.path.join(root, "data")
        began = time.perf_counter()
        populate(data_dir, args.partitions, args.segments, args.producers)
        print(f"populated {args.partitions} logs x {args.segments} segments, {args.producers} producers each, "
              f"in {time.perf_counter() - began:.1f} s; load average {os.getloadavg()}")
        for clean in (True, False):
            kind = "clean" if clean else "after SIGKILL"
            runs = [load(data_dir, args.partitions, clean, None) for _ in range(args.reps)]
            figures = {key: summary([run[key] for run in runs]) for key in runs[0]}
            print(f"{kind}: {figures}; load average {os.getloadavg()}")
            if args.profile:
                profile = cProfile.Profile()
                load(data_dir, args.partitions, clean, profile)
                pstats.Stats(profile).sort_stats("tottime").print_stats(30)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
