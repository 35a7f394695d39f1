"""`logbus share-groups`: share groups (KIP-932), in the style of Kafka 4.2's kafka-share-groups.sh,
with its options and output tables.

    logbus share-groups list [--state [STATES]]
    logbus share-groups describe (--group G ... | --all-groups) [--offsets | --members | --state] [--verbose]
    logbus share-groups reset-offsets --group G (--topic T[:P,P] ... | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --to-datetime ISO | --by-duration PnDTnHnMnS)
        [--dry-run | --execute]
    logbus share-groups delete (--group G ... | --all-groups)
    logbus share-groups delete --group G --delete-offsets --topic T ...

`describe` prints each share-partition's start offset (SPSO) and lag (the records from it to the
high watermark not yet delivered for good); `reset-offsets` moves the start offsets of a group
without members (without `--execute` it only shows them, as Kafka's tool does); `delete` deletes
empty groups, or with `--delete-offsets` an empty group's state of whole topics, so that its next
fetch starts where share.auto.offset.reset says. confluent-kafka's AdminClient has none of these
APIs: they go through the blocking client of `logbus.client` (`client/admin.py`). A failure of
any group makes the exit code 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kio.schema.errors import ErrorCode

from ..client import admin
from ..client.client import EARLIEST, LATEST, Client
from ..client.errors import KafkaError, RefusedError
from ..client.offset_reset import reset_targets
from ..durations import iso_duration_ms
from .common import EXIT_FAILURE, EXIT_USAGE, CliError, add_connection_options, protocol_client
from .groups import parse_datetime

MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE
Key = tuple[str, int]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("share-groups", help="list, describe, reset or delete share groups (KIP-932)")
    actions = parser.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="list share groups")
    listing.add_argument("--state", nargs="?", const="", metavar="STATES",
                         help="show each group's state; with a comma-separated list, only groups in those states")
    listing.set_defaults(run=lambda args: _run(args, _list))

    describe = actions.add_parser("describe", help="a group's start offsets and lag, members or state")
    _add_groups(describe)
    shown = describe.add_mutually_exclusive_group()
    shown.add_argument("--offsets", action="store_true", help="each share-partition's start offset and lag (default)")
    shown.add_argument("--members", action="store_true", help="the group's members and their assignments")
    shown.add_argument("--state", action="store_true", help="the group's coordinator, state and member count")
    describe.add_argument("--verbose", action="store_true", help="with leader epochs, group and member epochs")
    describe.set_defaults(run=lambda args: _run(args, _describe))

    reset = actions.add_parser("reset-offsets", help="move the start offsets of a group without members")
    reset.add_argument("--group", required=True)
    topics = reset.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topic", action="append", metavar="TOPIC[:P,P]",
                        help="a topic (all its partitions, or those listed); may repeat")
    topics.add_argument("--all-topics", action="store_true", help="every partition the group has state of")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to the log start offset")
    target.add_argument("--to-latest", action="store_true", help="to the log end offset")
    target.add_argument("--to-offset", type=int, metavar="N", help="to offset N (kept within the log)")
    target.add_argument("--to-datetime", type=parse_datetime, metavar="ISO",
                        help="to the first record at or after this time, e.g. 2026-05-01T12:00:00.000")
    target.add_argument("--by-duration", type=_duration, metavar="PnDTnHnMnS",
                        help="to the first record at most this long ago, e.g. PT1H30M")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    mode.add_argument("--execute", action="store_true", help="set the new offsets")
    reset.set_defaults(run=lambda args: _run(args, _reset_offsets))

    delete = actions.add_parser("delete", help="delete empty share groups, or with --delete-offsets a group's "
                                               "state of topics")
    _add_groups(delete)
    delete.add_argument("--delete-offsets", action="store_true",
                        help="delete the group's state of the --topic topics, not the group")
    delete.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                        help="with --delete-offsets; may repeat")
    delete.set_defaults(run=lambda args: _run(args, _delete))

    for action in (listing, describe, reset, delete):
        add_connection_options(action)


def _add_groups(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--group", action="append", metavar="GROUP", help="a share group; may repeat")
    which.add_argument("--all-groups", action="store_true", help="every share group")


def _duration(text: str) -> int:
    try:
        return iso_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run(args: argparse.Namespace, action: Callable[[Client, argparse.Namespace], int]) -> int:
    client = protocol_client(args)
    try:
        with _failing():
            return action(client, args)
    finally:
        client.close()


@contextmanager
def _failing() -> Iterator[None]:
    """Connection trouble and refusals become one `CliError` line."""
    try:
        yield
    except (OSError, KafkaError) as exc:
        raise CliError(str(exc)) from None


def _print_rows(headers: Sequence[str], rows: list[Sequence[Any]], widths: Sequence[int]) -> None:
    """Kafka's tools' printf layout: a blank line, then each column left-aligned to at least its
    width (or its longest cell), one space apart."""
    cells = [[str(cell) for cell in row] for row in (headers, *rows)]
    sized = [max(width, *(len(row[i]) for row in cells)) for i, width in enumerate(widths)]
    sys.stdout.write("\n")
    for row in cells:
        sys.stdout.write(" ".join(cell.ljust(width) for cell, width in zip(row[:-1], sized, strict=False))
                         + " " + row[-1] + "\n")


def _text(value: int | None) -> str:
    return MISSING if value is None else str(value)


# ---------------------------------------------------------------- list


def _list(client: Client, args: argparse.Namespace) -> int:
    if args.state is None:
        for group_id, _ in admin.list_share_groups(client):
            print(group_id)
        return 0
    states = [s.strip() for s in args.state.split(",") if s.strip()]
    _print_rows(("GROUP", "STATE"), list(admin.list_share_groups(client, states)), (15,))
    return 0


# ---------------------------------------------------------------- describe


def _group_ids(client: Client, args: argparse.Namespace) -> list[str]:
    return [group_id for group_id, _ in admin.list_share_groups(client)] if args.all_groups else args.group


def _describe(client: Client, args: argparse.Namespace) -> int:
    for group_id in sorted(set(_group_ids(client, args))):
        try:
            coordinator, described = admin.describe_share_group(client, group_id)
        except RefusedError as exc:
            if exc.code == ErrorCode.group_id_not_found:
                raise CliError(f"Share group '{group_id}' does not exist.") from None
            raise
        if args.members:
            _print_members(group_id, described, args.verbose)
        elif args.state:
            _print_state(client, group_id, coordinator, described, args.verbose)
        else:
            _print_offsets(group_id, admin.share_group_offsets(client, group_id), args.verbose)
    return 0


def _print_offsets(group_id: str, offsets: list[admin.SharePartitionOffset], verbose: bool) -> None:
    if verbose:
        rows = [(group_id, o.topic, o.partition, _text(o.leader_epoch), _text(o.start_offset), _text(o.lag))
                for o in offsets]
        _print_rows(("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"), rows, (15, 15, 10, 13, 13))
    else:
        rows = [(group_id, o.topic, o.partition, _text(o.start_offset), _text(o.lag)) for o in offsets]
        _print_rows(("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"), rows, (15, 15, 10, 13))


def _print_state(client: Client, group_id: str, coordinator: int, described: Any, verbose: bool) -> None:
    _say_if_empty(group_id, described)
    host, port = client.brokers.get(coordinator, ("?", 0))
    where = f"{host}:{port}  ({coordinator})"
    if verbose:
        _print_rows(("GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"),
                    [(group_id, where, described.group_state, described.group_epoch, described.assignment_epoch,
                      len(described.members))], (15, 25, 15, 12, 17))
    else:
        _print_rows(("GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"),
                    [(group_id, where, described.group_state, len(described.members))], (15, 25, 15))


def _print_members(group_id: str, described: Any, verbose: bool) -> None:
    if _say_if_empty(group_id, described):
        return
    rows = []
    for member in sorted(described.members, key=lambda m: m.member_id):
        topics = {t.topic_name: sorted(t.partitions) for t in member.assignment.topic_partitions}
        assignment = ";".join(f"{name}:{','.join(map(str, parts))}" for name, parts in sorted(topics.items()))
        count = sum(len(parts) for parts in topics.values())
        epoch = (member.member_epoch,) if verbose else ()
        rows.append((group_id, member.member_id, member.client_host, member.client_id, count, *epoch, assignment))
    headers = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", *(("MEMBER-EPOCH",) if verbose else ()),
               "ASSIGNMENT")
    _print_rows(headers, rows, (15, 15, 15, 15, 12, *((13,) if verbose else ())))


def _say_if_empty(group_id: str, described: Any) -> bool:
    """Kafka's note on stderr for a group without members; whether it has none."""
    if described.members:
        return False
    print(f"\nShare group '{group_id}' has no active members.", file=sys.stderr)
    return True


