"""`logbus pipeline demo|generate|job|show`: the reference Spark pipeline (`logbus.spark.pipeline`).

Needs the `spark` extra (`pip install 'logbus[spark]'`) and a Java 17 runtime for the job.
"""

from __future__ import annotations

import argparse
import importlib.util

from ..spark import pipeline
from .common import CliError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("pipeline", help="reference Spark pipeline: orders -> windowed revenue")
    pipeline.add_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    for module in ("pyspark", "pyarrow", "numpy"):
        if importlib.util.find_spec(module) is None:
            raise CliError(f"{module} is not installed: pip install 'logbus[spark]'")
    return pipeline.run(args)
