"""What replication costs per replicated MB, and RF3 acks=all against RF1 acks=1 (issue 25).

    .venv/bin/python bench/replication_cost.py [--reps 3] [--records 200000] [--size 1000]
        [--code before=/tmp/old/src --code after=src] [--out bench/results/replication_cost.json]

One real ZooKeeper and three brokers on loopback per code tree and repetition (the trees take
turns, as in `bench/acks_all_latency.py`); rdkafka_performance (`python -m bench.suite
--install-only`) produces `--records` records of `--size` bytes into a one-partition RF1 topic
with acks=1, then into an RF3 one with acks=all (`bench/cluster_bench.py`'s `measured_produce`:
each run after `sync`, its topic deleted after). Per pair of runs:

- `user_ms_per_mb`: the brokers' user CPU the RF3 run took beyond the RF1 run's, per MB
  produced (the leader's extra work plus both followers');
- `ratio`: RF3 acks=all records/s over RF1 acks=1 records/s;
- `cores_busy`: in the RF3 run, the CPU (user and system) of the brokers and the client over
  its wall time, in cores of the machine's two (idle time in the replication round trip shows
  as less than 2).

Reported min/median/max over the repetitions. A run whose produce fails (rdkafka_performance
reports failed deliveries: acks=all sends time out on a machine loaded by other work) is listed
under `failed` and left out of the figures.
"""

from __future__ import annotations

import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.cluster_bench import TOOL, create, measured_produce  # noqa: E402
from bench.one_broker import write_results  # noqa: E402
from bench.options import bench_parser, code_on_path, code_trees, run_date  # noqa: E402
from bench.suite.kafka_load import LoadError  # noqa: E402
from logbus.testing import running_cluster  # noqa: E402


def user_seconds(run: dict[str, Any]) -> float:
    return sum(cpu[0] for name, cpu in run["cpu_user_system_s"].items() if name != "client")


def pair_figures(rf1: dict[str, Any], rf3: dict[str, Any], records: int, size: int) -> dict[str, float]:
    megabytes = records * size / 1e6
    wall = records / rf3["records_s"]
    busy = sum(sum(cpu) for cpu in rf3["cpu_user_system_s"].values())
    return {"user_ms_per_mb": round((user_seconds(rf3) - user_seconds(rf1)) * 1000 / megabytes, 2),
            "ratio": round(rf3["records_s"] / rf1["records_s"], 3),
            "cores_busy": round(busy / wall, 2),
            "rf1_records_s": round(rf1["records_s"]), "rf3_records_s": round(rf3["records_s"])}


def one_rep(records: int, size: int, rep: int) -> dict[str, Any]:
    config = {"min.insync.replicas": "2", "log.flush.offset.checkpoint.interval.ms": "60000"}
    with running_cluster(3, config) as cluster:
        runs = {}
        for replicas, acks in ((1, "1"), (3, "all")):
            topic = f"cost-rf{replicas}-{rep}"
            create(cluster, topic, 1, replicas)
            runs[replicas] = measured_produce(cluster, topic, size, records, acks)
    return {**pair_figures(runs[1], runs[3], records, size), "runs": runs}


def main() -> int:
    parser = bench_parser(__doc__, "replication_cost.json", code=True)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1000)
    args = parser.parse_args()
    if not os.path.exists(TOOL):
        print(f"{TOOL} is missing: run `python -m bench.suite --install-only` first", file=sys.stderr)
        return 2
    trees = code_trees(args)
    reps: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    failed: dict[str, list[str]] = {name: [] for name in trees}
    for rep in range(args.reps):
        for name, src in trees.items():
            try:
                with code_on_path(src):
                    reps[name].append(one_rep(args.records, args.size, rep))
            except LoadError as exc:  # on a loaded machine acks=all sends can time out: counted, not fatal
                failed[name].append(str(exc))
                print(f"rep {rep} {name} failed: {exc}", flush=True)
                continue
            print(f"rep {rep} {name}: {({k: v for k, v in reps[name][-1].items() if k != 'runs'})}", flush=True)
    summary = {name: {figure: [min(v), statistics.median(v), max(v)]
                      for figure in ("user_ms_per_mb", "ratio", "cores_busy")
                      for v in [[r[figure] for r in runs]]}
               for name, runs in reps.items() if runs}
    for name, figures in summary.items():
        print(f"{name:8} " + "  ".join(f"{figure} {values}" for figure, values in figures.items()))
    write_results(args.out, {"date": run_date(), "reps": args.reps,
                             "records": args.records, "size": args.size, "load_average": os.getloadavg()[0],
                             "code": trees, "summary": summary, "runs": reps, "failed": failed})
    return 0


if __name__ == "__main__":
    sys.exit(main())
