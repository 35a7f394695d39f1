"""The command line the cluster benches share (acks_all_latency, replication_cost, cluster_bench):
`--reps`, `--out` (a JSON file in bench/results by default), and for the benches that compare
source trees `--code name=path`, with the date stamp their results start with."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def bench_parser(doc: str, results_file: str, code: bool = False) -> argparse.ArgumentParser:
    """A parser described by the first paragraph of `doc`, with `--reps`, `--out` (default
    bench/results/`results_file`) and, with `code`, the repeatable `--code name=path`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(RESULTS_DIR, results_file))
    if code:
        parser.add_argument("--code", action="append", default=[], help="name=path of a src tree (repeatable)")
    return parser


def code_trees(args: argparse.Namespace) -> dict[str, str]:
    """The `--code` trees by name; this checkout's src when none is given."""
    return dict(item.split("=", 1) for item in args.code) or {"this": "src"}


@contextmanager
def code_on_path(src: str) -> Iterator[None]:
    """Brokers started inside import logbus from `src`."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.path.abspath(src)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def run_date() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
