"""Produce and consume throughput of one logbus broker, driven by confluent-kafka.

    .venv/bin/python bench/broker_bench.py [--records 1000000] [--sizes 100,1000] [--profile]

Starts brokers (logbus.testing) on fresh data dirs and measures their start time (target: listening
within 1 s of launch) and idle RSS,
then for each record size: produces N records to a 1-partition topic (acks=1, no compression,
large batches) and consumes them back from the beginning, once with confluent-kafka and once
with kcat. Next to each rate it reports the broker's own CPU seconds for the phase: when they
are far below the wall time, the client, not the broker, is the limit. With --profile py-spy
(`pip install py-spy`) samples the broker and writes a flame graph SVG to bench/results/.
Loopback only; every loop is bounded by the record count and a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial

from confluent_kafka import Consumer, Producer, TopicPartition

from logbus.testing import running_broker

RESULTS = os.path.join(os.path.dirname(__file__), "results")
DEADLINE_S = 300
KCAT_DEADLINE_S = 60
QUIET = {"log_level": 0}


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, topic: str, count: int, size: int) -> float:
    """Produce `count` records of `size` bytes; returns seconds until all are acknowledged."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000, **QUIET,
    })
    payload = os.urandom(size)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(DEADLINE_S)
    if remaining:
        raise RuntimeError(f"{remaining} records unacknowledged")
    return time.perf_counter() - started


def consume(bootstrap: str, topic: str, count: int) -> float:
    """Read `count` records from offset 0; returns seconds taken."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
        # librdkafka stops prefetching at 100k queued records and then backs off for
        # fetch.queue.backoff.ms (1 s): with small records that, not the broker, sets the pace.
        "queued.min.messages": 2_000_000, "fetch.queue.backoff.ms": 10, **QUIET,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    started = time.perf_counter()
    deadline = started + DEADLINE_S
    while seen < count and time.perf_counter() < deadline:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < count:
        raise RuntimeError(f"consumed {seen} of {count}")
    return elapsed


def consume_kcat(bootstrap: str, topic: str, count: int) -> float:
    """Read the topic from the beginning to its end with kcat (C, librdkafka); seconds taken."""
    started = time.perf_counter()
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%o\\n",
         "-X", "fetch.max.bytes=52428800", "-X", "max.partition.fetch.bytes=10485760",
         "-X", "queued.min.messages=2000000"],
        capture_output=True, timeout=KCAT_DEADLINE_S, check=True,
    )
    elapsed = time.perf_counter() - started
    seen = done.stdout.count(b"\n")
    if seen < count:
        raise RuntimeError(f"kcat consumed {seen} of {count}")
    return elapsed


def measured(pid: int, phase: Callable[[], float], count: int, size: int) -> dict[str, float]:
    """Run a phase; its rate, and the broker CPU seconds it cost."""
    cpu_before = cpu_seconds(pid)
    seconds = phase()
    return {
        "records_s": round(count / seconds),
        "mb_s": round(count * size / seconds / 1e6, 1),
        "wall_s": round(seconds, 2),
        "broker_cpu_s": round(cpu_seconds(pid) - cpu_before, 2),
    }


def start_times(runs: int) -> dict[str, float]:
    """Launch-to-listening time of a broker on an empty data dir: median, min and max of `runs`."""
    times = []
    for _ in range(runs):
        with running_broker() as broker:
            times.append(broker.started_in_s)
    return {"median": round(statistics.median(times), 3), "min": round(min(times), 3), "max": round(max(times), 3)}


def profile(pid: int, seconds: int, name: str) -> subprocess.Popen | None:
    """Attach py-spy to the broker for `seconds` (None when py-spy is not installed)."""
    try:
        return subprocess.Popen(
            ["py-spy", "record", "-p", str(pid), "-d", str(seconds), "-o",
             os.path.join(RESULTS, f"{name}.svg"), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    results: dict[str, object] = {"start_s": start_times(5), "start_target_s": 1.0}
    print(json.dumps({"start_s": results["start_s"]}), flush=True)
    with running_broker() as broker:
        pid = broker.process.pid
        time.sleep(0.5)  # let the idle broker settle before reading its RSS (a measurement, not a sync)
        results["idle_rss_mib"] = round(rss_mib(pid), 1)
        for size in (int(s) for s in args.sizes.split(",")):
            topic = f"bench-{size}"
            count = args.records if size <= 100 else max(args.records // 4, 1)
            spy = profile(pid, 15, f"produce-{size}") if args.profile else None
            row: dict[str, object] = {"records": count}
            row["produce"] = measured(pid, partial(produce, broker.bootstrap, topic, count, size), count, size)
            if spy:
                spy.wait()
            for name, reader in (("consume_confluent", consume), ("consume_kcat", consume_kcat)):
                row[name] = measured(pid, partial(reader, broker.bootstrap, topic, count), count, size)
            row["rss_after_mib"] = round(rss_mib(pid), 1)
            results[f"{size}B"] = row
            print(json.dumps({size: results[f"{size}B"]}), flush=True)
    print(json.dumps(results, indent=1))
    with open(os.path.join(RESULTS, "broker_bench.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
