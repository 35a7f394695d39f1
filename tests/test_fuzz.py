"""The CI short run of the fuzz harness (bench/fuzz): every discovered target, for a bounded time
(LOGBUS_FUZZ_SECONDS in total, default 60, split evenly), must find 0 crashes and 0 unmapped
exceptions. The long run is `python -m bench.fuzz --inputs N`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import REPO_ROOT

from bench.fuzz.__main__ import discover

TOTAL_SECONDS = float(os.environ.get("LOGBUS_FUZZ_SECONDS", "60"))


def test_every_fuzz_target_finds_nothing(tmp_path) -> None:
    targets = discover()
    assert {"frames", "requests"} <= set(targets)
    per_target = TOTAL_SECONDS / len(targets)
    done = subprocess.run(
        [sys.executable, "-m", "bench.fuzz", "--inputs", "10000000", "--seconds", f"{per_target:.1f}",
         "--json", "--out", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=TOTAL_SECONDS * 2 + 120,
    )
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    findings = [finding for target in summary["targets"] for finding in target["findings"]]
    assert summary["crashes"] == 0 and summary["unmapped"] == 0, "\n\n".join(findings)[:6000]
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(target["inputs"] > 100 for target in summary["targets"]), summary
