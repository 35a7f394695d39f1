"""The CI short run of the fuzz harness (bench/fuzz): every discovered target, one test each, runs
LOGBUS_FUZZ_INPUTS inputs (default 1000) and must find 0 crashes and 0 unmapped exceptions. A fixed
number of inputs, not seconds, so a loaded machine runs the same work, only slower. The long run
is `python -m bench.fuzz --inputs N`.

The short run uses the built-in mutator (`--engine random`): the coverage-guided engine spends
3-9 s of CPU per target instrumenting the imports before its first input, and the run is short
enough that its inputs are mostly the seeds (dispatch and requests have hundreds). 1000 inputs
run every seed of every target and hundreds of mutations of them. One test keeps the
coverage-guided engine (atheris) itself working, on a target that loads fast.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from helpers import REPO_ROOT

from bench.fuzz.__main__ import discover

INPUTS = int(os.environ.get("LOGBUS_FUZZ_INPUTS", "1000"))
CAP_SECONDS = 120.0  # per target: far above what INPUTS take (a few seconds), only against a hang


def test_the_short_run_covers_the_frame_and_request_targets() -> None:
    assert {"frames", "requests"} <= set(discover())


@pytest.mark.parametrize("target", discover())
def test_a_fuzz_target_finds_nothing(target: str, tmp_path) -> None:
    fuzz(target, "random", INPUTS, tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
def test_the_coverage_guided_engine_finds_nothing(tmp_path) -> None:
    fuzz("frames", "atheris", 300, tmp_path)


def fuzz(target: str, engine: str, inputs: int, out: os.PathLike) -> None:
    """Run `inputs` inputs of `target` with `engine`: no crash, no unmapped exception."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.fuzz", "--target", target, "--engine", engine, "--inputs", str(inputs),
         "--seconds", str(CAP_SECONDS), "--json", "--out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=CAP_SECONDS + 120,
    )
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    findings = [finding for report in summary["targets"] for finding in report["findings"]]
    assert summary["engine"] == engine
    assert summary["crashes"] == 0 and summary["unmapped"] == 0, "\n\n".join(findings)[:6000]
    assert done.returncode == 0, done.stderr[-3000:]
    assert summary["inputs"] >= inputs, f"{summary['inputs']} of {inputs} inputs in {CAP_SECONDS} s"
