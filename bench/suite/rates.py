"""Rates that can be trusted: how a backlog read is timed, and which figures are impossible.

A figure is impossible when it is not positive and finite, or when it is above what this machine
measured in the same run: a client process cannot move data faster than one loopback TCP stream
(iperf3, `limits.loopback_tcp_mb_s`), so a row of `clients` processes is bounded by `clients` times
that, with `LIMIT_MARGIN` for run-to-run noise. Such a row is flagged (kept as an error row that
says why, its figures out of every median) instead of printed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

LIMIT_MARGIN = 1.25
LOOPBACK_CASE = "loopback TCP, 1 stream"
BOUNDED_WORKLOADS = ("produce", "consume", "fan-out", "large-log fill", "large log", "profiled (py-spy)")
FLAGGED = "flagged, not a possible figure: "


def transfer_seconds(wall_s: float, startup_s: float | None, first_record_s: float) -> float:
    """The time a backlog read took, start-up excluded.

    `wall_s` is the reader process' wall time; `startup_s` the same reader's start-up, measured apart
    (on a one-record topic), so it can exceed this run's real start-up; `first_record_s` the reader's
    own clock from its first record to its last, a lower bound of the transfer (it only leaves out the
    first response). Wall less start-up, but never below the reader's own measured span: a rate from
    this can be neither negative nor inflated by an over-estimated start-up.
    """
    if startup_s is None:
        return first_record_s
    return max(wall_s - startup_s, first_record_s)


@dataclass(frozen=True)
class Limits:
    """The machine's measured limits in this run (None: not measured)."""

    loopback_mb_s: float | None = None

    @classmethod
    def from_results(cls, results: list[dict]) -> Limits:
        loopback = [row["mb_s"] for row in results if row.get("workload") == "machine"
                    and row.get("case") == LOOPBACK_CASE and "error" not in row and row.get("mb_s")]
        return cls(statistics.median(loopback) if loopback else None)


def impossible(row: dict, limits: Limits) -> str | None:
    """Why the row's throughput cannot be true, or None when it can (the reason leaves the figure out:
    it goes into the tables' notes column, where an impossible figure must not be read as a result)."""
    if row.get("workload") not in BOUNDED_WORKLOADS or "error" in row:
        return None
    for metric in ("records_s", "mb_s", "seconds"):
        value = row.get(metric)
        if value is not None and not (math.isfinite(value) and value > 0):
            return f"{metric} is not positive and finite (raw JSON: `flagged`)"
    mb_s, clients = row.get("mb_s"), max(int(row.get("clients") or 1), 1)
    if mb_s is not None and limits.loopback_mb_s and mb_s > clients * limits.loopback_mb_s * LIMIT_MARGIN:
        return (f"above {clients} x the loopback TCP limit measured in this run ({limits.loopback_mb_s:,.0f} MB/s, "
                f"+{LIMIT_MARGIN - 1:.0%}; raw JSON: `flagged`)")
    return None


def flag(row: dict, limits: Limits) -> dict:
    """The row, or in its place an error row saying why its figures are impossible (they stay under
    `flagged` for the raw results, out of the tables)."""
    reason = impossible(row, limits)
    if reason is None:
        return row
    labels = {key: value for key, value in row.items() if key in ("workload", "case", "system", "client", "clients")}
    return {**labels, "error": FLAGGED + reason, "flagged": row}


def flag_all(results: list[dict]) -> list[dict]:
    """Every row checked against the limits measured in the same run."""
    limits = Limits.from_results(results)
    return [flag(row, limits) for row in results]
