"""`logbus log-dirs describe`: what each broker's log directories hold, like kafka-log-dirs.sh.

    logbus log-dirs describe [--topic-list a,b] [--broker-list 1,2]

Asks each broker with DescribeLogDirs (v2, every partition) and prints kafka-log-dirs' lines:
"Querying brokers for log directories information", "Received log directory information from
brokers 1,2", then one line of JSON, `{"brokers":[{"broker":1,"logDirs":[{"logDir":...,
"error":null,"partitions":[{"partition":"t-0","size":..,"offsetLag":0,"isFuture":false}]}]}],
"version":1}`. `--topic-list` filters the partitions on the client side, as Kafka's tool does.
confluent-kafka's AdminClient has no DescribeLogDirs: the request goes through the small
blocking client of `logbus.client` (`client/admin.py`, which the console uses too).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..client.admin import describe_log_dirs
from ..client.client import Client
from ..client.errors import KafkaError
from .common import EXIT_USAGE, CliError, add_connection_options, protocol_client


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "log-dirs", help="describe the log directories of brokers (kafka-log-dirs.sh)",
        description="Print, as JSON, the partitions each broker's log directories hold, with their sizes.",
    )
    add_connection_options(parser)
    actions = parser.add_subparsers(dest="log_dirs_action", required=True, metavar="ACTION")
    describe = actions.add_parser("describe", help="describe log directories")
    describe.add_argument("--topic-list", default="", metavar="T1,T2",
                          help="only the partitions of these topics (default: all)")
    describe.add_argument("--broker-list", default="", metavar="ID1,ID2", help="only these brokers (default: all)")
    add_connection_options(describe, inherited=True)
    describe.set_defaults(run=run_describe)


def _names(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _broker_ids(text: str) -> list[int]:
    try:
        return [int(item) for item in _names(text)]
    except ValueError:
        raise CliError(f"--broker-list expects broker ids such as 1,2, got {text!r}", EXIT_USAGE) from None


def run_describe(args: argparse.Namespace) -> int:
    topics = set(_names(args.topic_list))
    wanted = _broker_ids(args.broker_list)
    client = protocol_client(args)
    try:
        print("Querying brokers for log directories information")
        document = describe(client, wanted, topics)
    except (OSError, KafkaError) as exc:
        raise CliError(f"cannot describe log dirs at {args.bootstrap_server}: {exc}") from None
    finally:
        client.close()
    print("Received log directory information from brokers " + ",".join(str(b["broker"]) for b in document["brokers"]))
    print(json.dumps(document, separators=(",", ":")))
    return 0


def describe(client: Client, wanted: list[int], topics: set[str]) -> dict[str, Any]:
    """Kafka's JSON document for the brokers `wanted` (all when empty), partitions of `topics` (all when empty)."""
    client.partitions(())
    existing = sorted(client.brokers)
    missing = sorted(set(wanted) - set(existing))
    if missing:
        raise CliError(
            f"The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
            f"Current existent brokers: {','.join(map(str, existing))}"
        )
    return describe_log_dirs(client, wanted or existing, topics)
