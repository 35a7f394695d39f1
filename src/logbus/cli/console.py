"""`logbus console`: serve the web console of a Kafka-compatible cluster (src/logbus/console).

    logbus console --bootstrap-server HOST:PORT [--port 8080] [--read-only] [--command-config FILE]

It binds loopback unless told otherwise: the console can create and delete topics, so serving it
on another address takes both `--host ADDRESS` and `--allow-remote`.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys

from .common import EXIT_USAGE, CliError, add_connection_options, client_config, import_confluent_kafka, positive_float

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "console", help="a web console for the cluster (topics, messages, groups, lag over time)",
        description="Serve a web console that talks to any Kafka-compatible cluster over the Kafka protocol.",
    )
    add_connection_options(parser)
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to serve on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to serve on (default {DEFAULT_PORT})")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a --host that is not a loopback address (anyone who reaches it can act)")
    parser.add_argument("--read-only", action="store_true", help="hide the action forms and refuse every POST")
    parser.add_argument("--sample-interval", type=positive_float, default=5.0, metavar="SECONDS",
                        help="how often lag and throughput are sampled (default 5)")
    parser.add_argument("--history", type=positive_float, default=3600.0, metavar="SECONDS",
                        help="how long samples are kept (default 3600)")
    parser.add_argument("--refresh", type=positive_float, default=5.0, metavar="SECONDS",
                        help="how often an open page refreshes its charts and tables (default 5)")
    parser.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                        help="a broker's Prometheus endpoint shown on the brokers page (repeatable)")
    parser.set_defaults(run=run_console)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_console(args: argparse.Namespace) -> int:
    if not is_loopback(args.host) and not args.allow_remote:
        raise CliError(f"refusing to serve the console on {args.host}, which is not a loopback address: "
                       "add --allow-remote if that is meant", EXIT_USAGE)
    kafka = import_confluent_kafka()
    try:
        import uvicorn

        from ..console.app import Settings, create_app
    except ImportError:
        raise CliError("the console needs its extra: pip install 'logbus[console]'") from None
    settings = Settings(client_config(args), timeout_s=args.timeout, read_only=args.read_only,
                        sample_interval_s=args.sample_interval, history_s=args.history, refresh_s=args.refresh,
                        metrics_urls=args.metrics_url)
    app = create_app(settings, kafka)
    print(f"logbus console for {args.bootstrap_server} on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0
