"""`logbus groups list|describe|reset-offsets`: consumer groups, in the spirit of kafka-consumer-groups.sh.

Talks to the broker with confluent-kafka's AdminClient (ListGroups, DescribeGroups, OffsetFetch,
ListOffsets, OffsetCommit). `describe` prints, per partition the group has an offset for or is
assigned, the committed offset, the log end offset, the lag and the owning member.
`reset-offsets` refuses a group with members, as Kafka's tool does: a running consumer would
overwrite the new offsets with its own commits.
"""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass
from typing import Any

from ..client.offset_reset import reset_targets
from .common import (
    EXIT_USAGE,
    CliError,
    add_connection_options,
    client_config,
    describe_kafka_error,
    fetch_topic_metadata,
    import_confluent_kafka,
    unreachable,
)

NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("groups", help="list, describe or reset consumer groups")
    actions = parser.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="list consumer group ids")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", help="state, members, committed offsets and lag of a group")
    describe.add_argument("group")
    describe.set_defaults(run=run_describe)

    reset = actions.add_parser("reset-offsets", help="move an empty group's committed offsets")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True, help="the topic whose offsets move (all its partitions)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to the log start offset")
    target.add_argument("--to-latest", action="store_true", help="to the log end offset")
    target.add_argument("--to-offset", type=int, metavar="N", help="to offset N (kept within the log)")
    target.add_argument("--to-datetime", type=parse_datetime, metavar="ISO",
                        help="to the first record at or after this time, e.g. 2024-05-01T12:00:00Z")
    reset.add_argument("--dry-run", action="store_true", help="show the new offsets without committing them")
    reset.set_defaults(run=run_reset_offsets)

    for action in (listing, describe, reset):
        add_connection_options(action)


def parse_datetime(text: str) -> datetime.datetime:
    """ISO 8601; without a zone it is UTC (as kafka-consumer-groups.sh reads it)."""
    try:
        value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date-time: {text!r}") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)


def _admin(args: argparse.Namespace) -> Any:
    kafka = import_confluent_kafka()
    return kafka.admin.AdminClient(client_config(args, **{"socket.timeout.ms": int(args.timeout * 1000)}))


def _await(future: Any, args: argparse.Namespace, what: str) -> Any:
    kafka = import_confluent_kafka()
    try:
        return future.result(timeout=args.timeout + 1)
    except kafka.KafkaException as exc:
        error = exc.args[0]
        if error.code() in (kafka.KafkaError._TRANSPORT, kafka.KafkaError._TIMED_OUT):
            raise unreachable(args) from None
        raise CliError(f"{what}: {describe_kafka_error(error)}") from None
    except TimeoutError:
        raise unreachable(args) from None


# ---------------------------------------------------------------- list


def run_list(args: argparse.Namespace) -> int:
    admin = _admin(args)  # kept referenced: a collected client fails its pending requests
    result = _await(admin.list_consumer_groups(request_timeout=args.timeout), args, "listing groups")
    if result.errors:
        raise CliError(f"listing groups: {describe_kafka_error(result.errors[0])}")
    for group_id in sorted(listing.group_id for listing in result.valid):
        print(group_id)
    return 0


# ---------------------------------------------------------------- describe


@dataclass(frozen=True, slots=True)
class PartitionRow:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    member: Any | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None:
            return None
        return max(self.log_end - self.committed, 0)


def run_describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    description = _describe(admin, args)
    committed = _committed(admin, args, args.group)
    if _state(description) == "DEAD" and not committed:
        raise CliError(f"group '{args.group}' does not exist")
    owners = {(tp.topic, tp.partition): member for member in description.members
              for tp in member.assignment.topic_partitions}
    keys = sorted(set(committed) | set(owners))
    log_ends = _offsets(admin, args, keys, "latest")
    rows = [PartitionRow(t, p, committed.get((t, p)), log_ends.get((t, p)), owners.get((t, p))) for t, p in keys]
    print(format_group(description, rows))
    return 0