# ---------------------------------------------------------------- reset-offsets


def _reset_offsets(client: Client, args: argparse.Namespace) -> int:
    group_id = args.group
    try:
        _, described = admin.describe_share_group(client, group_id)
        if described.members:
            raise CliError(f"Share group '{group_id}' is not empty.", EXIT_USAGE)
    except RefusedError as exc:  # an unknown group is DEAD to Kafka's tool: the alter then answers why not
        if exc.code != ErrorCode.group_id_not_found:
            raise
    keys = _partitions_to_reset(client, args)
    targets = reset_targets(keys, *_target(args), lambda wanted, spec: _lookup(client, wanted, spec))
    if args.execute:
        failed = {key: code for key, code in admin.alter_share_group_offsets(client, group_id, targets).items()
                  if code != ErrorCode.none}
        if failed:
            raise CliError("; ".join(f"{t}-{p}: {code.name.upper()}" for (t, p), code in sorted(failed.items())))
    _print_rows(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                [(group_id, t, p, offset) for (t, p), offset in sorted(targets.items())], (15, 15, 10))
    return 0


def _partitions_to_reset(client: Client, args: argparse.Namespace) -> list[Key]:
    """`--topic T` (every partition), `--topic T:0,2`, or `--all-topics` (those the group has state of)."""
    if args.all_topics:
        return [(o.topic, o.partition) for o in admin.share_group_offsets(client, args.group)]
    named = [spec.partition(":") for spec in args.topic]
    existing = client.partitions([topic for topic, _, _ in named])
    keys = []
    for topic, colon, indexes in named:
        if topic not in existing:
            raise CliError(f"topic '{topic}' does not exist", EXIT_USAGE)
        wanted = [int(i) for i in indexes.split(",") if i.strip()] if colon else existing[topic]
        missing = sorted(set(wanted) - set(existing[topic]))
        if missing:
            raise CliError(f"topic '{topic}' has no partition {missing[0]}", EXIT_USAGE)
        keys += [(topic, index) for index in wanted]
    return sorted(set(keys))


