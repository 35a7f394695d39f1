"""Entry point of the `logbus` command."""

from __future__ import annotations

import argparse
import os
import sys

from . import serve
from .common import CliError


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser; their modules are imported here, not by `logbus serve` (serve_parser)."""
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
        share_groups,
        topics,
        transactions,
        users,
    )

    parser, subparsers = _parser()
    serve.add_parser(subparsers)
    topics.add_parser(subparsers)
    produce.add_parser(subparsers)
    consume.add_parser(subparsers)
    pipeline.add_parser(subparsers)
    groups.add_parser(subparsers)
    share_groups.add_parser(subparsers)
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


def serve_parser() -> argparse.ArgumentParser:
    """The parser of `logbus serve` alone: a broker (tests start hundreds) does not import the
    client commands and their clients, which take a tenth of its start-up."""
    parser, subparsers = _parser()
    serve.add_parser(subparsers)
    return parser


def _parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(prog="logbus", description="A Kafka-compatible log broker")
    return parser, parser.add_subparsers(dest="command", required=True)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    args = (serve_parser() if arguments[:1] == ["serve"] else build_parser()).parse_args(arguments)
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
