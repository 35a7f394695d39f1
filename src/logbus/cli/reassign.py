"""`logbus reassign`: move partition replicas between brokers, like kafka-reassign-partitions.sh.

    logbus reassign --generate --topics-to-move-json-file topics.json --broker-list 1,2,3
    logbus reassign --execute --reassignment-json-file plan.json
    logbus reassign --verify --reassignment-json-file plan.json
    logbus reassign --cancel --reassignment-json-file plan.json

The JSON files are Kafka's: `{"version":1,"topics":[{"topic":"t"}]}` and
`{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}`. `--generate` only
proposes (Kafka's assignment rule over the given brokers); `--execute` sends
AlterPartitionReassignments, after which the controller adds the new replicas, moves leadership
once they are in sync and drops the old ones; `--verify` reports each partition done or in
progress (ListPartitionReassignments).
"""

from __future__ import annotations

import argparse
import datetime
import json
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..cluster.assignment import assign_replicas
from .common import CliError, add_connection_options, client_config, import_confluent_kafka, protocol_client


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("reassign", help="move partition replicas (kafka-reassign-partitions)")
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("generate", "execute", "verify", "cancel"):
        action.add_argument(f"--{name}", action="store_true")
    parser.add_argument("--topics-to-move-json-file", metavar="FILE")
    parser.add_argument("--broker-list", metavar="IDS", help="brokers to spread the replicas over, e.g. 1,2,3")
    parser.add_argument("--reassignment-json-file", metavar="FILE")
    add_connection_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    admin = kafka.admin.AdminClient(client_config(args))
    if args.generate:
        return _generate(args, admin)
    plan = _read_json(args.reassignment_json_file, "--reassignment-json-file")
    targets = {(p["topic"], int(p["partition"])): [int(b) for b in p["replicas"]] for p in plan.get("partitions", [])}
    if args.verify:
        return _verify(args, admin, targets)
    return _alter(args, admin, {key: None for key in targets} if args.cancel else targets)


def _read_json(path: str | None, option: str) -> dict[str, Any]:
    if not path:
        raise CliError(f"{option} is required")
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None


def _current(args: argparse.Namespace, admin: Any, topics: list[str] | None) -> dict[tuple[str, int], list[int]]:
    found = admin.list_topics(timeout=args.timeout).topics
    return {(name, p.id): list(p.replicas) for name, topic in found.items() if topics is None or name in topics
            for p in topic.partitions.values()}


def _plan(assignment: dict[tuple[str, int], list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(assignment.items())]})


def _generate(args: argparse.Namespace, admin: Any) -> int:
    wanted = [t["topic"] for t in _read_json(args.topics_to_move_json_file, "--topics-to-move-json-file")["topics"]]
    if not args.broker_list:
        raise CliError("--broker-list is required with --generate")
    brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
    current = _current(args, admin, wanted)
    proposed = {}
    for topic in wanted:
        indexes = sorted(p for t, p in current if t == topic)
        if not indexes:
            raise CliError(f"topic '{topic}' does not exist")
        replication = len(current[(topic, indexes[0])])
        for index, replicas in zip(indexes, assign_replicas(brokers, len(indexes), replication), strict=True):
            proposed[(topic, index)] = replicas
    print(f"Current partition replica assignment\n{_plan(current)}\n")
    print(f"Proposed partition reassignment configuration\n{_plan(proposed)}")
    return 0


def _alter(args: argparse.Namespace, admin: Any, targets: dict[tuple[str, int], list[int] | None]) -> int:
    from ..client.apis import ALTER_REASSIGNMENTS

    if not args.cancel:
        current = _current(args, admin, sorted({t for t, _ in targets}))
        print("Current partition replica assignment\n\n" + _plan({k: current[k] for k in targets if k in current}))
        print("\nSave this to use as the --reassignment-json-file option during rollback")
    module = load_payload_module(ALTER_REASSIGNMENTS, 0, EntityType.request)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), replicas in targets.items():
        by_topic.setdefault(topic, []).append(module.ReassignablePartition(
            partition_index=index, replicas=None if replicas is None else tuple(replicas)))
    request = module.AlterPartitionReassignmentsRequest(
        timeout=datetime.timedelta(seconds=args.timeout),
        topics=tuple(module.ReassignableTopic(name=t, partitions=tuple(p)) for t, p in by_topic.items()))
    client = protocol_client(args)
    answer = client.call_any(ALTER_REASSIGNMENTS, request)
    failed = [f"{t.name}-{p.partition_index}: {ErrorCode(p.error_code).name}"
              for t in answer.responses for p in t.partitions if p.error_code]
    done = [f"{t.name}-{p.partition_index}" for t in answer.responses for p in t.partitions if not p.error_code]
    verb = "cancelled" if args.cancel else "started"
    if done:
        print(f"Successfully {verb} partition reassignment{'s' if len(done) > 1 else ''} for {','.join(done)}")
    for line in failed:
        print(f"Error reassigning partition(s): {line}")
    return 1 if failed else 0


def _verify(args: argparse.Namespace, admin: Any, targets: dict[tuple[str, int], list[int]]) -> int:
    from ..client.apis import LIST_REASSIGNMENTS

    module = load_payload_module(LIST_REASSIGNMENTS, 0, EntityType.request)
    client = protocol_client(args)
    answer = client.call_any(LIST_REASSIGNMENTS, module.ListPartitionReassignmentsRequest(
        timeout=datetime.timedelta(seconds=args.timeout), topics=None))
    ongoing = {(t.name, p.partition_index) for t in answer.topics for p in t.partitions}
    current = _current(args, admin, sorted({t for t, _ in targets}))
    print("Status of partition reassignment:")
    unfinished = 0
    for key, replicas in sorted(targets.items()):
        where = f"{key[0]}-{key[1]}"
        if key in ongoing:
            print(f"Reassignment of partition {where} is still in progress.")
            unfinished += 1
        elif current.get(key) == replicas:
            print(f"Reassignment of partition {where} is completed.")
        else:
            print(f"There is no active reassignment of partition {where}, but replica set is {current.get(key)} "
                  f"rather than {replicas}.")
            unfinished += 1
    return 1 if unfinished else 0
