"""Replication costs and failover times of a logbus cluster (issue 12), measured side by side.

    .venv/bin/python bench/cluster_bench.py [--reps 3] [--out bench/results/cluster_bench.json]

One real ZooKeeper and three brokers on loopback; rdkafka_performance (built by
`python -m bench.suite --install-only`) produces. In each repetition, alternating:

- produce 100 B and 1 KB into an RF1 topic with acks=1 and into an RF3 topic with acks=all
  (target: RF3 acks=all >= 0.5x RF1 acks=1, Kafka's published ratio is 421k/821k = 0.51);
- end-to-end latency at 10k records/s into the RF3 topic with acks=all (target p99 < 20 ms);
- failover: SIGKILL the leader of an RF3 partition (zookeeper.session.timeout.ms 6000) and time
  until an acks=all produce succeeds again (target <= 8 s); SIGTERM it (controlled shutdown) and
  time the same, counting failed sends (target <= 1 s, none failed);
- two brokers against one: the same produce load into 2 partitions led by one broker, or by
  two (does a cluster on a 2-core machine use both cores?).

Latency and failover are measured first, before the produce runs write and free their
gigabytes: for ~20 s after those the latency p99 measured 28-48 ms (the third repetition, ~20 s
on, 12 ms again) against 12-15 ms before, with no collector pause in any process, and SIGTERM
failover 1.3 s against 0.15 s; most likely the VM's cost of touching memory the guest has
freed, measured for page-cache writes below.

Every produce run starts after `sync` and its topic is deleted (files gone) before the next, so
each run writes into page cache that earlier runs gave back, as a broker at steady state under
retention does. On the Firecracker VM this was measured on, writing into page cache the guest
has not recently used costs ~3.5 ms of system time per MB (1.2 GB into fresh pages: 4-5 s of
system time; into recycled pages: 0.5 s), which without the deletion charged each later run for
all the data written before it, and RF3 three times over. Each produce row also records the CPU
seconds (user, system) of every broker and of the client.
"""

from __future__ import annotations

import glob
import os
import resource
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.one_broker import write_results  # noqa: E402
from bench.options import bench_parser, run_date  # noqa: E402
from bench.suite import kafka_load  # noqa: E402
from bench.suite.install import CACHE_DIR  # noqa: E402
from bench.suite.runner import WorkerProcess, run_worker  # noqa: E402
from logbus.testing import Cluster, running_cluster  # noqa: E402

TOOL = os.path.join(CACHE_DIR, "bin", "rdkafka_performance")
COUNTS = {100: 2_000_000, 1000: 400_000}
QUIET = {"log_level": 0}


def create(cluster: Cluster, topic: str, partitions: int, replication: int,
           assignments: list[list[int]] | None = None) -> None:
    client = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    new = NewTopic(topic, partitions, replica_assignment=assignments) if assignments \
        else NewTopic(topic, partitions, replication)
    client.create_topics([new])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = client.list_topics(topic, timeout=5).topics[topic]
        if found.error is None and all(p.leader >= 0 and len(p.isrs) == len(p.replicas)
                                       for p in found.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{topic} not ready")


def leader_of(cluster: Cluster, topic: str) -> int:
    found = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET}).list_topics(topic, timeout=5)
    return found.topics[topic].partitions[0].leader


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far, from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def measured_produce(cluster: Cluster, topic: str, size: int, count: int, acks: str) -> dict[str, Any]:
    """One produce run into `topic` (then deleted): records/s and everyone's CPU seconds."""
    os.sync()
    pids = {f"broker {b}": p.process.pid for b, p in cluster.brokers.items() if p.running}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rate = kafka_load.produce(TOOL, cluster.bootstrap, topic, size, count, acks, 600)["records_s"]
    client = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {name: [round(a - b, 2) for a, b in zip(cpu_seconds(pid), before[name], strict=True)]
           for name, pid in pids.items()}
    cpu["client"] = [round(client.ru_utime - client_before.ru_utime, 2),
                     round(client.ru_stime - client_before.ru_stime, 2)]
    drop(cluster, topic)
    return {"records_s": rate, "cpu_user_system_s": cpu}


