"""`logbus configs describe|alter`: topic and broker configs, like kafka-configs.sh.

    logbus configs describe --entity-type topics|brokers|groups [--entity-name X | --entity-default] [--all]
    logbus configs alter --entity-type topics|brokers|groups (--entity-name X | --entity-default)
        [--add-config k1=v1,k2=[a,b]] [--delete-config k1,k2]

Through DescribeConfigs (v4, with synonyms) and IncrementalAlterConfigs (v1), sent with the small
blocking client of `logbus.client`: confluent-kafka's AdminClient cannot name the
cluster-wide broker default (an empty broker name). Output lines are kafka-configs.sh's.
Without `--all`, describe shows what kafka-configs shows: the configs set on the entity itself
(a topic's overrides; a broker's dynamic configs; with `--entity-default`, the cluster-wide
dynamic defaults; a group's own KIP-848 configs). Without `--entity-name`, every topic or every
broker is described; a group is always named.
"""

from __future__ import annotations

import argparse
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..broker.topic_configs import AlterOp, ResourceType
from ..client.client import Client
from ..client.errors import KafkaError
from ..config import ConfigSource
from ..protocol.codec import make
from .common import EXIT_USAGE, CliError, add_connection_options, protocol_client

DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION = 32, 4
ALTER_CONFIGS, ALTER_CONFIGS_VERSION = 44, 1
ENTITY_TYPES = ("topics", "brokers", "groups")
# The configs kafka-configs shows without --all: the ones from this source, per entity kind.
OWN_SOURCE = {"topic": ConfigSource.DYNAMIC_TOPIC_CONFIG, "broker": ConfigSource.DYNAMIC_BROKER_CONFIG,
              "default": ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, "group": ConfigSource.DYNAMIC_GROUP_CONFIG}
