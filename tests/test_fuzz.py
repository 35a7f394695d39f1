"""The CI short run of the fuzz harness (bench/fuzz): every discovered target, one test each, runs
LOGBUS_FUZZ_INPUTS inputs (default 300) and must find 0 crashes and 0 unmapped exceptions. A fixed
number of inputs, not seconds, so a loaded machine runs the same work, only slower. The long run
is `python -m bench.fuzz --inputs N`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO_ROOT

from bench.fuzz.__main__ import discover

INPUTS = int(os.environ.get("LOGBUS_FUZZ_INPUTS", "300"))
CAP_SECONDS = 120.0  # per target: far above what INPUTS take (a few seconds), only against a hang


def test_the_short_run_covers_the_frame_and_request_targets() -> None:
    assert {"frames", "requests"} <= set(discover())


@pytest.mark.parametrize("target", discover())
def test_a_fuzz_target_finds_nothing(target: str, tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.fuzz", "--target", target, "--inputs", str(INPUTS),
         "--seconds", str(CAP_SECONDS), "--json", "--out", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=CAP_SECONDS + 120,
    )
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    findings = [finding for report in summary["targets"] for finding in report["findings"]]
    assert summary["crashes"] == 0 and summary["unmapped"] == 0, "\n\n".join(findings)[:6000]
    assert done.returncode == 0, done.stderr[-3000:]
    assert summary["inputs"] >= INPUTS, f"{summary['inputs']} of {INPUTS} inputs in {CAP_SECONDS} s"
