"""`logbus elect-leaders`: preferred or unclean leader election, like kafka-leader-election.sh.

    logbus elect-leaders --election-type preferred --all-topic-partitions
    logbus elect-leaders --election-type preferred --topic orders [--partition 0]
    logbus elect-leaders --election-type unclean --path-to-json-file partitions.json

The JSON file is Kafka's: `{"partitions":[{"topic":"t","partition":0}]}`.
"""

from __future__ import annotations

import argparse
import json

from .common import CliError, add_connection_options, client_config, describe_kafka_error, import_confluent_kafka

ELECTION_NOT_NEEDED = 84


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("elect-leaders", help="elect preferred (or unclean) leaders")
    parser.add_argument("--election-type", choices=("preferred", "unclean"), required=True, type=str.lower)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--all-topic-partitions", action="store_true")
    where.add_argument("--topic")
    where.add_argument("--path-to-json-file", metavar="FILE")
    parser.add_argument("--partition", type=int, help="with --topic: one partition (default: all of the topic)")
    add_connection_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    admin = kafka.admin.AdminClient(client_config(args))
    partitions = _partitions(args, admin, kafka)
    kind = kafka.ElectionType.PREFERRED if args.election_type == "preferred" else kafka.ElectionType.UNCLEAN
    try:
        results = admin.elect_leaders(kind, partitions).result(args.timeout)  # (its kwargs crash confluent 2.x)
    except kafka.KafkaException as exc:
        raise CliError(f"leader election failed: {describe_kafka_error(exc.args[0])}") from None
    elected = sorted(f"{tp.topic}-{tp.partition}" for tp, error in results.items() if error is None)
    not_needed = sorted(f"{tp.topic}-{tp.partition}" for tp, error in results.items()
                        if error is not None and error.code() == ELECTION_NOT_NEEDED)
    failed = sorted((f"{tp.topic}-{tp.partition}", describe_kafka_error(error)) for tp, error in results.items()
                    if error is not None and error.code() != ELECTION_NOT_NEEDED)
    name = args.election_type.upper()
    if elected:
        print(f"Successfully completed leader election ({name}) for partitions {', '.join(elected)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for where, error in failed:
        print(f"Error completing leader election ({name}) for partition: {where}: {error}")
    return 1 if failed else 0


def _partitions(args: argparse.Namespace, admin: object, kafka: object) -> list | None:
    if args.all_topic_partitions:
        return None
    if args.path_to_json_file:
        try:
            with open(args.path_to_json_file, encoding="utf-8") as handle:
                wanted = json.load(handle)["partitions"]
        except (OSError, ValueError, KeyError) as exc:
            raise CliError(f"cannot read {args.path_to_json_file}: {exc}") from None
        return [kafka.TopicPartition(p["topic"], int(p["partition"])) for p in wanted]  # type: ignore[attr-defined]
    if args.partition is not None:
        return [kafka.TopicPartition(args.topic, args.partition)]  # type: ignore[attr-defined]
    topic = admin.list_topics(args.topic, timeout=args.timeout).topics.get(args.topic)  # type: ignore[attr-defined]
    if topic is None or topic.error is not None:
        raise CliError(f"topic '{args.topic}' does not exist")
    return [kafka.TopicPartition(args.topic, p) for p in sorted(topic.partitions)]  # type: ignore[attr-defined]