RESOURCE_TYPES = {"topic": ResourceType.TOPIC, "broker": ResourceType.BROKER, "default": ResourceType.BROKER,
                  "group": ResourceType.GROUP}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "configs", help="describe or alter topic, broker and group configs (kafka-configs.sh)",
        description="Describe or alter the configs of topics, brokers and groups, as kafka-configs.sh.",
    )
    add_connection_options(parser)
    actions = parser.add_subparsers(dest="configs_action", required=True, metavar="ACTION")
    describe = actions.add_parser("describe", help="list the configs of an entity")
    describe.add_argument("--all", action="store_true", help="all configs, not only the ones set on the entity")
    describe.set_defaults(run=run_describe)
    alter = actions.add_parser("alter", help="set or delete configs of an entity")
    alter.add_argument("--add-config", default="", metavar="K=V,...",
                       help="configs to set: 'k1=v1,k2=[v1,v2],k3=v3' (brackets group a list value)")
    alter.add_argument("--delete-config", default="", metavar="K,...", help="configs to reset to their default")
    alter.set_defaults(run=run_alter)
    for action in (describe, alter):
        action.add_argument("--entity-type", required=True, choices=ENTITY_TYPES)
        names = action.add_mutually_exclusive_group()
        names.add_argument("--entity-name", help="the topic name, broker id or group id")
        names.add_argument("--entity-default", action="store_true", help="the cluster-wide broker default")
        add_connection_options(action, inherited=True)


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs' --add-config syntax: `k1=v1,k2=[v1,v2],k3=v3` (a bracketed value keeps its
    commas, without the brackets)."""
    configs: dict[str, str] = {}
    for item in _split_outside_brackets(text):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--add-config expects k1=v1,k2=v2, got {item!r}", EXIT_USAGE)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        configs[key.strip()] = value
    return configs


def _split_outside_brackets(text: str) -> list[str]:
    items, depth, current = [], 0, []
    for char in text:
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        current.append(char)
    items.append("".join(current))
    return [item for item in items if item.strip()]


def _entity_kind(args: argparse.Namespace) -> str:
    if args.entity_type != "brokers" and args.entity_default:
        raise CliError(f"--entity-default applies to brokers, not {args.entity_type}", EXIT_USAGE)
    if args.entity_type == "groups" and args.entity_name is None:
        raise CliError("--entity-name is required for groups", EXIT_USAGE)
    if args.entity_type != "brokers":
        return args.entity_type.removesuffix("s")
    return "default" if args.entity_default else "broker"


def _request(api_key: int, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


def _call(client: Client, kind: str, name: str, api_key: int, version: int, body: Any) -> Any:
    """Send to the broker a broker resource names (as Kafka's admin client does), else to any."""
    if kind == "broker":
        if not name.isdigit():
            raise CliError(f"--entity-name of a broker is its id, got {name!r}", EXIT_USAGE)
        return client.call_broker(int(name), api_key, body, version)
    return client.call_any(api_key, body, version)


def _check(error_code: ErrorCode, message: str | None, kind: str, name: str) -> None:
    if error_code != ErrorCode.none:
        entity = "the broker default" if kind == "default" else f"{kind} '{name}'"
        raise CliError(f"{entity}: {message or error_code.name.upper()}")


def _entity_names(client: Client, args: argparse.Namespace, kind: str) -> list[str]:
    """The entities to describe: the one named, or every topic or broker."""
    if kind == "default":
        return [""]
    if args.entity_name is not None:
        return [args.entity_name]
    topics = client.partitions()
    if kind == "topic":
        return sorted(topics)
    return [str(broker_id) for broker_id in sorted(client.brokers)]


def _connected(args: argparse.Namespace, action: Any) -> int:
    """Run `action(client)`; connection trouble becomes one CliError line."""
    client = protocol_client(args)
    try:
        action(client)
    except OSError as exc:
        raise CliError(f"cannot reach a broker at {args.bootstrap_server}: {exc}") from None
    except KafkaError as exc:
        raise CliError(str(exc)) from None
    finally:
        client.close()
    return 0


def run_describe(args: argparse.Namespace) -> int:
    kind = _entity_kind(args)
    return _connected(args, lambda client: _describe(client, args, kind))


def _describe(client: Client, args: argparse.Namespace, kind: str) -> None:
    module = _request(DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION)
    for name in _entity_names(client, args, kind):
        resource = make(module.DescribeConfigsResource, resource_type=RESOURCE_TYPES[kind], resource_name=name,
                        configuration_keys=None)
        request = make(module.DescribeConfigsRequest, resources=(resource,), include_synonyms=True,
                       include_documentation=False)
        result = _call(client, kind, name, DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, request).results[0]
        _check(result.error_code, result.error_message, kind, name)
        print(describe_heading(kind, name, args.all))
        for entry in sorted(result.configs, key=lambda e: e.name):
            if args.all or entry.config_source == OWN_SOURCE[kind]:
                print(format_entry(entry))


def describe_heading(kind: str, name: str, describe_all: bool) -> str:
    if kind == "default":
        return "Default configs for brokers in the cluster are:"
    return f"{'All' if describe_all else 'Dynamic'} configs for {kind} {name} are:"


def format_entry(entry: Any) -> str:
    """kafka-configs' line: `  name=value sensitive=false synonyms={SOURCE:name=value, ...}`."""
    synonyms = ", ".join(
        f"{_source_name(synonym.source)}:{synonym.name}={_shown(synonym.value, entry.is_sensitive)}"
        for synonym in entry.synonyms
    )
    return (f"  {entry.name}={_shown(entry.value, entry.is_sensitive)} "
            f"sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}")


def _shown(value: str | None, sensitive: bool) -> str:
    """A value as Kafka's ConfigEntry prints it: null for a sensitive or unset one."""
    return "null" if sensitive or value is None else value


def _source_name(source: int) -> str:
    try:
        return ConfigSource(source).name
    except ValueError:
        return ConfigSource.UNKNOWN.name


def run_alter(args: argparse.Namespace) -> int:
    kind = _entity_kind(args)
    if kind != "default" and args.entity_name is None:
        raise CliError("--entity-name (or --entity-default for brokers) is required with alter", EXIT_USAGE)
    to_set = parse_add_config(args.add_config)
    to_delete = [key.strip() for key in args.delete_config.split(",") if key.strip()]
    if not to_set and not to_delete:
        raise CliError("at least one of --add-config or --delete-config must be given", EXIT_USAGE)
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise CliError(f"configs both added and deleted: {','.join(both)}", EXIT_USAGE)
    name = "" if kind == "default" else args.entity_name
    module = _request(ALTER_CONFIGS, ALTER_CONFIGS_VERSION)
    configs = tuple(make(module.AlterableConfig, name=k, config_operation=AlterOp.SET, value=v)
                    for k, v in to_set.items())
    configs += tuple(make(module.AlterableConfig, name=k, config_operation=AlterOp.DELETE, value=None)
                     for k in to_delete)
    resource = make(module.AlterConfigsResource, resource_type=RESOURCE_TYPES[kind], resource_name=name,
                    configs=configs)
    request = make(module.IncrementalAlterConfigsRequest, resources=(resource,), validate_only=False)

    def alter(client: Client) -> None:
        answer = _call(client, kind, name, ALTER_CONFIGS, ALTER_CONFIGS_VERSION, request).responses[0]
        _check(answer.error_code, answer.error_message, kind, name)

    _connected(args, alter)
    if kind == "default":
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {kind} {name}.")
    return 0
