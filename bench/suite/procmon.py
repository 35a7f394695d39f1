"""What a process costs, read from /proc: CPU seconds and RSS of a process and all its descendants."""

from __future__ import annotations

import os
import socket
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                found += [int(child) for child in handle.read().split()]
    except OSError:
        pass
    return found


def process_tree(pid: int) -> list[int]:
    """`pid` and every descendant (wrappers such as noida-db run the real server as a child)."""
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending += _children(current)
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by `pid` and its descendants."""
    total = 0.0
    for member in process_tree(pid):
        try:
            with open(f"/proc/{member}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def rss_mib(pid: int) -> float:
    """Resident memory of `pid` and its descendants, MiB."""
    total = 0
    for member in process_tree(pid):
        try:
            with open(f"/proc/{member}/status", encoding="ascii") as handle:
                total += next((int(line.split()[1]) for line in handle if line.startswith("VmRSS:")), 0)
        except OSError:
            continue
    return total / 1024


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, deadline_s: float, alive: callable) -> None:
    """Poll until something accepts on 127.0.0.1:`port`; raise when `alive()` turns false or time is up."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not alive():
            raise RuntimeError(f"server exited before listening on port {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {deadline_s} s")
