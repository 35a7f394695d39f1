"""Produce latency acks=all against acks=1 at 1 and many partitions (issue 25, data plane).

    .venv/bin/python bench/acks_all_latency.py [--reps 3] [--partitions 1,1000] [--rate 200]
        [--seconds 4] [--code before=/tmp/old/src --code after=src] [--out bench/results/acks_all_latency.json]

One real ZooKeeper and three brokers on loopback (RF 3, min.insync.replicas 2,
replica.lag.time.max.ms at Kafka's 30 s) per code tree
and repetition; the trees (`--code name=path`, put on the brokers' PYTHONPATH; by default this
checkout's `src`) take turns, so a before/after comparison shares the machine's load. Per
partition count, a topic of that many partitions gets one record into each partition first
(acks=all, not timed); then an acks=1 and an acks=all producer (confluent-kafka, linger.ms 0)
each write 100-byte records round-robin over its partitions at `--rate` records/s for
`--seconds`, one after the other, timing each record from produce() to its delivery report.
Reported per case: p50 and p99 in ms, and the brokers' CPU (all three, user and system) per
record in ms (on a loaded machine the latency follows the CPU the brokers get; their CPU per
record does not), min/median/max over the repetitions. Every wait is bounded.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.one_broker import cpu_seconds, write_results  # noqa: E402
from bench.options import bench_parser, code_on_path, code_trees, run_date  # noqa: E402
from logbus.testing import Cluster, running_cluster  # noqa: E402

QUIET = {"log_level": 0}
FLUSH_S = 120  # every producer's records are answered by then, or the run fails
VALUE = b"x" * 100


def timed_sends(bootstrap: str, topic: str, partitions: int, acks: str, rate: int, seconds: float) -> list[float]:
    """Milliseconds from produce() to the delivery report of each record written round-robin
    over `partitions` at `rate` records/s for `seconds`."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                         "message.timeout.ms": FLUSH_S * 1000, **QUIET})
    latencies: list[float] = []
    failures: list[str] = []

    def sent(at: float) -> Any:
        def done(error: KafkaError | None, _message: object) -> None:
            if error is not None:
                failures.append(error.name())
            latencies.append((time.monotonic() - at) * 1000)
        return done

    began, written, total = time.monotonic(), 0, int(rate * seconds)
    while written < total:
        due = min(total, int(rate * (time.monotonic() - began)) + 1)
        while written < due:
            producer.produce(topic, VALUE, partition=written % partitions, on_delivery=sent(time.monotonic()))
            written += 1
        producer.poll(0.001)
    if producer.flush(FLUSH_S):
        raise RuntimeError(f"{topic} acks={acks}: records unanswered after {FLUSH_S} s")
    if failures:
        raise RuntimeError(f"{topic} acks={acks}: {len(failures)} failed sends, e.g. {failures[0]}")
    return latencies


def create(bootstrap: str, topic: str, partitions: int) -> None:
    """An RF3 topic, once every partition has a leader and a full ISR (bounded by FLUSH_S)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": FLUSH_S * 1000, **QUIET})
    admin.create_topics([NewTopic(topic, partitions, 3)], request_timeout=FLUSH_S)[topic].result(FLUSH_S)
    deadline = time.monotonic() + FLUSH_S
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=10).topics[topic]
        if found.error is None and len(found.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == len(p.replicas) for p in found.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic} not ready after {FLUSH_S} s")


def warm(bootstrap: str, topic: str, partitions: int) -> None:
    """One acknowledged acks=all record in every partition (leaders known, ISRs settled)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **QUIET})
    for partition in range(partitions):
        producer.produce(topic, b"warm", partition=partition)
    if producer.flush(FLUSH_S):
        raise RuntimeError(f"{topic}: warm-up records unanswered")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def brokers_cpu(cluster: Cluster) -> float:
    """CPU seconds (user and system) the brokers used so far, all together."""
    return sum(cpu_seconds(b.process.pid) for b in cluster.brokers.values() if b.process is not None)


def one_rep(cluster: Cluster, counts: list[int], rate: int, seconds: float, rep: int) -> dict[str, dict[str, float]]:
    result = {}
    for partitions in counts:
        topic = f"latency-{partitions}-{rep}"
        create(cluster.bootstrap, topic, partitions)
        warm(cluster.bootstrap, topic, partitions)
        for acks in ("1", "all"):
            cpu_before = brokers_cpu(cluster)
            latencies = timed_sends(cluster.bootstrap, topic, partitions, acks, rate, seconds)
            cpu_ms = (brokers_cpu(cluster) - cpu_before) * 1000 / len(latencies)
            result[f"{partitions} partitions acks={acks}"] = {
                "p50_ms": round(statistics.median(latencies), 2), "p99_ms": round(percentile(latencies, 0.99), 2),
                "broker_cpu_ms_per_record": round(cpu_ms, 2)}
    return result


def summary(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, list[float]]]:
    """Per case and figure: [min, median, max] over the repetitions."""
    return {case: {figure: [min(v), statistics.median(v), max(v)]
                   for figure in runs[0][case] for v in [[run[case][figure] for run in runs]]}
            for case in runs[0]}


def main() -> int:
    parser = bench_parser(__doc__, "acks_all_latency.json", code=True)
    parser.add_argument("--partitions", default="1,1000")
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    trees = code_trees(args)
    counts = [int(n) for n in args.partitions.split(",")]
    config = {"min.insync.replicas": "2", "log.flush.offset.checkpoint.interval.ms": "60000",
              "replica.lag.time.max.ms": "30000"}  # Kafka's default: no ISR churn on a loaded machine
    runs: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in trees}
    for rep in range(args.reps):
        for name, src in trees.items():
            with code_on_path(src), running_cluster(3, config) as cluster:
                runs[name].append(one_rep(cluster, counts, args.rate, args.seconds, rep))
            print(f"rep {rep} {name}: {runs[name][-1]}", flush=True)
    results: dict[str, Any] = {"date": run_date(), "reps": args.reps,
                               "rate": args.rate, "seconds": args.seconds, "load_average": os.getloadavg()[0],
                               "code": trees, "summary": {name: summary(r) for name, r in runs.items()},
                               "runs": runs}
    for name, cases in results["summary"].items():
        for case, figures in cases.items():
            print(f"{name:8} {case:28} p50 {figures['p50_ms']} ms  p99 {figures['p99_ms']} ms  broker CPU "
                  f"{figures['broker_cpu_ms_per_record']} ms/record")
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
