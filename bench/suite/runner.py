"""Runs measured steps: a time budget for the whole suite, progress lines, CPU and RSS bookkeeping per step."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.suite import rates
from bench.suite.procmon import cpu_seconds, rss_mib


@dataclass
class Settings:
    """Sizes and durations of one suite run (quick or full)."""

    reps: int
    produce_counts: dict[int, int]
    worker_seconds: float
    backlog_mb: int
    latency_seconds: float
    large_log_gb: float
    disk_mb: int
    disk_sync_mb: int
    tcp_seconds: int
    budget_s: float
    out_dir: str  # results.md and the PNG charts (committed)
    raw_dir: str  # results.json and py-spy profiles (not committed)
    run_timeout_s: float = 120.0


@dataclass
class Runner:
    """Keeps the results and the clock; every measured step goes through `measure`."""

    settings: Settings
    results: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    steps: int = 0
    phase_deadline: float = float("inf")

    def begin_phase(self, name: str, share: float, shares_left: float) -> None:
        """Give the phase its share of the time still left, so a slow phase cannot starve the ones after it."""
        remaining = self.settings.budget_s - (time.monotonic() - self.started)
        allowance = max(remaining, 0) * share / shares_left
        self.phase_deadline = time.monotonic() + allowance
        self.say(f"phase {name} (up to {allowance / 60:.1f} min)")

    def time_left(self) -> float:
        overall = self.settings.budget_s - (time.monotonic() - self.started)
        return min(overall, self.phase_deadline - time.monotonic())

    def say(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed / 60:5.1f} min | step {self.steps:3d}] {text}", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            self.say("note: " + text)

    def measure(self, labels: dict, server_pid: int | None, step: Callable[[], dict]) -> dict | None:
        """Run one step, recording its metrics with client and server CPU; failures become a noted error row,
        and so do impossible figures (`rates.flag`: a step returning one is not a failure of the system)."""
        self.steps += 1
        title = " ".join(f"{value}" for value in labels.values())
        if self.time_left() <= 0:
            self.note("a phase used up its share of the time budget: its later runs were skipped "
                      "(rows with fewer runs than repetitions)")
            self.results.append({**labels, "error": "skipped: time budget"})
            return None
        # The previous step's writes (a filled backlog, a produce run) go to disk now, not while this
        # step runs: the kernel's writeback would take CPU and disk from whichever system comes next.
        os.sync()
        rss = RssSampler(server_pid)
        client_before = _children_cpu()
        server_before = cpu_seconds(server_pid) if server_pid else 0.0
        wall_started = time.perf_counter()
        try:
            with rss:
                metrics = step()
        except Exception as error:  # noqa: BLE001 - one failed step must not end the suite
            message = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
            self.results.append({**labels, "error": message})
            self.say(f"{title}: FAILED {message}")
            return None
        wall = time.perf_counter() - wall_started
        row = {**labels, **metrics, "wall_s": wall, "client_cpu_s": _children_cpu() - client_before}
        if server_pid:
            row["server_cpu_s"] = cpu_seconds(server_pid) - server_before
            row["server_rss_mib"] = rss.peak
        row = rates.flag(row, rates.Limits.from_results(self.results))
        self.results.append(row)
        self.say(f"{title}: {row['error'] if 'error' in row else _summary(row)}")
        return row


def _summary(row: dict) -> str:
    parts = []
    if "records_s" in row:
        parts.append(f"{row['records_s']:,.0f} rec/s {row.get('mb_s', 0):,.1f} MB/s")
    elif "mb_s" in row:
        parts.append(f"{row['mb_s']:,.1f} MB/s")
    if "p99_ms" in row:
        parts.append(f"p50 {row['p50_ms']:.2f} p99 {row['p99_ms']:.2f} p99.9 {row['p999_ms']:.2f} ms")
    if "server_cpu_s" in row:
        parts.append(f"cpu server {row['server_cpu_s']:.1f}s client {row['client_cpu_s']:.1f}s "
                     f"wall {row['wall_s']:.1f}s")
    return "; ".join(parts)


def _children_cpu() -> float:
    """CPU seconds of all reaped child processes (the client processes this suite ran)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class RssSampler:
    """Peak RSS of the server's process tree while a step runs, sampled every 200 ms."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mib(self.pid))
            if self._stop.wait(0.2):
                return

    def __enter__(self) -> RssSampler:
        if self.pid:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()


def run_worker(kind: str, timeout_s: float, **arguments) -> dict:
    """Run one Python client process from bench.suite.workers; its last stdout line is the JSON result."""
    done = subprocess.run([sys.executable, "-m", "bench.suite.workers", kind, json.dumps(arguments)],
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        detail = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode
        raise RuntimeError(f"{kind}: {detail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class WorkerProcess:
    """A client process started in the background (latency consumers); `ready()` waits for its ready line."""

    def __init__(self, kind: str, **arguments) -> None:
        self.kind = kind
        self.process = subprocess.Popen([sys.executable, "-m", "bench.suite.workers", kind, json.dumps(arguments)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ready(self, timeout_s: float) -> None:
        holder: dict = {}
        reader = threading.Thread(target=lambda: holder.update(line=self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        if '"ready"' not in holder.get("line", ""):
            self.process.kill()
            raise RuntimeError(f"{self.kind} did not get ready: {self.process.stderr.read()[-300:]}")

    def result(self, timeout_s: float) -> dict:
        try:
            out, err = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            raise
        if self.process.returncode != 0:
            raise RuntimeError(f"{self.kind}: {err.strip().splitlines()[-1] if err.strip() else 'failed'}")
        return json.loads(out.strip().splitlines()[-1])
