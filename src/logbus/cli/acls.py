"""`logbus acls`: add, list and remove ACLs, with kafka-acls.sh's options and output.

    logbus acls add --allow-principal User:alice [--allow-host H] --operation Read --operation Write \\
        --topic orders [--resource-pattern-type prefixed]
    logbus acls add --deny-principal User:mallory --operation All --group g
    logbus acls list [--topic T | --group G | --cluster | --transactional-id ID] [--principal P]
        [--resource-pattern-type literal|prefixed|match|any]
    logbus acls remove --allow-principal User:alice --operation Write --topic orders
    logbus acls add --allow-principal User:app --producer --topic orders [--transactional-id T] [--idempotent]
    logbus acls add --allow-principal User:app --consumer --topic orders --group billing

`add` creates one ACL for every combination of resource, principal, host and operation (hosts
default to `*`, operations to All). As kafka-acls, `--producer` grants Write, Describe and
Create on the topics (Write and Describe on the transactional ids; `--idempotent` adds
IdempotentWrite on the cluster), `--consumer` Read and Describe on the topics and Read on the
groups. `remove` deletes those same ACLs, or, given no principal,
every ACL of the resources named. `list` shows the ACLs of the resources named, or all of them;
pattern type `match` lists what applies to a resource (literal, wildcard and prefixed ACLs). The
broker must have an authorizer (`authorizer.class.name`) and the caller Alter (add, remove) or
Describe (list) on the cluster.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from ..security.acl import CLUSTER_NAME, OPERATION_NAMES, AclOperation
from .common import CliError, add_connection_options, client_config, describe_kafka_error, import_confluent_kafka

_OPERATIONS = {name.lower(): op for op, name in OPERATION_NAMES.items()
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
PATTERN_TYPES = ("literal", "prefixed", "match", "any")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("acls", help="add, list and remove ACLs (kafka-acls)",
                                   description="Manage the ACLs of a broker with an authorizer.")
    add_connection_options(parser)
    commands = parser.add_subparsers(dest="acls_command", required=True, metavar="COMMAND")
    for name, run, help_text in (("add", _add, "add ACLs"), ("list", _list, "list ACLs"),
                                 ("remove", _remove, "remove ACLs")):
        command = commands.add_parser(name, help=help_text)
        _add_resource_options(command)
        if name == "list":
            command.add_argument("--principal", action="append", default=[], help="only ACLs of this principal")
        else:
            _add_entry_options(command)
        add_connection_options(command, inherited=True)
        command.set_defaults(run=run)


def _add_resource_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", action="append", default=[], help="a topic (repeatable)")
    parser.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
    parser.add_argument("--transactional-id", action="append", default=[], help="a transactional id (repeatable)")
    parser.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
    parser.add_argument("--resource-pattern-type", choices=PATTERN_TYPES, type=str.lower, default=None,
                        help="literal (default), prefixed; for list and remove also match and any")


def _add_entry_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST", help="default: *")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST", help="default: *")
    parser.add_argument("--operation", action="append", default=[], type=_operation,
                        help=f"one of {', '.join(OPERATION_NAMES[op] for op in _OPERATIONS.values())} "
                             "(repeatable; default All)")
    role = parser.add_mutually_exclusive_group()
    role.add_argument("--producer", action="store_true", help="what a producer needs (see above)")
    role.add_argument("--consumer", action="store_true", help="what a consumer needs (with --group)")
    parser.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")


def _operation(text: str) -> AclOperation:
    found = _OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if found is None:
        raise argparse.ArgumentTypeError(f"unknown operation {text!r}")
    return found


def _resources(args: argparse.Namespace, kafka: Any, required: bool) -> list[tuple[Any, str]]:
    types = kafka.admin.ResourceType
    resources = [(types.TOPIC, t) for t in args.topic] + [(types.GROUP, g) for g in args.group] + \
        [(types.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        resources.append((types.BROKER, CLUSTER_NAME))
    if required and not resources:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster", 2)
    return resources


def _pattern_type(args: argparse.Namespace, kafka: Any, default: str) -> Any:
    return getattr(kafka.admin.ResourcePatternType, (args.resource_pattern_type or default).upper())


def _principals(args: argparse.Namespace, kafka: Any, required: bool) -> list[tuple[str, str, Any]]:
    """(principal, host, permission) for every principal and host the options name."""
    permission = kafka.admin.AclPermissionType
    found = [(p, h, kind) for principals, hosts, kind in (
        (args.allow_principal, args.allow_host, permission.ALLOW),
        (args.deny_principal, args.deny_host, permission.DENY),
    ) for p, h in itertools.product(principals, hosts or ["*"])]
    if required and not found:
        raise CliError("name a principal: --allow-principal or --deny-principal", 2)
    return found


def _grants(args: argparse.Namespace, kafka: Any) -> list[tuple[Any, str, Any]]:
    """(resource type, name, operation) to grant or deny: the resources times the operations, or
    what `--producer` / `--consumer` stand for."""
    types, ops = kafka.admin.ResourceType, kafka.admin.AclOperation
    if args.consumer:
        if not args.topic or not args.group:
            raise CliError("--consumer needs --topic and --group", 2)
        return [(types.TOPIC, t, op) for t in args.topic for op in (ops.READ, ops.DESCRIBE)] + \
            [(types.GROUP, g, ops.READ) for g in args.group]
    if args.producer:
        if not args.topic and not args.transactional_id:
            raise CliError("--producer needs --topic or --transactional-id", 2)
        grants = [(types.TOPIC, t, op) for t in args.topic for op in (ops.WRITE, ops.DESCRIBE, ops.CREATE)]
        grants += [(types.TRANSACTIONAL_ID, t, op) for t in args.transactional_id for op in (ops.WRITE, ops.DESCRIBE)]
        if args.idempotent:
            grants.append((types.BROKER, CLUSTER_NAME, ops.IDEMPOTENT_WRITE))
        return grants
    operations = [ops[op.name] for op in args.operation] or [ops.ALL]
    return [(rtype, name, op) for (rtype, name), op in itertools.product(_resources(args, kafka, True), operations)]


def _add(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    if (args.resource_pattern_type or "literal") not in ("literal", "prefixed"):
        raise CliError("add takes --resource-pattern-type literal or prefixed", 2)
    pattern = _pattern_type(args, kafka, "literal")
    bindings = [kafka.admin.AclBinding(rtype, name, pattern, principal, host, op, permission)
                for (rtype, name, op), (principal, host, permission) in itertools.product(
                    _grants(args, kafka), _principals(args, kafka, True))]
    admin = _admin(args, kafka)
    for binding, future in admin.create_acls(bindings).items():
        _result(future, args, kafka, f"cannot add {_describe(binding)}")
        print(f"Added {_describe(binding)}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    pattern = _pattern_type(args, kafka, "literal")
    principals = _principals(args, kafka, False)
    if principals:
        filters = [kafka.admin.AclBindingFilter(rtype, name, pattern, principal, host, op, permission)
                   for (rtype, name, op), (principal, host, permission) in itertools.product(
                       _grants(args, kafka), principals)]
    else:  # as kafka-acls: no principal removes every ACL of the resources
        filters = [kafka.admin.AclBindingFilter(rtype, name, pattern, None, None, kafka.admin.AclOperation.ANY,
                                                kafka.admin.AclPermissionType.ANY)
                   for rtype, name in _resources(args, kafka, True)]
    admin = _admin(args, kafka)
    for future in admin.delete_acls(filters).values():
        for binding in _result(future, args, kafka, "cannot remove ACLs"):
            print(f"Removed {_describe(binding)}")
    return 0


def _list(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    admin_types = kafka.admin
    resources = _resources(args, kafka, False) or [(admin_types.ResourceType.ANY, None)]
    pattern = _pattern_type(args, kafka, "literal" if args.topic or args.group or args.transactional_id
                            or args.cluster else "any")
    admin = _admin(args, kafka)
    found: list[Any] = []
    for (rtype, name), principal in itertools.product(resources, args.principal or [None]):
        acl_filter = admin_types.AclBindingFilter(rtype, name, pattern, principal, None, admin_types.AclOperation.ANY,
                                                  admin_types.AclPermissionType.ANY)
        found += _result(admin.describe_acls(acl_filter), args, kafka, "cannot list ACLs")
    by_resource: dict[tuple[str, str, str], list[Any]] = {}
    for binding in found:
        key = (binding.restype.name, binding.name, binding.resource_pattern_type.name)
        by_resource.setdefault(key, []).append(binding)
    for (rtype, name, pattern_name), bindings in sorted(by_resource.items()):
        print(f"Current ACLs for resource `ResourcePattern(resourceType={_kafka_type(rtype)}, name={name}, "
              f"patternType={pattern_name})`: ")
        for binding in sorted(bindings, key=_describe):
            print(f" \t{_entry(binding)} ")
        print()
    return 0


def _admin(args: argparse.Namespace, kafka: Any) -> Any:
    return kafka.admin.AdminClient(client_config(args))


def _result(future: Any, args: argparse.Namespace, kafka: Any, what: str) -> Any:
    try:
        return future.result(args.timeout)
    except kafka.KafkaException as exc:
        raise CliError(f"{what}: {describe_kafka_error(exc.args[0])}") from None
    except TimeoutError:
        raise CliError(f"cannot reach a broker at {args.bootstrap_server} within {args.timeout:g}s") from None


def _kafka_type(name: str) -> str:
    return "CLUSTER" if name == "BROKER" else name


def _entry(binding: Any) -> str:
    return (f"(principal={binding.principal}, host={binding.host}, operation={binding.operation.name}, "
            f"permissionType={binding.permission_type.name})")


def _describe(binding: Any) -> str:
    return (f"{_entry(binding)} on {_kafka_type(binding.restype.name)} {binding.name} "
            f"({binding.resource_pattern_type.name})")
