"""Turns the raw rows into a markdown table (median and min–max over repetitions), target ratios and PNG charts."""

from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.suite import rates  # noqa: E402
from bench.suite.profile import summarise  # noqa: E402

KAFKA_PEERS = ("tansu", "noida")


def aggregate(results: list[dict]) -> dict[tuple[str, str, str], dict]:
    """(workload, case, system) -> {metric: (median, min, max)}, plus client details and errors."""
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for row in results:
        groups[(row["workload"], row["case"], row["system"])].append(row)
    table = {}
    for key, rows in groups.items():
        good = [row for row in rows if "error" not in row]
        stats = {"client": rows[0].get("client", ""), "clients": rows[0].get("clients", 1),
                 "runs": len(good), "errors": sorted({row["error"] for row in rows if "error" in row})}
        for metric in ("records_s", "mb_s", "p50_ms", "p99_ms", "p999_ms", "achieved_rate", "server_rss_mib"):
            values = [row[metric] for row in good if row.get(metric) is not None]
            if values:
                stats[metric] = (statistics.median(values), min(values), max(values))
        per_cpu = [row["records"] / row["server_cpu_s"] for row in good
                   if row.get("records") and row.get("server_cpu_s")]
        if per_cpu:
            stats["records_per_server_cpu_s"] = statistics.median(per_cpu)
        for cpu in ("server_cpu_s", "client_cpu_s"):
            shares = [row[cpu] / row["wall_s"] for row in good if row.get(cpu) is not None and row.get("wall_s")]
            if shares:
                stats[cpu.replace("_s", "_pct")] = statistics.median(shares) * 100
        table[key] = stats
    return table


def _fmt(triple: tuple[float, float, float] | None, digits: int = 0) -> str:
    if not triple:
        return "–"
    med, low, high = triple
    return f"{med:,.{digits}f} ({low:,.{digits}f}–{high:,.{digits}f})"


def _cpu(stats: dict, key: str) -> str:
    return f"{stats[key]:,.0f}" if key in stats else "–"


def _err(stats: dict) -> str:
    return "; ".join(stats["errors"])[:160]


def throughput_table(table: dict, workloads: tuple[str, ...]) -> list[str]:
    lines = ["| workload | case | system | client (processes) | records/s median (min–max) | MB/s median (min–max) "
             "| server CPU % | client CPU % | records per server CPU-second | server peak RSS MiB | runs | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (workload, case, system), stats in table.items():
        if workload not in workloads:
            continue
        rss = f"{stats['server_rss_mib'][2]:.0f}" if "server_rss_mib" in stats else "–"
        lines.append(f"| {workload} | {case} | {system} | {stats['client']} ({stats['clients']}) "
                     f"| {_fmt(stats.get('records_s'))} | {_fmt(stats.get('mb_s'), 1)} "
                     f"| {_cpu(stats, 'server_cpu_pct')} | {_cpu(stats, 'client_cpu_pct')} "
                     f"| {_cpu(stats, 'records_per_server_cpu_s')} | {rss} "
                     f"| {stats['runs']} | {_err(stats)} |")
    return lines


def latency_table(table: dict) -> list[str]:
    lines = ["| offered rate | system | client (processes) | achieved records/s | p50 ms | p99 ms | p99.9 ms | runs "
             "| notes |", "|---|---|---|---|---|---|---|---|---|"]
    for (workload, case, system), stats in table.items():
        if workload == "latency":
            lines.append(f"| {case} | {system} | {stats['client']} ({stats['clients']}) "
                         f"| {_fmt(stats.get('achieved_rate'))} | {_fmt(stats.get('p50_ms'), 2)} "
                         f"| {_fmt(stats.get('p99_ms'), 2)} | {_fmt(stats.get('p999_ms'), 2)} | {stats['runs']} "
                         f"| {_err(stats)} |")
    return lines


def _median(table: dict, workload: str, case_start: str, system: str, metric: str = "records_s") -> float | None:
    for (w, case, s), stats in table.items():
        if w == workload and case.startswith(case_start) and s == system and metric in stats:
            return stats[metric][0]
    return None


def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}×" if ours and theirs else "n/a"


