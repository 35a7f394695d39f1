"""The fuzz runner: `python -m bench.fuzz --inputs N [--seconds S] [--target NAME ...] [--json]`.

Every module `bench/fuzz/target_<name>.py` is a target: `fuzz_one(data: bytes) -> None` returns
for any input it handles correctly (including a clean refusal) and raises only on a bug; an
optional `SEEDS: list[bytes]` starts the corpus. Each target runs in its own child process, so a
crash (SIGABRT from a native decoder, a segfault, the OOM killer) is counted, its input saved, and
the child restarted; an exception escaping `fuzz_one` is an unmapped exception, counted and saved.

With atheris installed (`pip install atheris`), libFuzzer mutates the seeds guided by coverage
of the instrumented Python code (`--engine atheris`, the default when available). Without it, the
built-in mutator (`--engine random`) mutates seeds at random: bit flips, interesting integers such
as 2^31-1 and huge varints written anywhere, insertions, deletions, splices, truncations.

Per target: at most `--inputs` inputs and `--seconds` seconds (counted once the target is loaded and,
with atheris, its imports instrumented). Reported per target and in total:
inputs run, crashes, unmapped exceptions (one traceback per exception type and place), the
child's peak RSS. Failing inputs go to `--out` (default $TMPDIR/logbus-fuzz-findings) as
<target>-<kind>-<n>.bin. Exit status 1 if anything was found.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import mmap
import multiprocessing
import os
import pkgutil
import random
import resource
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_INPUT = 1 << 20  # inputs are cut to this size (and to what the shared slot can hold)
INTERESTING = [
    b"\x00", b"\xff", b"\x7f", b"\x80", b"\x00\x00", b"\xff\xff", b"\x7f\xff", b"\x80\x00",
    b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00\x00\x01",
    b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x01", b"\xff\xff\xff\x7f",
]


@dataclass
class TargetReport:
    target: str
    inputs: int = 0
    crashes: int = 0
    unmapped: int = 0
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    findings: list[str] = field(default_factory=list)  # saved inputs and the first tracebacks


def discover() -> list[str]:
    return sorted(info.name.removeprefix("target_") for info in pkgutil.iter_modules([HERE])
                  if info.name.startswith("target_"))


def load(name: str) -> Any:
    return importlib.import_module(f"bench.fuzz.target_{name}")


# ---------------------------------------------------------------------------- mutation


def mutate(rng: random.Random, corpus: list[bytes]) -> bytes:
    data = bytearray(rng.choice(corpus))
    for _ in range(rng.choice((1, 1, 2, 3, 4, 8))):
        _mutate_once(rng, data, corpus)
    return bytes(data[:MAX_INPUT])


def _mutate_once(rng: random.Random, data: bytearray, corpus: list[bytes]) -> None:
    choice = rng.randrange(9)
    at = rng.randrange(len(data) + 1)
    if choice == 0 and data:  # flip a bit
        at = min(at, len(data) - 1)
        data[at] ^= 1 << rng.randrange(8)
    elif choice == 1 and data:  # a random byte
        data[min(at, len(data) - 1)] = rng.randrange(256)
    elif choice in (2, 3):  # an interesting value written over
        value = rng.choice(INTERESTING)
        data[at:at + len(value)] = value
    elif choice == 4:  # insert random bytes
        data[at:at] = os.urandom(rng.choice((1, 2, 4, 16, 100)))
    elif choice == 5 and data:  # delete a range
        del data[at:at + rng.choice((1, 2, 4, 16, 64))]
    elif choice == 6 and data:  # duplicate a range
        size = rng.choice((1, 4, 16, 64))
        data[at:at] = data[at:at + size]
    elif choice == 7:  # splice with another input
        other = rng.choice(corpus)
        cut = rng.randrange(len(other) + 1)
        data[at:] = other[cut:]
    elif choice == 8:  # truncate
        del data[at:]


# ---------------------------------------------------------------------------- child process


def _child(name: str, inputs: int, seconds: float, seed: int, slot: Any, results: Any, engine: str) -> None:
    """Run target `name` for `seconds` once it is loaded (atheris's instrumentation of the imports
    takes seconds of its own on a busy machine); before each input, write it to `slot` so the
    parent can save it if the process dies. Exceptions escaping fuzz_one are reported through
    `results`."""
    if engine == "atheris":
        _child_atheris(name, inputs, seconds, slot, results)
        return
    target = load(name)
    deadline = time.monotonic() + seconds
    corpus = list(getattr(target, "SEEDS", None) or [b""])
    rng = random.Random(seed)
    runner = _Runner(target, slot, results)
    while runner.done < inputs and time.monotonic() < deadline:
        runner(corpus[runner.done] if runner.done < len(corpus) else mutate(rng, corpus))
    runner.finish()


class _Runner:
    """Runs one input at a time, keeping it in the shared slot, counting and reporting findings."""

    def __init__(self, target: Any, slot: Any, results: Any) -> None:
        self.target, self.slot, self.results = target, slot, results
        self.done = self.unmapped = 0
        self.seen: set[tuple[str, str, int]] = set()  # one report per exception type and place raised

    def __call__(self, data: bytes) -> None:
        self.slot.seek(0)
        self.slot.write(struct.pack(">i", len(data)) + data)
        try:
            self.target.fuzz_one(data)
        except Exception as exc:  # noqa: BLE001 - anything escaping the target is a finding
            self.unmapped += 1
            where = traceback.extract_tb(exc.__traceback__)[-1]
            signature = (type(exc).__name__, where.filename, where.lineno or 0)
            if signature not in self.seen and len(self.seen) < 20:
                self.seen.add(signature)
                self.results.put(("unmapped", data, "".join(traceback.format_exception(exc))[-2000:]))
        self.done += 1
        if self.done % 1000 == 0:
            self.results.put(("progress", self.done, self.unmapped))

    def finish(self) -> None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        self.results.put(("done", self.done, self.unmapped, peak))


def _child_atheris(name: str, inputs: int, seconds: float, slot: Any, results: Any) -> None:
    """Coverage-guided: libFuzzer (through atheris) mutates, guided by the instrumented code of
    the target and of everything it imports; the seeds are its starting corpus."""
    import atheris

    with atheris.instrument_imports(include=["logbus", "bench"]):  # not kio, asyncio, ...: startup
        target = load(name)
    deadline = time.monotonic() + seconds
    corpus_dir = os.path.join(tempfile.gettempdir(), "logbus-fuzz-corpus", name)  # grows run after run
    os.makedirs(corpus_dir, exist_ok=True)
    for number, seed in enumerate(getattr(target, "SEEDS", None) or [b""]):
        with open(os.path.join(corpus_dir, f"seed-{number}"), "wb") as handle:
            handle.write(seed)
    dictionary = corpus_dir + ".dict"  # the interesting integers, as libFuzzer tokens
    with open(dictionary, "w", encoding="ascii") as handle:
        handle.writelines('"' + "".join(f"\\x{byte:02x}" for byte in token) + '"\n' for token in INTERESTING)
    runner = _Runner(target, slot, results)

    def test_one(data: bytes) -> None:
        runner(data)
        if runner.done >= inputs or time.monotonic() >= deadline:
            runner.finish()
            results.close()
            results.join_thread()
            os._exit(0)

    atheris.Setup([sys.argv[0], f"-max_len={MAX_INPUT}", "-rss_limit_mb=4096", "-print_final_stats=0",
                   f"-dict={dictionary}", f"-artifact_prefix={corpus_dir}-", corpus_dir], test_one)
    atheris.Fuzz()


def run_target(name: str, inputs: int, seconds: float, seed: int, out: str, engine: str) -> TargetReport:
    report = TargetReport(name)
    began = time.monotonic()
    deadline = began + seconds
    context = multiprocessing.get_context("fork")
    round_seed = seed
    while report.inputs < inputs and time.monotonic() < deadline:
        slot = mmap.mmap(-1, MAX_INPUT + 4)
        results = context.Queue()
        child = context.Process(target=_child, args=(name, inputs - report.inputs, deadline - time.monotonic(),
                                                     round_seed, slot, results, engine))
        child.start()
        counted = finished = unmapped = reported = 0
        while True:
            message = _next(results, child)
            if message is None:  # the child died
                break
            kind = message[0]
            if kind == "progress":
                counted, unmapped = message[1], message[2]
            elif kind == "unmapped":
                reported += 1
                number = report.unmapped + reported
                report.findings.append(_save(out, name, "unmapped", number, message[1]) + "\n" + message[2])
            elif kind == "done":
                counted, unmapped, finished = message[1], message[2], 1
                report.peak_rss_mb = max(report.peak_rss_mb, message[3])
                break
        child.join()
        report.inputs += counted
        report.unmapped += max(unmapped, reported)
        if not finished:
            report.crashes += 1
            slot.seek(0)
            (size,) = struct.unpack(">i", slot.read(4))
            data = slot.read(size)
            report.inputs += 1
            report.findings.append(_save(out, name, "crash", report.crashes, data)
                                   + f"\nchild exit code {child.exitcode}")
        slot.close()
        round_seed += 1
    report.seconds = round(time.monotonic() - began, 1)
    return report


def _next(results: Any, child: Any) -> tuple | None:
    """The child's next message, or None once it has died without saying `done`."""
    while True:
        try:
            return results.get(timeout=0.5)
        except Exception:  # noqa: BLE001 - queue.Empty
            if not child.is_alive():
                try:
                    return results.get(timeout=0.5)
                except Exception:  # noqa: BLE001
                    return None