def _target(args: argparse.Namespace) -> tuple[str, int | None]:
    if args.to_earliest or args.to_latest:
        return ("earliest" if args.to_earliest else "latest"), None
    if args.to_offset is not None:
        return "offset", args.to_offset
    if args.by_duration is not None:
        return "timestamp", int(time.time() * 1000) - args.by_duration
    return "timestamp", int(args.to_datetime.timestamp() * 1000)


def _lookup(client: Client, keys: list[Key], spec: str | int) -> dict[Key, int]:
    timestamp = {"earliest": EARLIEST, "latest": LATEST}.get(spec, spec) if isinstance(spec, str) else spec
    return client.list_offsets(dict.fromkeys(keys, timestamp))


# ---------------------------------------------------------------- delete


def _delete(client: Client, args: argparse.Namespace) -> int:
    if args.delete_offsets:
        return _delete_offsets(client, args)
    if args.topic:
        raise CliError("--topic goes with --delete-offsets", EXIT_USAGE)
    listed = dict(admin.list_share_groups(client))
    failed: dict[str, str] = {}
    deleted = []
    for group_id in dict.fromkeys(_group_ids(client, args)):
        state = listed.get(group_id)
        if state is None:
            failed[group_id] = f"Group '{group_id}' is not a share group."
        elif state != "Empty":
            failed[group_id] = f"Share group '{group_id}' is not EMPTY."
        elif (code := admin.delete_group(client, group_id)) != ErrorCode.none:
            failed[group_id] = code.name.upper()
        else:
            deleted.append(group_id)
    names = ", ".join(f"'{group_id}'" for group_id in deleted)
    if not failed:
        print(f"Deletion of requested share groups ({names}) was successful.")
        return 0
    print("\nError: Deletion of some share groups failed:")
    for group_id, why in failed.items():
        print(f"* Group '{group_id}' could not be deleted due to: {why}")
    if deleted:
        print(f"\nThese share groups were deleted successfully: {names}")
    return EXIT_FAILURE


def _delete_offsets(client: Client, args: argparse.Namespace) -> int:
    if args.all_groups or len(args.group) != 1 or not args.topic:
        raise CliError("--delete-offsets takes one --group and at least one --topic", EXIT_USAGE)
    outcomes = admin.delete_share_group_offsets(client, args.group[0], list(dict.fromkeys(args.topic)))
    _print_rows(("TOPIC", "STATUS"), [(topic, "Successful" if code == ErrorCode.none else f"Error: {code.name.upper()}")
                                      for topic, code in sorted(outcomes.items())], (15,))
    return 0 if all(code == ErrorCode.none for code in outcomes.values()) else EXIT_FAILURE
