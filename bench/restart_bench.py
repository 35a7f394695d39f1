"""A broker's restart at a given partition count, without load (issue 25).

    PYTHONPATH=src .venv/bin/python bench/restart_bench.py --partitions 3000 [--brokers 3] [--reps 3]
        [--out bench/results/restart_bench.json]

A fresh ZooKeeper cluster per repetition, as bench/scale_bench.py makes it (RF 3; one topic per
100 partitions). Then a non-controller broker is stopped with SIGTERM (a clean shutdown) and
restarted, and again with SIGKILL (its logs are recovered at the start); each time: seconds until
it listens, until its logs are loaded (`logs loaded`: it serves its partitions; the same moment
for a build that loads before it listens), until it is back in every ISR, and its open
descriptors and RSS once back, per replica it hosts; for the SIGTERM, how long the stopping
broker took to exit and how many partitions it still led then; for the restart, the CPU seconds
the broker used until its logs were loaded (on this shared machine the wall-clock figures
follow the load; the CPU figure much less). No producer runs: the figures are the start-up's own
(scale_bench.py measures a restart under load). The sources are byte-compiled first, as `./dev`
does: with PYTHONDONTWRITEBYTECODE set every broker start would compile them again.
"""

from __future__ import annotations

import compileall
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import logbus  # noqa: E402
from bench.one_broker import write_results  # noqa: E402
from bench.scale_bench import (  # noqa: E402
    Deadline,
    broker_start_deadline,
    commit,
    created_cluster,
    live,
    not_in_isr,
    not_led_by,
    parse,
    process_figures,
    stop_gracefully,
    view_of,
    wait_everywhere,
)
from logbus.testing import BrokerProcess, Cluster  # noqa: E402

KINDS = ("sigterm", "sigkill")


def stop(cluster: Cluster, broker: BrokerProcess, kind: str, deadline: Deadline) -> dict[str, float]:
    """Stop `broker` as `kind` says; return once every partition is led by a live broker. For a
    SIGTERM: seconds until it exited, and the partitions it still led then (another broker's view)."""
    began = time.monotonic()
    figures: dict[str, float] = {}
    if kind == "sigterm":
        figures["exit_s"] = round(stop_gracefully(broker, deadline), 3)
        left = view_of(live(cluster)[0]).partitions.values()
        figures["led_at_exit"] = sum(1 for p in left if p.leader == broker.broker_id)
    else:
        broker.kill()
    alive = {b.broker_id for b in live(cluster)}
    wait_everywhere(cluster, not_led_by(alive), deadline, began, "partitions without a live leader")
    return figures


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds the process has used."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def restart(cluster: Cluster, broker: BrokerProcess, deadline: Deadline) -> dict[str, float]:
    began = time.monotonic()
    broker.start()
    loaded = time.monotonic() - began
    cpu_until_loaded = cpu_s(broker.process.pid)
    in_isr = wait_everywhere(cluster, not_in_isr(broker.broker_id), deadline, began,
                             f"partitions without broker {broker.broker_id} in their ISR")
    replicas = sum(1 for p in view_of(broker).partitions.values() if broker.broker_id in p.replicas)
    figures = process_figures(broker.process.pid)
    return {"listening_s": round(getattr(broker, "listening_in_s", loaded), 3), "loaded_s": round(loaded, 3),
            "in_every_isr_s": round(in_isr, 3), "cpu_s_until_loaded": round(cpu_until_loaded, 2),
            "replicas": replicas, **figures,
            "fds_per_replica": round(figures["fds"] / replicas, 3),
            "rss_kib_per_replica": round(figures["rss_mib"] * 1024 / replicas, 2)}


def measure_rep(args: Any) -> dict[str, Any]:
    result: dict[str, Any] = {}
    try:
        with created_cluster(args, Deadline(args.deadline, "create"), result) as cluster:
            view = view_of(live(cluster)[0])
            target = cluster.brokers[next(b for b in cluster.brokers if b != view.controller_id)]
            for kind in KINDS:
                deadline = Deadline(args.deadline, f"restart after {kind}")
                stopped = stop(cluster, target, kind, deadline)
                result[kind] = {**stopped, **restart(cluster, target, deadline)}
    except (TimeoutError, RuntimeError) as exc:
        result["failed"] = str(exc)
    return result


def summary(reps: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        for figure in ("exit_s", "led_at_exit", "listening_s", "loaded_s", "in_every_isr_s", "cpu_s_until_loaded",
                       "fds_per_replica", "rss_kib_per_replica"):
            values = [rep[kind][figure] for rep in reps if figure in rep.get(kind, {})]
            if values:
                found[f"{kind}_{figure}"] = {"min": min(values), "median": statistics.median(values),
                                             "max": max(values), "measured_in": len(values)}
    return found


def main() -> int:
    argv = sys.argv[1:]
    if not any(arg.startswith("--out") for arg in argv):
        argv += ["--out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "restart_bench.json")]
    args = parse(argv)
    compileall.compile_dir(os.path.dirname(logbus.__file__), quiet=1)
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit(),
                               "args": {k: v for k, v in vars(args).items() if k != "out"},
                               "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()[0], "reps": []}
    with broker_start_deadline(args.deadline):
        for number in range(args.reps):
            results["reps"].append({**measure_rep(args), "load_average_1m": round(os.getloadavg()[0], 1)})
            print(f"repetition {number + 1}: {results['reps'][-1]}", flush=True)
    results["summary"] = summary(results["reps"])
    for name, figures in results["summary"].items():
        print(f"{name:34} {figures['min']:>10} {figures['median']:>10} {figures['max']:>10}")
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