def drop(cluster: Cluster, topic: str) -> None:
    """Delete `topic` and wait until no broker has its files any more."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})  # alive until the answer
    admin.delete_topics([topic])[topic].result(30)
    pattern = os.path.join(cluster.workdir, "broker-*", "data", f"{topic}-*")
    deadline = time.monotonic() + 30
    while glob.glob(pattern):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} still on disk: {glob.glob(pattern)}")
        time.sleep(0.1)


def produce_ratio(cluster: Cluster, reps: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for size, count in COUNTS.items():
        rf1, rf3, runs = [], [], []
        for rep in range(reps):
            for replicas, acks, into in ((1, "1", rf1), (3, "all", rf3)):
                topic = f"p{size}-rf{replicas}-{rep}"
                create(cluster, topic, 1, replicas)
                run = measured_produce(cluster, topic, size, count, acks)
                into.append(run["records_s"])
                runs.append({"replicas": replicas, "acks": acks, **run})
        ceiling = statistics.median(kernel_ceiling(one, three, count)
                                    for one, three in zip(runs[::2], runs[1::2], strict=True))
        results[f"{size} B"] = {"rf1_acks1": statistics.median(rf1), "rf3_acks_all": statistics.median(rf3),
                                "ratio": statistics.median(rf3) / statistics.median(rf1),
                                "kernel_ceiling": round(ceiling, 3), "runs": runs}
        print(f"produce {size} B: RF1 acks=1 {statistics.median(rf1):,.0f}/s, RF3 acks=all "
              f"{statistics.median(rf3):,.0f}/s, ratio {results[f'{size} B']['ratio']:.2f} (at best "
              f"{ceiling:.2f} if replication cost the brokers no user-space CPU)", flush=True)
    return results


def kernel_ceiling(rf1_run: dict[str, Any], rf3_run: dict[str, Any], count: int) -> float:
    """The RF3/RF1 ratio two fully busy cores could give if replicating cost the brokers only
    its kernel work: the client's CPU, the RF1 leader's whole CPU (an RF3 leader does all of
    that too) and the system time the RF3 brokers spent beyond the RF1 leader's (sending the
    bytes over loopback, receiving them, writing them twice more), over the core count."""
    rf1_cpu = {name: sum(cpu) for name, cpu in rf1_run["cpu_user_system_s"].items() if name != "client"}
    rf1_leader = max(rf1_cpu, key=lambda name: rf1_cpu[name])
    rf1_leader_system = rf1_run["cpu_user_system_s"][rf1_leader][1]
    rf3_system = sum(cpu[1] for name, cpu in rf3_run["cpu_user_system_s"].items() if name != "client")
    least = sum(rf3_run["cpu_user_system_s"]["client"]) + rf1_cpu[rf1_leader] + rf3_system - rf1_leader_system
    return count / rf1_run["records_s"] / (least / (os.cpu_count() or 1))


def latency(cluster: Cluster, reps: int) -> dict[str, Any]:
    p99s, p999s, p50s = [], [], []
    for rep in range(reps):
        topic = f"latency-{rep}"
        create(cluster, topic, 1, 3)
        where = {"bootstrap": cluster.bootstrap, "topic": topic}
        consumer = WorkerProcess("kafka_latency_consume", seconds=8, **where)
        consumer.ready(30)
        run_worker("kafka_latency_produce", 70, size=100, rate=10_000, seconds=5, acks="all", **where)
        result = consumer.result(70)
        p50s.append(result["p50_ms"])
        p99s.append(result["p99_ms"])
        p999s.append(result["p999_ms"])
    print(f"end-to-end at 10k/s, RF3 acks=all: p50 {statistics.median(p50s):.2f} ms, p99 "
          f"{statistics.median(p99s):.2f} ms, p99.9 {statistics.median(p999s):.2f} ms", flush=True)
    return {"p50_ms": statistics.median(p50s), "p99_ms": statistics.median(p99s),
            "p999_ms": statistics.median(p999s), "runs": p99s}


def failover(cluster: Cluster, reps: int) -> dict[str, Any]:
    kills, terms, failed_after_term = [], [], []
    for rep in range(reps):
        for how, into in (("kill", kills), ("term", terms)):
            topic = f"failover-{how}-{rep}"
            create(cluster, topic, 1, 3)
            seconds, failed = _time_failover(cluster, topic, how)
            into.append(seconds)
            if how == "term":
                failed_after_term.append(failed)
    print(f"failover, longest time without an acknowledged acks=all record: SIGKILL {statistics.median(kills):.2f} s "
          f"(max {max(kills):.2f}), SIGTERM {statistics.median(terms):.2f} s (max {max(terms):.2f}); failed sends "
          f"around SIGTERM {sum(failed_after_term)}", flush=True)
    return {"sigkill_s": statistics.median(kills), "sigkill_max_s": max(kills), "sigterm_s": statistics.median(terms),
            "sigterm_max_s": max(terms), "sigterm_failed_sends": sum(failed_after_term), "runs": [kills, terms]}


def _time_failover(cluster: Cluster, topic: str, how: str) -> tuple[float, int]:
    """The longest time without an acknowledged acks=all record around the signal (probes every
    10 ms, from the signal until 3 s after the broker is gone), and the failed sends meanwhile."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0, "message.timeout.ms": 60000, **QUIET})
    producer.produce(topic, b"warm", partition=0)
    producer.flush(30)
    broker = cluster.brokers[leader_of(cluster, topic)]
    acked: list[float] = []
    failed: list[Any] = []
    began = time.monotonic()
    process = broker.process
    if how == "kill":
        broker.kill()
    else:
        process.send_signal(15)
    gone_at = began if how == "kill" else None
    while time.monotonic() - began < 60:
        producer.produce(topic, b"probe", partition=0,
                         on_delivery=lambda e, m: (failed if e else acked).append(e or time.monotonic()))
        producer.poll(0.01)
        if gone_at is None and process.poll() is not None:
            gone_at = time.monotonic()
        if gone_at is not None and acked and acked[-1] > gone_at + 3:
            break
    producer.flush(60)
    if how == "term":
        process.wait(60)
        broker.process = None
    broker.start()
    stamps = [began] + [t for t in acked if t >= began]
    return max(b - a for a, b in zip(stamps, stamps[1:], strict=False)), len(failed)