def _save(out: str, name: str, kind: str, number: int, data: bytes) -> str:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{name}-{kind}-{number}.bin")
    with open(path, "wb") as handle:
        handle.write(data)
    return path


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs per target (default 100000)")
    parser.add_argument("--seconds", type=float, default=float("inf"),
                        help="time limit per target, counted once it is loaded")
    parser.add_argument("--target", action="append", choices=discover(), help="run only these (repeatable)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "logbus-fuzz-findings"),
                        help="where failing inputs go (default: $TMPDIR/logbus-fuzz-findings)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--engine", choices=("auto", "random", "atheris"), default="auto",
                        help="atheris: coverage-guided (libFuzzer); random: the built-in mutator; "
                             "auto (default): atheris when it is installed")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    engine = args.engine
    if engine == "auto":
        engine = "atheris" if importlib.util.find_spec("atheris") else "random"
    reports = []
    for name in args.target or discover():
        report = run_target(name, args.inputs, args.seconds, seed, args.out, engine)
        reports.append(report)
        if not args.json:
            print(f"{name:>12}: {report.inputs:>9,} inputs in {report.seconds:>7.1f} s, {report.crashes} crashes, "
                  f"{report.unmapped} unmapped exceptions, peak RSS {report.peak_rss_mb:.0f} MB", flush=True)
            for finding in report.findings[:20]:
                print("    " + finding.replace("\n", "\n    "))
    total = {"engine": engine, "seed": seed, "inputs": sum(r.inputs for r in reports),
             "crashes": sum(r.crashes for r in reports),
             "unmapped": sum(r.unmapped for r in reports),
             "peak_rss_mb": max((r.peak_rss_mb for r in reports), default=0.0),
             "targets": [asdict(r) for r in reports]}
    if args.json:
        print(json.dumps(total))
    else:
        print(f"{'total':>12}: {total['inputs']:,} inputs, {total['crashes']} crashes, {total['unmapped']} unmapped "
              f"exceptions, peak RSS {total['peak_rss_mb']:.0f} MB ({engine}, seed {seed})")
    return 1 if total["crashes"] or total["unmapped"] else 0


if __name__ == "__main__":
    sys.exit(main())
