"""`logbus quotas`: describe and alter client quotas, as `kafka-configs --entity-type users/clients/ips`
does through DescribeClientQuotas and AlterClientQuotas (KIP-546).

    logbus quotas describe [--user U | --user-defaults] [--client-id C | --client-defaults] [--ip A | --ip-defaults]
    logbus quotas alter (--user U | --user-defaults) [--client-id C | --client-defaults]
                        [--add-config producer_byte_rate=1048576,consumer_byte_rate=2097152]
                        [--delete-config request_percentage,...]
    logbus quotas alter (--ip A | --ip-defaults) --add-config connection_creation_rate=10

`describe` without an entity lists every entity that has quotas; with one (or a user and a client
id) it shows exactly that entity, as kafka-configs does. Keys: producer_byte_rate,
consumer_byte_rate (bytes per second), request_percentage (percent of one request handler's
time), controller_mutation_rate (partitions created or deleted per second); of an ip (never combined
with a user or client id): connection_creation_rate (connections accepted per second, KIP-612).

confluent-kafka's AdminClient has neither API, so this speaks them through the small blocking
client of `logbus.client`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..client.client import Client
from ..client.errors import KafkaError
from ..protocol.codec import make
from ..security.quotas import CLIENT_ID, IP, USER
from .common import EXIT_USAGE, CliError, add_connection_options, protocol_client

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
VERSION = 1
MATCH_EXACT, MATCH_DEFAULT = 0, 1
ENTITY_LABELS = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "quotas", help="describe and alter client quotas (kafka-configs --entity-type users/clients/ips)",
        description="Describe and alter quotas of users, client ids, (user, client id) pairs and client IPs.",
    )
    add_connection_options(parser)
    parser.set_defaults(run=run)
    commands = parser.add_subparsers(dest="quotas_command", required=True, metavar="COMMAND")
    describe = commands.add_parser("describe", help="show quotas")
    describe.set_defaults(action=_describe)
    alter = commands.add_parser("alter", help="set or delete quotas of one entity")
    alter.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V...]",
                       help="quotas to set, e.g. producer_byte_rate=1048576")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K[,K...]",
                       help="quotas to delete")
    alter.set_defaults(action=_alter)
    for command in (describe, alter):
        _add_entity_options(command)
        add_connection_options(command, inherited=True)


def _add_entity_options(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="USER", help="a user principal's name (User:<name>; ANONYMOUS on PLAINTEXT)")
    user.add_argument("--user-defaults", action="store_true", help="the default user entity")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", metavar="ID", help="a client id")
    client.add_argument("--client-defaults", action="store_true", help="the default client-id entity")
    ip = parser.add_mutually_exclusive_group()
    ip.add_argument("--ip", metavar="ADDRESS", help="a client IP address (connection_creation_rate)")
    ip.add_argument("--ip-defaults", action="store_true", help="the default ip entity")


def run(args: argparse.Namespace) -> int:
    client = protocol_client(args)
    try:
        args.action(client, args)
    except (OSError, KafkaError) as exc:
        raise CliError(f"{args.quotas_command} failed: {exc}") from None
    finally:
        client.close()
    return 0


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """(entity type, name or None for the default) as the options name it; [] for none."""
    parts: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_defaults:
        parts.append((USER, args.user))
    if args.client_id is not None or args.client_defaults:
        parts.append((CLIENT_ID, args.client_id))
    if args.ip is not None or args.ip_defaults:
        parts.append((IP, args.ip))
    return parts


def _module(api_key: int) -> Any:
    return load_payload_module(api_key, VERSION, EntityType.request)


def _describe(client: Client, args: argparse.Namespace) -> None:
    module = _module(DESCRIBE_CLIENT_QUOTAS)
    parts = _entity(args)
    components = tuple(make(module.ComponentData, entity_type=kind, match_type=MATCH_DEFAULT if name is None
                            else MATCH_EXACT, match=name) for kind, name in parts)
    request = make(module.DescribeClientQuotasRequest, components=components, strict=bool(parts))
    answer = client.call_any(DESCRIBE_CLIENT_QUOTAS, request, VERSION)
    if answer.error_code != ErrorCode.none:
        raise KafkaError(f"{answer.error_code.name.upper()}: {answer.error_message}")
    for entry in answer.entries:
        values = ", ".join(f"{value.key}={value.value}" for value in entry.values)
        sys.stdout.write(f"Quota configs for {_label([(e.entity_type, e.entity_name) for e in entry.entity])} "
                         f"are {values}\n")


def _label(parts: list[tuple[str, str | None]]) -> str:
    return ", ".join(f"the default {ENTITY_LABELS.get(kind, kind)}" if name is None
                     else f"{ENTITY_LABELS.get(kind, kind)} '{name}'" for kind, name in parts)


def _alter(client: Client, args: argparse.Namespace) -> None:
    parts = _entity(args)
    if not parts:
        raise CliError("alter needs an entity: --user, --user-defaults, --client-id, --client-defaults, --ip or "
                       "--ip-defaults", EXIT_USAGE)
    ops = _ops(args.add_config, args.delete_config)
    if not ops:
        raise CliError("alter needs --add-config or --delete-config", EXIT_USAGE)
    module = _module(ALTER_CLIENT_QUOTAS)
    entry = make(module.EntryData,
                 entity=tuple(make(module.EntityData, entity_type=kind, entity_name=name) for kind, name in parts),
                 ops=tuple(make(module.OpData, key=key, value=value or 0.0, remove=value is None)
                           for key, value in ops.items()))
    answer = client.call_any(ALTER_CLIENT_QUOTAS, make(module.AlterClientQuotasRequest, entries=(entry,),
                                                       validate_only=False), VERSION)
    result = answer.entries[0]
    if result.error_code != ErrorCode.none:
        raise KafkaError(f"{result.error_code.name.upper()}: {result.error_message}")
    sys.stdout.write(f"Completed updating config for {_label(parts)}.\n")


def _ops(added: list[str], deleted: list[str]) -> dict[str, float | None]:
    """Key -> value to set, or None to delete; comma-separated lists as kafka-configs takes them."""
    ops: dict[str, float | None] = {}
    for item in (piece for text in added for piece in text.split(",") if piece.strip()):
        key, sep, value = item.partition("=")
        try:
            ops[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key.strip():
            raise CliError(f"--add-config expects KEY=NUMBER, got {item!r}", EXIT_USAGE)
    for key in (piece.strip() for text in deleted for piece in text.split(",") if piece.strip()):
        if key in ops:
            raise CliError(f"{key} is both added and deleted", EXIT_USAGE)
        ops[key] = None
    return ops