def two_brokers(cluster: Cluster, reps: int) -> dict[str, Any]:
    one, two = [], []
    for rep in range(reps):
        for assignments, into in (([[1], [1]], one), ([[1], [2]], two)):
            topic = f"cores-{len({a[0] for a in assignments})}-{rep}"
            create(cluster, topic, 2, 1, assignments)
            into.append(measured_produce(cluster, topic, 100, COUNTS[100], "1")["records_s"])
    print(f"2 partitions on one broker {statistics.median(one):,.0f}/s, on two brokers {statistics.median(two):,.0f}/s "
          f"({statistics.median(two) / statistics.median(one):.2f}x)", flush=True)
    return {"one_broker": statistics.median(one), "two_brokers": statistics.median(two),
            "ratio": statistics.median(two) / statistics.median(one), "runs": [one, two]}


def main() -> int:
    parser = bench_parser(__doc__, "cluster_bench.json")
    parser.add_argument("--parts", default="latency,failover,produce,two_brokers",
                        help="which measurements (comma-separated)")
    args = parser.parse_args()
    if not os.path.exists(TOOL):
        print(f"{TOOL} is missing: run `python -m bench.suite --install-only` first", file=sys.stderr)
        return 2
    config = {"zookeeper.session.timeout.ms": "6000", "min.insync.replicas": "2",
              "log.flush.offset.checkpoint.interval.ms": "60000"}
    results: dict[str, Any] = {"date": run_date(), "reps": args.reps,
                               "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()[0]}
    parts = {"produce": produce_ratio, "latency": latency, "failover": failover, "two_brokers": two_brokers}
    with running_cluster(3, config) as cluster:
        for name in args.parts.split(","):
            results[name] = parts[name](cluster, args.reps)
    write_results(args.out, results)
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
