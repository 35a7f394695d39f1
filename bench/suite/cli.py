"""`python -m bench.suite [--quick]`: install peers (cached), run every workload alternating systems, write results."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

from bench.suite import install, report
from bench.suite.runner import Runner, Settings
from bench.suite.workloads import PHASES, PY_READER_BACKLOG

DEFAULT_PHASES = [phase for phase in PHASES if phase != "profile"]
PHASE_SHARES = {"limits": 0.03, "produce": 0.37, "consume": 0.28, "large-log": 0.12, "latency": 0.2, "profile": 0.04}
RESULTS_DIR = os.path.join(install.BENCH_DIR, "results")


def settings_for(args: argparse.Namespace) -> Settings:
    quick = args.quick
    settings = Settings(
        reps=args.reps or (2 if quick else 3),
        produce_counts={100: 1_000_000, 1000: 300_000} if quick else {100: 10_000_000, 1000: 2_000_000},
        worker_seconds=3 if quick else 4,
        backlog_mb=args.backlog_mb or (128 if quick else 1024),
        latency_seconds=3 if quick else 5,
        large_log_gb=args.large_log_gb or (1 if quick else 10),
        disk_mb=512 if quick else 2048,
        disk_sync_mb=256 if quick else 1024,
        tcp_seconds=2 if quick else 5,
        budget_s=(args.budget_min or (15 if quick else 36)) * 60,
        out_dir=args.out,
        raw_dir=args.raw,
    )
    return settings


def _version(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip() and "GLIBC" not in line]
    return lines[0].strip() if lines else "?"


def header(args: argparse.Namespace, settings: Settings, tools: install.Tools, phases: list[str]) -> list[str]:
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
        cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "?")
    load = os.getloadavg()
    commit = _version(["git", "-C", install.BENCH_DIR, "rev-parse", "--short", "HEAD"])
    return [
        f"# logbus side-by-side benchmark ({'quick' if args.quick else 'full'} mode)", "",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; logbus commit {commit}",
        f"- Machine: {os.cpu_count()} CPUs ({cpu}), {platform.platform()}; load average at start "
        f"{load[0]:.1f} (other work on the machine shares these CPUs when it is above ~0.5)",
        f"- Phases: {', '.join(phases)}; {settings.reps} repetitions, systems alternating inside each repetition",
        f"- Kafka load generator: {tools.load_generator_note}; latency probes: confluent-kafka (same librdkafka)",
        f"- Peers: {_version([tools.tansu, '--version'])}; noida-db {_version([tools.noida, 'version'])}; "
        f"{_version(['redis-server', '--version'])[:40]}; nats-server {_version(['nats-server', '--version'])}",
        f"- Backlog {settings.backlog_mb} MB of records of each size for Kafka-protocol systems (Redis and NATS: "
        f"up to {PY_READER_BACKLOG:,} records, their readers are time-bounded); "
        f"large log {settings.large_log_gb:g} GB; produce counts {settings.produce_counts}",
        "- What is and is not equal between the systems: bench/suite/README.md",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suite", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 repetitions (a few minutes)")
    parser.add_argument("--phases", default=",".join(DEFAULT_PHASES),
                        help=f"comma list out of {','.join(PHASES)} (default: all but profile)")
    parser.add_argument("--reps", type=int, help="repetitions (default 2 quick, 3 full)")
    parser.add_argument("--backlog-mb", type=int, help="consume backlog size (default 128 quick, 1024 full)")
    parser.add_argument("--large-log-gb", type=float, help="log size for the large-log run (default 1 quick, 10 full)")
    parser.add_argument("--budget-min", type=float, help="stop starting new runs after this (15 quick, 25 full)")
    parser.add_argument("--out", default=RESULTS_DIR, help="where results.md, results.json and PNGs go")
    parser.add_argument("--raw", default=os.path.join(install.CACHE_DIR, "raw"),
                        help="where results.json (every run) and py-spy profiles go")
    parser.add_argument("--report-from", metavar="RESULTS_JSON",
                        help="only rewrite results.md and charts from an earlier run's results.json")
    parser.add_argument("--install-only", action="store_true", help="set up the peers and tools, then exit")
    args = parser.parse_args(argv)
    phases = [phase.strip() for phase in args.phases.split(",") if phase.strip()]
    unknown = set(phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")

    def say(text: str) -> None:
        print(f"[setup] {text}", file=sys.stderr, flush=True)

    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.raw, exist_ok=True)
    if args.report_from:
        with open(args.report_from, encoding="utf-8") as handle:
            saved = json.load(handle)
        print(report.write(saved["results"], saved["notes"], saved.get("header", []), args.out, args.raw,
                           saved.get("mode")))
        return 0
    tools = install.ensure_all(say)
    if args.install_only:
        return 0
    if tools.rdkafka_performance is None:
        say("no Kafka load generator; Kafka workloads cannot run")
        return 1
    settings = settings_for(args)
    runner = Runner(settings)
    top = header(args, settings, tools, phases)
    for index, phase in enumerate(phases):
        runner.begin_phase(phase, PHASE_SHARES[phase], sum(PHASE_SHARES[p] for p in phases[index:]))
        if phase == "limits":
            PHASES[phase](runner)
        else:
            PHASES[phase](runner, tools)
    path = report.write(runner.results, runner.notes, top, args.out, args.raw, "quick" if args.quick else "full")
    runner.say(f"done; results in {path}")
    return 0
