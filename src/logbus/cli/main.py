"""Entry point of the `logbus` command."""

from __future__ import annotations

import argparse
import sys

from . import serve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logbus", description="A Kafka-compatible log broker")
    subparsers = parser.add_subparsers(dest="command", required=True)
    serve.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
