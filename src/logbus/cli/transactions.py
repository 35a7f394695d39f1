"""`logbus transactions`: inspect transactions and abort hanging ones, like kafka-transactions.sh
(KIP-664), with its subcommands, options and output tables.

    logbus transactions [--bootstrap-server H:P] list [--duration-filter MS] [--transactional-id-pattern RE]
    logbus transactions describe --transactional-id ID
    logbus transactions describe-producers --topic T --partition P [--broker-id N]
    logbus transactions abort --topic T --partition P --start-offset O
    logbus transactions abort --topic T --partition P --producer-id I --producer-epoch E --coordinator-epoch C
    logbus transactions find-hanging (--topic T [--partition P] | --broker-id N) [--max-transaction-timeout MIN]

A transaction hangs when a partition holds its records but no coordinator will ever write its
marker (a coordinator bug, or a late write after the transaction ended): the partition's last
stable offset stops there and read_committed consumers stop with it. `find-hanging` looks for
such transactions and `abort` writes the missing ABORT marker, at the partition leader, as the
coordinator would have (WriteTxnMarkers).

confluent-kafka's AdminClient has none of these APIs, so this speaks them through the small
blocking client of `logbus.client`, one request at a time.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..client.admin import find_coordinator, refused, retrying
from ..client.apis import (
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
    VERSIONS,
    WRITE_TXN_MARKERS,
)
from ..client.client import Client
from ..client.errors import KafkaError
from ..protocol.codec import make
from .common import CliError, add_connection_options, non_negative_int, protocol_client

TRANSACTION_KEY_TYPE = 1  # FindCoordinator's key type for transactional ids

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")

Key = tuple[str, int]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "transactions", help="list, describe and abort transactions (kafka-transactions)",
        description="Analyze the transactional state of producers; detect and abort hanging transactions.",
    )
    add_connection_options(parser)
    parser.set_defaults(run=run)
    commands = parser.add_subparsers(dest="transactions_command", required=True, metavar="COMMAND")
    for add in (_add_list, _add_describe, _add_describe_producers, _add_abort, _add_find_hanging):
        add_connection_options(add(commands), inherited=True)  # also after the sub-command, as logbus's others


def _add_list(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("list", help="list transactions")
    parser.add_argument("--duration-filter", type=int, metavar="MS",
                        help="only transactions running longer than this many ms (< 0: all)")
    parser.add_argument("--transactional-id-pattern", metavar="REGEX",
                        help="only transactional ids the whole of which this regular expression matches")
    parser.set_defaults(action=_list)
    return parser


def _add_describe(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("describe", help="describe the state of an active transactional-id")
    parser.add_argument("--transactional-id", required=True, metavar="ID")
    parser.set_defaults(action=_describe)
    return parser


def _add_describe_producers(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("describe-producers",
                                 help="describe the states of active producers for a topic partition")
    _add_partition_options(parser)
    parser.add_argument("--broker-id", type=int, metavar="N",
                        help="ask this replica instead of the leader")
    parser.set_defaults(action=_describe_producers)
    return parser


def _add_abort(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("abort", help="abort a hanging transaction (writes its ABORT marker)")
    _add_partition_options(parser)
    parser.add_argument("--start-offset", type=non_negative_int, metavar="OFFSET",
                        help="first offset of the transaction to abort (its producer is found with DescribeProducers)")
    explicit = parser.add_argument_group("or name the producer (as for Kafka brokers older than 3.0)")
    explicit.add_argument("--producer-id", type=int, metavar="ID")
    explicit.add_argument("--producer-epoch", type=int, metavar="EPOCH")
    explicit.add_argument("--coordinator-epoch", type=int, metavar="EPOCH")
    parser.set_defaults(action=_abort)
    return parser


def _add_find_hanging(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("find-hanging", help="find hanging transactions")
    parser.add_argument("--broker-id", type=int, metavar="N", help="search the partitions this broker has a replica of")
    parser.add_argument("--max-transaction-timeout", type=non_negative_int, default=15, metavar="MINUTES",
                        help="transactions open longer than this are candidates (default 15)")
    parser.add_argument("--topic", metavar="TOPIC", help="search this topic only (required with --partition)")
    parser.add_argument("--partition", type=non_negative_int, metavar="P")
    parser.set_defaults(action=_find_hanging)
    return parser


def _add_partition_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True, metavar="TOPIC")
    parser.add_argument("--partition", required=True, type=non_negative_int, metavar="P")


def run(args: argparse.Namespace) -> int:
    client = protocol_client(args)
    try:
        args.action(client, args)
    finally:
        client.close()
    return 0


@contextmanager
def _failing(what: str) -> Iterator[None]:
    """Connection trouble and refusals inside become one `CliError` line: `what: why`."""
    try:
        yield
    except (OSError, KafkaError) as exc:
        raise CliError(f"{what}: {exc}") from None


def _request(api_key: int, version: int | None = None) -> Any:
    """The kio request module of `api_key` at `version` (by default the client's)."""
    return load_payload_module(api_key, VERSIONS[api_key] if version is None else version, EntityType.request)


def _print_table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Kafka's tools' layout: every cell padded to its column's width and followed by a tab."""
    widths = [max([len(header), *(len(row[i]) for row in rows)]) for i, header in enumerate(headers)]
    for row in (headers, *rows):
        sys.stdout.write("".join(f"{cell:<{width}}\t" for cell, width in zip(row, widths, strict=True)) + "\n")


# ---------------------------------------------------------------- list


def _list(client: Client, args: argparse.Namespace) -> None:
    duration = -1 if args.duration_filter is None else args.duration_filter
    with _failing("Failed to list transactions"):
        listed = _list_transactions(client, duration=duration, pattern=args.transactional_id_pattern or None)
    _print_table(LIST_HEADERS, [(t.transactional_id, str(broker), str(t.producer_id), t.transaction_state)
                                for broker, t in listed])


def _list_transactions(client: Client, duration: int = -1, pattern: str | None = None,
                       producer_ids: tuple[int, ...] = ()) -> list[tuple[int, Any]]:
    """ListTransactions at every broker (each lists the ids it coordinates): (broker id, listing)
    pairs, by broker then id. The version is the lowest that carries the filters given, as
    Kafka's admin client picks it (a duration needs v1, a pattern v2)."""
    version = 2 if pattern is not None else 1 if duration >= 0 else 0
    request = make(_request(LIST_TRANSACTIONS, version).ListTransactionsRequest, state_filters=(),
                   producer_id_filters=producer_ids, duration_filter=duration, transactional_id_pattern=pattern)
    client.partitions(())
    listed = []
    for broker in sorted(client.brokers):
        answer = retrying(lambda broker=broker: client.call_broker(broker, LIST_TRANSACTIONS, request, version),
                           client.timeout)
        if answer.error_code != ErrorCode.none:
            raise refused(answer.error_code, f"broker {broker}")
        listed += [(broker, t) for t in sorted(answer.transaction_states, key=lambda t: t.transactional_id)]
    return listed


# ---------------------------------------------------------------- describe


def _describe(client: Client, args: argparse.Namespace) -> None:
    transactional_id = args.transactional_id
    with _failing(f"Failed to describe transaction state of transactional-id `{transactional_id}`"):
        coordinator, state = _describe_transaction(client, transactional_id)
        if state.error_code != ErrorCode.none:
            raise refused(state.error_code)
    start = _epoch_ms(state.transaction_start_time)
    now = int(time.time() * 1000)
    partitions = ",".join(f"{topic}-{index}" for topic, index in sorted(_partitions_of(state)))
    _print_table(DESCRIBE_HEADERS, [(
        str(coordinator), transactional_id, str(state.producer_id), str(state.producer_epoch),
        state.transaction_state, str(int(state.transaction_timeout.total_seconds() * 1000)),
        "None" if start is None else str(start), "None" if start is None else str(now - start), partitions,
    )])


def _describe_transaction(client: Client, transactional_id: str) -> tuple[int, Any]:
    """FindCoordinator, then DescribeTransactions there: (coordinator id, its TransactionState)."""
    module = _request(DESCRIBE_TRANSACTIONS)
    request = module.DescribeTransactionsRequest(transactional_ids=(transactional_id,))

    def attempt() -> tuple[int, Any]:
        coordinator = find_coordinator(client, transactional_id, TRANSACTION_KEY_TYPE)
        return coordinator, client.call_broker(coordinator, DESCRIBE_TRANSACTIONS, request).transaction_states[0]

    return retrying(attempt, client.timeout, lambda found: found[1].error_code)


def _epoch_ms(moment: Any) -> int | None:
    """A decoded timestamp in ms since the epoch; None for Kafka's -1 (decoded as None)."""
    return None if moment is None else round(moment.timestamp() * 1000)


def _partitions_of(state: Any) -> set[Key]:
    return {(topic.topic, index) for topic in state.topics for index in topic.partitions}


# ---------------------------------------------------------------- describe-producers


def _describe_producers(client: Client, args: argparse.Namespace) -> None:
    key = (args.topic, args.partition)
    where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
    with _failing(f"Failed to describe producers for partition {args.topic}-{args.partition} on {where}"):
        producers = _producers(client, [key], args.broker_id)[key]
    _print_table(PRODUCERS_HEADERS, [(
        str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch), str(p.last_sequence),
        str(p.last_timestamp), "None" if p.current_txn_start_offset < 0 else str(p.current_txn_start_offset),
    ) for p in producers])