def targets(table: dict) -> list[str]:
    """The issue's targets, each with the figures from this run."""
    lines = ["| target | measured | met |", "|---|---|---|"]

    def row(target: str, measured: str, met: bool | None) -> None:
        lines.append(f"| {target} | {measured} | {'n/a' if met is None else ('yes' if met else 'no')} |")

    case = "100 B, 1 partition(s), acks=1"
    ours = _median(table, "produce", case, "logbus")
    peers = {p: _median(table, "produce", case, p) for p in (*KAFKA_PEERS, "redis", "redis-benchmark", "nats")}
    best_kafka = max((v for p, v in peers.items() if p in KAFKA_PEERS and v), default=None)
    best_redis = max((v for p, v in peers.items() if p.startswith("redis") and v), default=None)
    for label, theirs, goal in (("best Kafka-compatible peer", best_kafka, 1.2), ("Redis Streams (best client)",
                                best_redis, 1.5), ("NATS JetStream", peers["nats"], 2.0)):
        row(f"produce 100 B, 1 partition, acks=1: ≥ {goal}× {label}",
            f"{_ratio(ours, theirs)} ({ours or 0:,.0f} vs {theirs or 0:,.0f} rec/s)",
            None if not (ours and theirs) else ours / theirs >= goal)
    mb = _median(table, "produce", "1000 B, 1 partition(s), acks=1", "logbus", "mb_s")
    disk = _median(table, "machine", "disk write, page cache", "fio", "mb_s")
    disk_sync = _median(table, "machine", "disk write, fdatasync", "fio", "mb_s")
    tcp = _median(table, "machine", "loopback TCP", "iperf3", "mb_s")
    row("produce 1 KB: ≥ 400 MB/s (share of disk / loopback limits)",
        f"{mb or 0:,.1f} MB/s = {_ratio(mb, disk)} of page-cache write, {_ratio(mb, disk_sync)} of fdatasync write, "
        f"{_ratio(mb, tcp)} of loopback TCP", None if mb is None else mb >= 400)
    ours_c = _median(table, "consume", "100 B", "logbus")
    best_c = max((v for p in KAFKA_PEERS if (v := _median(table, "consume", "100 B", p))), default=None)
    redis_c = _median(table, "consume", "100 B", "redis")
    row("consume 100 B backlog: ≥ 1.0× best Kafka-compatible peer", _ratio(ours_c, best_c),
        None if not (ours_c and best_c) else ours_c >= best_c)
    row("consume 100 B backlog: ≥ 2× Redis Streams", _ratio(ours_c, redis_c),
        None if not (ours_c and redis_c) else ours_c >= 2 * redis_c)
    gb = _median(table, "consume", "1000 B", "logbus", "mb_s")
    row("consume 1 KB backlog: ≥ 1 GB/s", f"{gb or 0:,.0f} MB/s", None if gb is None else gb >= 1000)
    p99 = _median(table, "latency", "10,000", "logbus", "p99_ms")
    p999 = _median(table, "latency", "10,000", "logbus", "p999_ms")
    row("end-to-end p99 < 10 ms at 10k records/s", f"{p99 or 0:.2f} ms", None if p99 is None else p99 < 10)
    row("end-to-end p99.9 < 25 ms at 10k records/s", f"{p999 or 0:.2f} ms", None if p999 is None else p999 < 25)
    empty = _median(table, "large log", "produce 100 B into empty", "logbus")
    full = next((s["records_s"][0] for (w, c, sy), s in table.items()
                 if w == "large log" and sy == "logbus" and "GB log" in c and "records_s" in s), None)
    row("throughput with the large log within 10 % of empty", _ratio(full, empty),
        None if not (full and empty) else full >= 0.9 * empty)
    rss = max((s["server_rss_mib"][2] for (w, _c, sy), s in table.items()
               if sy == "logbus" and w in ("produce", "consume", "large log") and "server_rss_mib" in s), default=None)
    row("broker RSS under load < 200 MB", f"{rss or 0:.0f} MiB peak", None if rss is None else rss < 200)
    return lines


