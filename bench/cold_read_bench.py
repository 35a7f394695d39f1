"""Does a lagging consumer reading a cold backlog slow down other clients' produce?

    .venv/bin/python bench/cold_read_bench.py [--backlog-mb 512] [--seconds 10] [--sendfile never]

Starts one logbus broker (logbus.testing) on a fresh data dir, writes a backlog of 1 KB records
to topic `backlog`, fsyncs its segment files and drops them from the page cache
(posix_fadvise DONTNEED, which needs no privileges), so that reading them goes to the disk.
Then it measures a control producer's latency (one 100-byte record at a time, acks=1, each
waited for) on topic `control`: first alone, then while a consumer in another process reads
the cold backlog from offset 0 as fast as it can. Reports p50/p99/max latency of both phases
and the reader's MB/s. Target (issue 11): control p99 under 20 ms while the backlog is read.
`--sendfile` sets the broker's socket.sendfile (loopback readers copy by default).
Loopback only; every loop is bounded by a deadline.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logbus.testing import running_broker

QUIET = {"log_level": 0}
RECORD = 1000

READER = """
import sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, end = sys.argv[1], int(sys.argv[2])
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cold", "enable.auto.commit": False,
                     "log_level": 0})
consumer.assign([TopicPartition("backlog", 0, 0)])
began, seen, size, deadline = time.perf_counter(), 0, 0, time.monotonic() + 300
while seen < end and time.monotonic() < deadline:
    for message in consumer.consume(10000, 0.5):
        if message.error() is None:
            seen += 1
            size += len(message.value())
print(seen, size, time.perf_counter() - began, flush=True)
consumer.close()
"""


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    topics = [NewTopic("backlog", 1, 1, config={"segment.bytes": str(128 * 1024 * 1024)}), NewTopic("control", 1, 1)]
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result(30)


def create_offsets_topic(bootstrap: str) -> None:
    """Have the reader's group coordinator (and `__consumer_offsets`) exist before measuring: its
    creation is not what this benchmark measures."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cold", **QUIET})
    try:
        consumer.committed([TopicPartition("backlog", 0)], timeout=60)
    finally:
        consumer.close()


def write_backlog(bootstrap: str, megabytes: int) -> int:
    count = megabytes * 1024 * 1024 // RECORD
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000, **QUIET,
    })
    payload = os.urandom(RECORD)
    for i in range(count):
        while True:
            try:
                producer.produce("backlog", payload)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0, "backlog not acknowledged"
    return count


def make_cold(directory: str) -> int:
    """fsync the backlog's files and drop their pages from the page cache; returns the bytes."""
    total = 0
    for path in glob.glob(os.path.join(directory, "backlog-0", "*")):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total


def cached_fraction(directory: str) -> float | None:
    """Share of the backlog's .log pages in the page cache (fincore from util-linux, if present)."""
    paths = glob.glob(os.path.join(directory, "backlog-0", "*.log"))
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE", *paths],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [tuple(map(int, line.split())) for line in out.splitlines() if line.strip()]
    size = sum(s for _, s in rows)
    return sum(r for r, _ in rows) / size if size else None


def control_latencies(bootstrap: str, seconds: float, stop_early: subprocess.Popen | None = None) -> list[float]:
    """Milliseconds per acknowledged record, one record in flight at a time, for `seconds`."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, **QUIET})
    payload = b"c" * 100
    producer.produce("control", payload)
    producer.flush(10)  # connection and metadata outside the measurement
    latencies = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and (stop_early is None or stop_early.poll() is None):
        began = time.perf_counter()
        producer.produce("control", payload)
        assert producer.flush(10) == 0, "control record not acknowledged"
        latencies.append((time.perf_counter() - began) * 1000)
        time.sleep(0.002)
    return latencies


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "count": len(ordered),
        "p50_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "max_ms": round(ordered[-1], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backlog-mb", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--sendfile", default="remote", choices=("remote", "always", "never"))
    parser.add_argument("--warm", action="store_true", help="leave the backlog in the page cache (a baseline)")
    parser.add_argument("--py-spy", metavar="RAW", help="sample the broker during the read into this file (py-spy)")
    args = parser.parse_args()
    with running_broker(config={"socket.sendfile": args.sendfile}) as broker:
        create_topics(broker.bootstrap)
        count = write_backlog(broker.bootstrap, args.backlog_mb)
        create_offsets_topic(broker.bootstrap)
        alone = summary(control_latencies(broker.bootstrap, args.seconds))
        cold_bytes = make_cold(broker.data_dir) if not args.warm else 0
        cached = cached_fraction(broker.data_dir)
        reader = subprocess.Popen([sys.executable, "-c", READER, broker.bootstrap, str(count)],
                                  stdout=subprocess.PIPE, text=True)
        if args.py_spy:
            subprocess.Popen(["py-spy", "record", "--idle", "--threads", "--format", "raw", "-r", "250", "-d", "4",
                              "-p", str(broker.process.pid), "-o", args.py_spy], stdout=subprocess.DEVNULL)
        try:
            during = summary(control_latencies(broker.bootstrap, args.seconds, stop_early=reader))
            out, _ = reader.communicate(timeout=300)
        finally:
            if reader.poll() is None:
                reader.kill()
        seen, size, took = out.split()
        result = {
            "backlog_mb": round(cold_bytes / 2**20, 1), "cached_before_read": cached,
            "sendfile": args.sendfile, "control_alone": alone, "control_during_cold_read": during,
            "reader": {"records": int(seen), "mb_per_s": round(int(size) / 2**20 / float(took), 1),
                       "seconds": round(float(took), 2)},
        }
    print(json.dumps(result, indent=2))
    return 0 if during["p99_ms"] < 20 else 1


if __name__ == "__main__":
    sys.exit(main())