def _producers(client: Client, partitions: list[Key], broker_id: int | None) -> dict[Key, tuple[Any, ...]]:
    """DescribeProducers for `partitions`, each asked of its leader (or of `broker_id`), one
    request per broker: the active producers of each partition."""
    client.partitions(sorted({topic for topic, _ in partitions}), internal=True)
    by_broker: dict[int, dict[str, list[int]]] = {}
    for topic, index in partitions:
        broker = broker_id if broker_id is not None else client.leaders.get((topic, index))
        if broker is None:
            raise refused(ErrorCode.unknown_topic_or_partition, f"{topic}-{index}")
        if broker < 0:
            raise refused(ErrorCode.leader_not_available, f"{topic}-{index}")
        by_broker.setdefault(broker, {}).setdefault(topic, []).append(index)
    module = _request(DESCRIBE_PRODUCERS)
    result: dict[Key, tuple[Any, ...]] = {}
    for broker, topics in sorted(by_broker.items()):
        request = module.DescribeProducersRequest(topics=tuple(
            module.TopicRequest(name=topic, partition_indexes=tuple(indexes)) for topic, indexes in topics.items()))
        for topic in client.call_broker(broker, DESCRIBE_PRODUCERS, request).topics:
            for answer in topic.partitions:
                if answer.error_code != ErrorCode.none:
                    raise refused(answer.error_code, f"{topic.name}-{answer.partition_index}")
                result[(topic.name, answer.partition_index)] = answer.active_producers
    return result