def _describe(admin: Any, args: argparse.Namespace) -> Any:
    futures = admin.describe_consumer_groups([args.group], request_timeout=args.timeout)
    return _await(futures[args.group], args, f"group '{args.group}'")


def _committed(admin: Any, args: argparse.Namespace, group: str) -> dict[tuple[str, int], int]:
    kafka = import_confluent_kafka()
    futures = admin.list_consumer_group_offsets([kafka.ConsumerGroupTopicPartitions(group)],
                                                request_timeout=args.timeout)
    result = _await(futures[group], args, f"offsets of group '{group}'")
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def _offsets(admin: Any, args: argparse.Namespace, keys: list[tuple[str, int]], spec: str | int
             ) -> dict[tuple[str, int], int]:
    """ListOffsets for `keys`: "earliest", "latest" or a timestamp in ms (-1 when no record is that late)."""
    if not keys:
        return {}
    kafka = import_confluent_kafka()
    offset_spec = kafka.admin.OffsetSpec
    wanted = offset_spec.for_timestamp(spec) if isinstance(spec, int) else getattr(offset_spec, spec)()
    futures = admin.list_offsets({kafka.TopicPartition(t, p): wanted for t, p in keys},
                                 request_timeout=args.timeout)
    return {(tp.topic, tp.partition): _await(future, args, f"{tp.topic}-{tp.partition}").offset
            for tp, future in futures.items()}


def _state(description: Any) -> str:
    return str(description.state).rsplit(".", 1)[-1]


def format_group(description: Any, rows: list[PartitionRow]) -> str:
    assignor = description.partition_assignor or "-"
    lines = [f"Group: {description.group_id}\tState: {_state(description)}\tAssignor: {assignor}"
             f"\tMembers: {len(description.members)}"]
    header = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")
    table = [header] + [
        (row.topic, str(row.partition), _text(row.committed), _text(row.log_end), _text(row.lag),
         row.member.member_id if row.member else "-", row.member.host if row.member else "-",
         row.member.client_id if row.member else "-")
        for row in rows
    ]
    idle = [m for m in description.members if not m.assignment.topic_partitions]
    table += [("-", "-", "-", "-", "-", m.member_id, m.host, m.client_id) for m in idle]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join(lines)


def _text(value: int | None) -> str:
    return "-" if value is None else str(value)


# ---------------------------------------------------------------- reset-offsets


def run_reset_offsets(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    admin = _admin(args)
    description = _describe(admin, args)
    state = _state(description)
    if description.members or state not in ("EMPTY", "DEAD", "UNKNOWN"):
        raise CliError(f"group '{args.group}' has {len(description.members)} active member(s) (state {state}); "
                       "stop its consumers before resetting offsets", EXIT_USAGE)
    topic = fetch_topic_metadata(admin, args, args.topic)
    keys = [(args.topic, p) for p in sorted(topic.partitions)]
    targets = _targets(admin, args, keys)
    if not args.dry_run:
        request = kafka.ConsumerGroupTopicPartitions(
            args.group, [kafka.TopicPartition(t, p, offset) for (t, p), offset in targets.items()])
        futures = admin.alter_consumer_group_offsets([request], request_timeout=args.timeout)
        _await(futures[args.group], args, f"group '{args.group}'")
    print("TOPIC\tPARTITION\tNEW-OFFSET")
    for (t, p), offset in targets.items():
        print(f"{t}\t{p}\t{offset}")
    return 0


def _targets(admin: Any, args: argparse.Namespace, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    if args.to_earliest or args.to_latest:
        target, value = ("earliest" if args.to_earliest else "latest"), None
    elif args.to_offset is not None:
        target, value = "offset", args.to_offset
    else:
        target, value = "timestamp", int(args.to_datetime.timestamp() * 1000)
    return reset_targets(keys, target, value, lambda wanted, spec: _offsets(admin, args, wanted, spec))
