"""`logbus topics create|list|describe|alter|delete`: topic administration, like kafka-topics.sh.

Talks to the broker with confluent-kafka's AdminClient (CreateTopics, Metadata, DescribeConfigs,
CreatePartitions, IncrementalAlterConfigs, DeleteTopics).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import (
    EXIT_USAGE,
    CliError,
    add_connection_options,
    client_config,
    describe_kafka_error,
    import_confluent_kafka,
    parse_key_values,
    topic_error,
    unreachable,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("topics", help="create, list, describe, alter or delete topics")
    actions = parser.add_subparsers(dest="action", required=True)

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=-1, help="partition count (default num.partitions)")
    create.add_argument(
        "--replication-factor", type=int, default=-1, help="replicas per partition (default default.replication.factor)"
    )
    _add_config_option(create)
    create.set_defaults(run=run_create)

    listing = actions.add_parser("list", help="list topic names")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", help="show partitions, leaders, replicas, ISR and configs")
    describe.add_argument("name", nargs="?", help="one topic (default: all)")
    describe.set_defaults(run=run_describe)

    alter = actions.add_parser("alter", help="add partitions or change topic configs")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, help="new (larger) partition count")
    _add_config_option(alter)
    alter.add_argument(
        "--delete-config", action="append", default=[], metavar="KEY", help="reset a config to its default (repeatable)"
    )
    alter.set_defaults(run=run_alter)

    delete = actions.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name")
    delete.set_defaults(run=run_delete)

    for action in (create, listing, describe, alter, delete):
        add_connection_options(action)


def _add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config (repeatable)"
    )


def _admin(args: argparse.Namespace) -> Any:
    kafka = import_confluent_kafka()
    return kafka.admin.AdminClient(client_config(args, **{"socket.timeout.ms": int(args.timeout * 1000)}))


def _await(future: Any, args: argparse.Namespace, topic: str) -> Any:
    """The result of one admin future, with failures turned into `CliError`s about `topic`."""
    kafka = import_confluent_kafka()
    try:
        return future.result(timeout=args.timeout + 1)
    except kafka.KafkaException as exc:
        raise _admin_error(exc.args[0], args, topic) from None
    except TimeoutError:
        raise unreachable(args) from None


def _admin_error(error: Any, args: argparse.Namespace, topic: str) -> CliError:
    kafka = import_confluent_kafka()
    code = error.code() if hasattr(error, "code") else None
    if code == kafka.KafkaError.TOPIC_ALREADY_EXISTS:
        return CliError(f"topic '{topic}' already exists")
    if code == kafka.KafkaError._TRANSPORT:
        return CliError(f"the broker at {args.bootstrap_server} dropped the connection: {describe_kafka_error(error)}")
    if code == kafka.KafkaError._UNSUPPORTED_FEATURE:
        return CliError(f"the broker does not support this operation: {describe_kafka_error(error)}")
    return topic_error(error, args, topic)


def _list_names(admin: Any, args: argparse.Namespace) -> list[str]:
    kafka = import_confluent_kafka()
    try:
        metadata = admin.list_topics(timeout=args.timeout)
    except kafka.KafkaException:
        raise unreachable(args) from None
    return sorted(metadata.topics)


def run_create(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    configs = parse_key_values(args.config, "--config")
    admin = _admin(args)
    new_topic = kafka.admin.NewTopic(
        args.name, num_partitions=args.partitions, replication_factor=args.replication_factor, config=configs
    )
    futures = admin.create_topics([new_topic], request_timeout=args.timeout)
    _await(futures[args.name], args, args.name)
    print(f"Created topic {args.name}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    for name in _list_names(_admin(args), args):
        print(name)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    admin = _admin(args)
    names = [args.name] if args.name else _list_names(admin, args)
    if not names:
        return 0
    futures = admin.describe_topics(kafka.TopicCollection(names), request_timeout=args.timeout)
    descriptions = [_await(futures[name], args, name) for name in names]
    overrides = _non_default_configs(admin, args, names)
    live = {node.id for node in admin.describe_cluster(request_timeout=args.timeout).result(args.timeout).nodes}
    for description in descriptions:
        print(format_description(description, overrides.get(description.name), live))
    return 0


def _non_default_configs(admin: Any, args: argparse.Namespace, names: list[str]) -> dict[str, dict[str, str]]:
    """Per topic, the configs set on the topic itself; empty (with a note) if the broker cannot say."""
    kafka = import_confluent_kafka()
    resources = [kafka.admin.ConfigResource(kafka.admin.ResourceType.TOPIC, name) for name in names]
    futures = admin.describe_configs(resources, request_timeout=args.timeout)
    overrides: dict[str, dict[str, str]] = {}
    for resource, future in futures.items():
        try:
            entries = future.result(timeout=args.timeout + 1)
        except kafka.KafkaException as exc:
            if exc.args[0].code() != kafka.KafkaError._UNSUPPORTED_FEATURE:
                raise _admin_error(exc.args[0], args, resource.name) from None
            print("logbus: configs not shown: the broker does not support DescribeConfigs", file=sys.stderr)
            return {}
        overrides[resource.name] = {
            entry.name: "<sensitive>" if entry.is_sensitive else entry.value
            for entry in entries.values()
            if entry.source == kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value  # entries carry the int
        }
    return overrides


def format_description(description: Any, configs: dict[str, str] | None, live: set[int] | None = None) -> str:
    """kafka-topics.sh's layout: a topic line, then one tab-indented line per partition (with
    `Offline:` listing replicas on brokers that are not alive, as kafka-topics shows them)."""
    partitions = sorted(description.partitions, key=lambda p: p.id)
    replication = len(partitions[0].replicas) if partitions else 0
    config_text = ",".join(f"{k}={v}" for k, v in sorted((configs or {}).items()))
    lines = [
        f"Topic: {description.name}\tTopicId: {description.topic_id}\tPartitionCount: {len(partitions)}"
        f"\tReplicationFactor: {replication}\tConfigs: {config_text}"
    ]
    for partition in partitions:
        leader = partition.leader.id if partition.leader is not None else "none"
        replicas = ",".join(str(node.id) for node in partition.replicas)
        isr = ",".join(str(node.id) for node in partition.isr)
        offline = ",".join(str(node.id) for node in partition.replicas if live is not None and node.id not in live)
        lines.append(
            f"\tTopic: {description.name}\tPartition: {partition.id}\tLeader: {leader}"
            f"\tReplicas: {replicas}\tIsr: {isr}" + (f"\tOffline: {offline}" if offline else "")
        )
    return "\n".join(lines)


def run_alter(args: argparse.Namespace) -> int:
    configs = parse_key_values(args.config, "--config")
    if args.partitions is None and not configs and not args.delete_config:
        raise CliError("nothing to alter: give --partitions, --config or --delete-config", EXIT_USAGE)
    admin = _admin(args)
    if args.partitions is not None:
        _add_partitions(admin, args)
    if configs or args.delete_config:
        _alter_configs(admin, args, configs)
    print(f"Altered topic {args.name}.")
    return 0


def _add_partitions(admin: Any, args: argparse.Namespace) -> None:
    kafka = import_confluent_kafka()
    futures = admin.create_partitions(
        [kafka.admin.NewPartitions(args.name, args.partitions)], request_timeout=args.timeout
    )
    _await(futures[args.name], args, args.name)


def _alter_configs(admin: Any, args: argparse.Namespace, configs: dict[str, str]) -> None:
    kafka = import_confluent_kafka()
    admin_module = kafka.admin
    entries = [
        admin_module.ConfigEntry(key, value, incremental_operation=admin_module.AlterConfigOpType.SET)
        for key, value in configs.items()
    ] + [
        admin_module.ConfigEntry(key, None, incremental_operation=admin_module.AlterConfigOpType.DELETE)
        for key in args.delete_config
    ]
    resource = admin_module.ConfigResource(admin_module.ResourceType.TOPIC, args.name, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], request_timeout=args.timeout)
    for future in futures.values():
        _await(future, args, args.name)


def run_delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    futures = admin.delete_topics([args.name], request_timeout=args.timeout)
    _await(futures[args.name], args, args.name)
    print(f"Deleted topic {args.name}.")
    return 0