# ---------------------------------------------------------------- abort


def _abort(client: Client, args: argparse.Namespace) -> None:
    key = (args.topic, args.partition)
    if args.start_offset is not None:
        producer_id, producer_epoch, coordinator_epoch = _producer_at(client, key, args.start_offset)
    else:
        producer_id, producer_epoch, coordinator_epoch = _named_producer(args)
    spec = (f"{args.topic}-{args.partition} producerId={producer_id} producerEpoch={producer_epoch} "
            f"coordinatorEpoch={coordinator_epoch}")
    with _failing(f"Failed to abort transaction ({spec})"):
        _write_abort_marker(client, key, producer_id, producer_epoch, coordinator_epoch)


def _named_producer(args: argparse.Namespace) -> tuple[int, int, int]:
    if args.producer_id is None:
        raise CliError("The transaction to abort must be identified either with --start-offset or with "
                       "--producer-id, --producer-epoch, and --coordinator-epoch")
    for option in ("producer_epoch", "coordinator_epoch"):
        if getattr(args, option) is None:
            raise CliError(f"Missing required argument --{option.replace('_', '-')}")
    # A producer that hung before its first marker has no coordinator epoch yet (-1): Kafka
    # then uses 0, which no leader's check refuses.
    return args.producer_id, args.producer_epoch, max(args.coordinator_epoch, 0)


