"""The benchmark suite's rates, in-process: backlog-read timing, flagging of impossible figures, and
the results table saying which kind of run it comes from. (The suite itself is not run here.)"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `bench` is not installed

from bench.suite import rates  # noqa: E402
from bench.suite.runner import Runner, Settings  # noqa: E402

LOOPBACK = {"workload": "machine", "case": rates.LOOPBACK_CASE, "system": "iperf3", "client": "-", "clients": 1,
            "mb_s": 2600.0}


def consume_row(system: str, records_s: float, size: int = 1000, clients: int = 1, **extra: object) -> dict:
    return {"workload": "consume", "case": f"{size} B backlog, 1 partition", "system": system,
            "client": "rdkafka_performance", "clients": clients, "records_s": records_s,
            "mb_s": records_s * size / 1e6, "records": 128_000, "seconds": 128_000 / records_s if records_s else 0,
            **extra}


# ---------------------------------------------------------------- timing a backlog read


def test_a_start_up_longer_than_the_read_cannot_make_the_time_negative() -> None:
    # The quick run's Tansu row: start-up measured at 0.55 s, a 0.40 s read of which rdkafka timed 0.30 s.
    seconds = rates.transfer_seconds(wall_s=0.40, startup_s=0.55, first_record_s=0.30)
    assert seconds == 0.30
    assert 128_000 / seconds > 0


def test_wall_time_less_start_up_when_it_is_longer_than_the_first_record_clock() -> None:
    # a server that sends the whole backlog in its first response: the first-record clock leaves it out
    assert rates.transfer_seconds(wall_s=2.0, startup_s=0.5, first_record_s=0.2) == 1.5


def test_without_a_start_up_the_first_record_clock_is_used() -> None:
    assert rates.transfer_seconds(wall_s=2.0, startup_s=None, first_record_s=1.2) == 1.2


# ---------------------------------------------------------------- impossible figures


@pytest.mark.parametrize("records_s", [-517_914.0, 0.0, math.inf, math.nan])
def test_rates_that_are_not_positive_and_finite_are_impossible(records_s: float) -> None:
    reason = rates.impossible(consume_row("tansu", records_s), rates.Limits())
    assert reason is not None and "records_s is not positive and finite" in reason


def test_a_rate_above_the_measured_loopback_limit_is_impossible() -> None:
    limits = rates.Limits(loopback_mb_s=2600.0)
    assert rates.impossible(consume_row("logbus", 1_285_000), limits) is None  # 1,285 MB/s: a real row
    reason = rates.impossible(consume_row("noida", 3_980_000), limits)  # 3.98 GB/s over one stream
    assert reason is not None and "loopback TCP limit" in reason
    assert rates.impossible(consume_row("noida", 3_980_000, clients=2), limits) is None  # two client processes


def test_the_bound_has_a_margin_for_noise() -> None:
    limits = rates.Limits(loopback_mb_s=1000.0)
    assert rates.impossible(consume_row("x", 1_240_000), limits) is None
    assert rates.impossible(consume_row("x", 1_260_000), limits) is not None


def test_machine_latency_and_error_rows_are_never_flagged() -> None:
    limits = rates.Limits(loopback_mb_s=10.0)
    assert rates.impossible({**LOOPBACK, "mb_s": 99_999.0}, limits) is None
    latency = {"workload": "latency", "case": "10,000 records/s of 100 B", "p99_ms": -1.0}
    assert rates.impossible(latency, limits) is None
    assert rates.impossible({**consume_row("x", -1.0), "error": "timed out"}, limits) is None


def test_limits_come_from_the_same_runs_machine_rows() -> None:
    results = [{**LOOPBACK, "mb_s": 2000.0}, {**LOOPBACK, "mb_s": 3000.0}, {**LOOPBACK, "mb_s": 2600.0},
               {**LOOPBACK, "error": "iperf3 failed"}, consume_row("logbus", 1_000_000)]
    assert rates.Limits.from_results(results) == rates.Limits(loopback_mb_s=2600.0)
    assert rates.Limits.from_results([consume_row("logbus", 1_000_000)]) == rates.Limits(None)


def test_a_flagged_row_keeps_its_labels_and_figures_out_of_the_table() -> None:
    row = consume_row("tansu", -517_914.0)
    flagged = rates.flag(row, rates.Limits())
    assert flagged["error"].startswith(rates.FLAGGED)
    assert flagged["flagged"] == row
    assert {k: flagged[k] for k in ("workload", "case", "system", "clients")} == {
        "workload": "consume", "case": "1000 B backlog, 1 partition", "system": "tansu", "clients": 1}
    assert "records_s" not in flagged
    good = consume_row("logbus", 1_000_000)
    assert rates.flag(good, rates.Limits()) is good


# ---------------------------------------------------------------- the runner and the report


def settings(tmp_path: Path) -> Settings:
    return Settings(reps=1, produce_counts={100: 1, 1000: 1}, worker_seconds=1, backlog_mb=1, latency_seconds=1,
                    large_log_gb=1, disk_mb=1, disk_sync_mb=1, tcp_seconds=1, budget_s=60,
                    out_dir=str(tmp_path / "out"), raw_dir=str(tmp_path / "raw"))


def test_the_runner_flags_an_impossible_step_against_limits_measured_earlier(tmp_path: Path) -> None:
    runner = Runner(settings(tmp_path))
    runner.measure({k: v for k, v in LOOPBACK.items() if k != "mb_s"}, None, lambda: {"mb_s": 1000.0})
    labels = {"workload": "consume", "case": "1000 B backlog, 1 partition", "system": "noida",
              "client": "rdkafka_performance", "clients": 1}
    row = runner.measure(labels, None, lambda: {"records_s": 3_000_000.0, "mb_s": 3000.0, "seconds": 0.04})
    assert row is not None and row["error"].startswith(rates.FLAGGED) and "loopback" in row["error"]
    row = runner.measure(labels, None, lambda: {"records_s": 900_000.0, "mb_s": 900.0, "seconds": 0.14})
    assert row is not None and "error" not in row


@pytest.mark.parametrize("mode", ["quick", "full"])
def test_results_md_never_prints_a_flagged_figure_and_says_what_kind_of_run(tmp_path: Path, mode: str) -> None:
    # Imported here, not at collection: matplotlib takes a second of CPU in every test process.
    pytest.importorskip("matplotlib", reason="bench/suite/report.py draws its charts with matplotlib (the bench extra)")
    from bench.suite import report

    out, raw = tmp_path / "out", tmp_path / "raw"
    raw.mkdir()
    results = [LOOPBACK, consume_row("tansu", -517_914.0), consume_row("tansu", 600_000.0),
               consume_row("logbus", 1_200_000.0), consume_row("noida", 4_000_000.0)]
    header = [f"# logbus side-by-side benchmark ({mode} mode)"]
    text = Path(report.write(results, [], header, str(out), str(raw))).read_text(encoding="utf-8")
    assert f"## Targets (ratios from this {mode} run)" in text
    assert f"## Throughput ({mode} run)" in text and f"## End-to-end latency ({mode} run;" in text
    assert "517,914" not in text and "4,000,000" not in text
    tansu = next(line for line in text.splitlines() if line.startswith("| consume | 1000 B backlog, 1 part")
                 and "| tansu |" in line)
    assert "600,000 (600,000–600,000)" in tansu and "| 1 |" in tansu  # one good run counted
    assert rates.FLAGGED + "records_s is not positive and finite" in tansu
    noida = next(line for line in text.splitlines() if "| noida |" in line)
    assert "| – |" in noida and "above 1 x the loopback TCP limit measured in this run (2,600 MB/s" in noida
    assert "2 run(s) gave an impossible figure" in text
    saved = json.loads((raw / "results.json").read_text(encoding="utf-8"))
    assert saved["mode"] == mode
    assert sum(1 for row in saved["results"] if "flagged" in row) == 2
    # --report-from an older results.json without "mode": taken from its header line
    again = Path(report.write(saved["results"], saved["notes"], saved["header"], str(out), str(raw))).read_text(
        encoding="utf-8")
    assert f"## Throughput ({mode} run)" in again
    assert again.count("2 run(s) gave an impossible figure") == 1
