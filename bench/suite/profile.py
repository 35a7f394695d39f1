"""Optional py-spy profile of the logbus broker during chosen runs, summarised as top self/inclusive frames.

py-spy (`pip install py-spy==0.4.3`) samples the broker's Python stacks; `-f raw` writes collapsed
stacks ("frame;frame;frame count" per line) which `summarise` turns into the functions where time goes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter


class Profiler:
    """py-spy attached to one pid for the duration of a `with` block (SIGINT makes it write its output)."""

    def __init__(self, pid: int, path: str) -> None:
        self.pid = pid
        self.path = path
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Profiler:
        py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
        if py_spy:  # the venv's bin need not be on PATH
            self.process = subprocess.Popen([py_spy, "record", "-p", str(self.pid), "-f", "raw", "-r", "200",
                                             "-o", self.path, "--nonblocking"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _frame_name(frame: str) -> str:
    """'handle (logbus/broker/apis/produce.py:42)' -> 'handle (logbus/broker/apis/produce.py)'."""
    return frame.rsplit(":", 1)[0] + ")" if frame.endswith(")") and ":" in frame else frame


def summarise(path: str, top: int = 12) -> list[str]:
    """Markdown lines: the frames with most self samples and most inclusive samples."""
    if not os.path.exists(path):
        return [f"(no profile at {path}: py-spy missing or failed)"]
    own, inclusive, total = Counter(), Counter(), 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = [_frame_name(frame) for frame in stack.split(";")]
            total += count
            own[frames[-1]] += count
            for frame in set(frames):
                inclusive[frame] += count
    if not total:
        return ["(empty profile)"]
    lines = [f"{total} samples", "", "| self % | frame | | inclusive % | frame |", "|---|---|---|---|---|"]
    for (self_frame, self_n), (incl_frame, incl_n) in zip(own.most_common(top), inclusive.most_common(top),
                                                         strict=False):
        lines.append(f"| {100 * self_n / total:.1f} | `{self_frame}` | | {100 * incl_n / total:.1f} | `{incl_frame}` |")
    return lines