def _producer_at(client: Client, key: Key, start_offset: int) -> tuple[int, int, int]:
    """The producer whose open transaction in `key` starts at `start_offset`: id and epochs."""
    with _failing(f"Failed to validate producer state for partition {key[0]}-{key[1]}"):
        producers = _producers(client, [key], None)[key]
    for producer in producers:
        if producer.current_txn_start_offset == start_offset:
            return producer.producer_id, producer.producer_epoch, max(producer.coordinator_epoch, 0)
    raise CliError(f"Could not find any open transactions starting at offset {start_offset} "
                   f"on partition {key[0]}-{key[1]}")


def _write_abort_marker(client: Client, key: Key, producer_id: int, producer_epoch: int,
                        coordinator_epoch: int) -> None:
    """WriteTxnMarkers with one ABORT marker, sent to the leader of `key`."""
    module = _request(WRITE_TXN_MARKERS)
    marker = module.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
        coordinator_epoch=coordinator_epoch,
        topics=(module.WritableTxnMarkerTopic(name=key[0], partition_indexes=(key[1],)),))
    answer = client.call_leader(*key, WRITE_TXN_MARKERS, module.WriteTxnMarkersRequest(markers=(marker,)))
    for topic in answer.markers[0].topics:
        for partition in topic.partitions:
            if partition.error_code != ErrorCode.none:
                raise refused(partition.error_code)


# ---------------------------------------------------------------- find-hanging


def _find_hanging(client: Client, args: argparse.Namespace) -> None:
    if args.topic is None and args.broker_id is None:
        raise CliError("The `find-hanging` command requires either --topic or --broker-id "
                       "to limit the scope of the search")
    if args.partition is not None and args.topic is None:
        raise CliError("The --partition argument requires --topic to be provided")
    now = int(time.time() * 1000)
    with _failing("Failed to find hanging transactions"):
        candidates = _open_transactions(client, args, now - args.max_transaction_timeout * 60_000)
        hanging = _without_coordinator(client, candidates)
    _print_table(HANGING_HEADERS, [(
        topic, str(index), str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
        str(p.current_txn_start_offset), str(p.last_timestamp), str((now - p.last_timestamp) // 60_000),
    ) for (topic, index), p in hanging])


def _open_transactions(client: Client, args: argparse.Namespace, before_ms: int) -> list[tuple[Key, Any]]:
    """Open transactions of the searched partitions whose producer last wrote before `before_ms`."""
    partitions = _partitions_to_search(client, args)
    producers = _producers(client, partitions, args.broker_id) if partitions else {}
    return [(key, p) for key, found in sorted(producers.items()) for p in found
            if p.current_txn_start_offset >= 0 and p.last_timestamp < before_ms]


def _partitions_to_search(client: Client, args: argparse.Namespace) -> list[Key]:
    """--topic and --partition, else the topic's partitions, else every partition (internal
    topics too) with a replica on --broker-id."""
    if args.partition is not None:
        return [(args.topic, args.partition)]
    found = client.partitions(None if args.topic is None else [args.topic], internal=True)
    if args.topic is not None and args.topic not in found:
        raise refused(ErrorCode.unknown_topic_or_partition, args.topic)
    return [(topic, index) for topic, indexes in sorted(found.items()) for index in indexes
            if args.broker_id is None or args.broker_id in client.replicas[(topic, index)]]


def _without_coordinator(client: Client, candidates: list[tuple[Key, Any]]) -> list[tuple[Key, Any]]:
    """The candidates no coordinator will finish: their producer id belongs to no transactional
    id, or its coordinator knows no such id, or its transaction does not include the partition
    (a coordinator lists every partition of an ongoing transaction, and those still waiting for
    their marker while it completes)."""
    if not candidates:
        return []
    producer_ids = tuple(sorted({p.producer_id for _, p in candidates}))
    owners = {t.producer_id: t.transactional_id for _, t in _list_transactions(client, producer_ids=producer_ids)}
    expected: dict[str, set[Key]] = {}
    for transactional_id in set(owners.values()):
        _coordinator, state = _describe_transaction(client, transactional_id)
        if state.error_code == ErrorCode.none:
            expected[transactional_id] = _partitions_of(state)
        elif state.error_code != ErrorCode.transactional_id_not_found:
            raise refused(state.error_code, f"transactional id {transactional_id}")
    return [(key, p) for key, p in candidates if key not in expected.get(owners.get(p.producer_id), set())]
