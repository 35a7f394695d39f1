"""Entry point of the `logbus` command."""

from __future__ import annotations

import argparse
import os
import sys

from . import (
    acls,
    certs,
    cluster,
    configs,
    console,
    consume,
    dump_log,
    elect_leaders,
    groups,
    log_dirs,
    perf,
    pipeline,
    produce,
    quotas,
    reassign,
    serve,
    topics,
    transactions,
    users,
)
from .common import CliError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logbus", description="A Kafka-compatible log broker")
    subparsers = parser.add_subparsers(dest="command", required=True)
    serve.add_parser(subparsers)
    topics.add_parser(subparsers)
    produce.add_parser(subparsers)
    consume.add_parser(subparsers)
    pipeline.add_parser(subparsers)
    groups.add_parser(subparsers)
    cluster.add_parser(subparsers)
    reassign.add_parser(subparsers)
    elect_leaders.add_parser(subparsers)
    transactions.add_parser(subparsers)
    acls.add_parser(subparsers)
    users.add_parser(subparsers)
    quotas.add_parser(subparsers)
    certs.add_parser(subparsers)
    dump_log.add_parser(subparsers)
    configs.add_parser(subparsers)
    log_dirs.add_parser(subparsers)
    console.add_parser(subparsers)
    perf.add_producer_parser(subparsers)
    perf.add_consumer_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CliError as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`logbus consume ... | head`); keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