def _bar_chart(table: dict, workload: str, metric: str, title: str, ylabel: str, path: str,
               log: bool = False) -> None:
    cases = list(dict.fromkeys(case for (w, case, _s) in table if w == workload))
    systems = list(dict.fromkeys(s for (w, _c, s) in table if w == workload))
    if not cases:
        return
    width = 0.8 / max(len(systems), 1)
    fig, axis = plt.subplots(figsize=(max(8, 1.6 * len(cases)), 5))
    for index, system in enumerate(systems):
        values, errors = [], [[], []]
        for case in cases:
            med, low, high = table.get((workload, case, system), {}).get(metric, (0, 0, 0))
            values.append(med)
            errors[0].append(med - low)
            errors[1].append(high - med)
        positions = [c + (index - (len(systems) - 1) / 2) * width for c in range(len(cases))]
        axis.bar(positions, values, width, yerr=errors, label=system, capsize=2)
    axis.set_xticks(range(len(cases)), [c.replace(", ", "\n", 1) for c in cases], fontsize=7)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    if log:
        axis.set_yscale("log")
    axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_mode(header: list[str]) -> str:
    """"full" or "quick", from the header line `cli.header` writes (results.json of older runs)."""
    title = header[0] if header else ""
    return "quick" if "(quick mode)" in title else "full" if "(full mode)" in title else "unknown"


def write(results: list[dict], notes: list[str], header: list[str], out_dir: str, raw_dir: str,
          mode: str | None = None) -> str:
    """Write results.md and the charts to `out_dir`, every single run to `raw_dir`/results.json.

    Impossible figures are flagged first (`rates.flag_all`); every table says which kind of run it
    comes from (`mode`: "quick" or "full"), as a quick run flatters systems that defer work."""
    os.makedirs(out_dir, exist_ok=True)
    mode = mode or run_mode(header)
    results = rates.flag_all(results)
    flagged = sum(1 for row in results if "flagged" in row)
    flagged_note = (f"{flagged} run(s) gave an impossible figure (negative, or above the machine's measured "
                    "limits) and are flagged in the notes column instead of counted")
    if flagged and flagged_note not in notes:
        notes = [*notes, flagged_note]
    table = aggregate(results)
    charts = [("produce", "records_s", "Produce throughput (median, min–max)", "records/s", True),
              ("consume", "mb_s", "Consume a backlog from the start", "MB/s", False),
              ("fan-out", "records_s", "Fan-out to 4 consumer groups (aggregate)", "records/s", True),
              ("latency", "p99_ms", "End-to-end p99 latency at a fixed offered rate", "ms", True),
              ("large log", "records_s", "Produce 100 B into an empty vs a large log", "records/s", False),
              ("machine", "mb_s", "Machine limits", "MB/s", False)]
    for workload, metric, title, ylabel, log in charts:
        _bar_chart(table, workload, metric, title, ylabel,
                   os.path.join(out_dir, f"{workload.replace(' ', '-')}.png"), log)
    lines = [*header, "", f"## Targets (ratios from this {mode} run)", "", *targets(table), "",
             f"## Throughput ({mode} run)", "",
             *throughput_table(table, ("produce", "consume", "fan-out", "large-log fill", "large log", "machine",
                                       "profiled (py-spy)")),
             "", f"## End-to-end latency ({mode} run; 100 B records, consumer and producer in separate processes)",
             "",
             *latency_table(table), ""]
    profiles = sorted(name for name in os.listdir(raw_dir) if name.startswith("profile-") and name.endswith(".txt"))
    for name in profiles:
        lines += [f"## Where the logbus broker's time goes: {name[len('profile-'):-4]} (py-spy, 200 Hz)", "",
                  *summarise(os.path.join(raw_dir, name)), ""]
    if notes:
        lines += ["## Notes from the run", "", *[f"- {note}" for note in notes], ""]
    lines += ["Charts: " + ", ".join(f"`{w.replace(' ', '-')}.png`" for w, *_ in charts), ""]
    path = os.path.join(out_dir, "results.md")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines))
    with open(os.path.join(raw_dir, "results.json"), "w", encoding="utf-8") as handle:
        json.dump({"header": header, "mode": mode, "results": results, "notes": notes}, handle, indent=1)
    return path
