"""`logbus consume TOPIC`: print records one per line (value, or key SEP value with --print-key).

Where to start: the end of each partition (default), `--from-beginning`, `--offset N`, or the
first record at or after `--timestamp` (ISO 8601; no zone means UTC). Partitions are assigned
directly unless `--group` is given without a position or partition, in which case the group
subscribes and commits. Stops after `--max` records, after `--timeout-ms` without records, or
on Ctrl-C; a null key or value prints as `null`, as Kafka's console consumer does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from typing import IO, Any

from .common import (
    CliError,
    add_connection_options,
    client_config,
    describe_kafka_error,
    fetch_topic_metadata,
    import_confluent_kafka,
    non_negative_int,
    topic_error,
)

POLL_INTERVAL_S = 0.2
BATCH_SIZE = 500


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("consume", help="print records of a topic")
    parser.add_argument("topic")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest record")
    start.add_argument("--offset", type=non_negative_int, help="start at this offset (in each partition read)")
    start.add_argument("--timestamp", type=parse_timestamp, metavar="ISO8601",
                       help="start at the first record at or after this time")
    parser.add_argument("--partition", type=non_negative_int, help="read only this partition")
    parser.add_argument("--max", type=non_negative_int, metavar="N", help="exit after N records")
    parser.add_argument("--group", metavar="G", help="consumer group to join (or commit offsets to)")
    parser.add_argument("--print-key", action="store_true", help="print the key before the value")
    parser.add_argument("--key-separator", default="\t", metavar="SEP",
                        help="between key and value with --print-key (default: tab)")
    parser.add_argument("--timeout-ms", type=non_negative_int, metavar="T",
                        help="exit once no record arrived for T ms")
    add_connection_options(parser)
    parser.set_defaults(run=run)


def parse_timestamp(text: str) -> int:
    """ISO 8601 -> milliseconds since the epoch; a time without a zone is taken as UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def run(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    consumer = kafka.Consumer(client_config(args, **{
        "group.id": args.group or f"logbus-consume-{os.getpid()}",
        "enable.auto.commit": args.group is not None,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "socket.timeout.ms": int(args.timeout * 1000),
    }))
    printed = 0
    try:
        topic = fetch_topic_metadata(consumer, args, args.topic)
        partitions = _chosen_partitions(args, topic)
        if _subscribes(args):
            consumer.subscribe([args.topic])
        else:
            consumer.assign(_start_positions(consumer, args, partitions))
        printed = _print_records(consumer, args, sys.stdout.buffer)
    except KeyboardInterrupt:
        pass  # interrupted while connecting: nothing printed yet
    finally:
        consumer.close()
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0


def _subscribes(args: argparse.Namespace) -> bool:
    return args.group is not None and args.partition is None and args.offset is None and args.timestamp is None


def _chosen_partitions(args: argparse.Namespace, topic: Any) -> list[int]:
    if args.partition is None:
        return sorted(topic.partitions)
    if args.partition not in topic.partitions:
        raise CliError(f"topic '{args.topic}' has no partition {args.partition} (it has {len(topic.partitions)})")
    return [args.partition]


def _start_positions(consumer: Any, args: argparse.Namespace, partitions: list[int]) -> list[Any]:
    kafka = import_confluent_kafka()
    if args.timestamp is not None:
        return _positions_at_time(consumer, args, partitions)
    if args.offset is not None:
        offset = args.offset
    elif args.from_beginning:
        offset = kafka.OFFSET_BEGINNING
    elif args.group is not None:
        offset = kafka.OFFSET_STORED
    else:
        offset = kafka.OFFSET_END
    return [kafka.TopicPartition(args.topic, partition, offset) for partition in partitions]


def _positions_at_time(consumer: Any, args: argparse.Namespace, partitions: list[int]) -> list[Any]:
    """Offsets of the first records at or after `--timestamp`; a partition with none starts at its end."""
    kafka = import_confluent_kafka()
    wanted = [kafka.TopicPartition(args.topic, partition, args.timestamp) for partition in partitions]
    try:
        found = consumer.offsets_for_times(wanted, timeout=args.timeout)
    except kafka.KafkaException as exc:
        raise topic_error(exc.args[0], args, args.topic) from None
    return [
        kafka.TopicPartition(args.topic, tp.partition, tp.offset if tp.offset >= 0 else kafka.OFFSET_END)
        for tp in found
    ]


def _print_records(consumer: Any, args: argparse.Namespace, out: IO[bytes]) -> int:
    """Poll and print until `--max` records or `--timeout-ms` idle (or forever); returns the count."""
    kafka = import_confluent_kafka()
    separator = args.key_separator.encode()
    idle_limit_s = args.timeout_ms / 1000 if args.timeout_ms is not None else None
    printed = 0
    last_record_at = time.monotonic()
    interrupted = threading.Event()
    # Ctrl-C sets a flag the loop reads between polls: a KeyboardInterrupt raised inside
    # librdkafka's poll can be lost there (seen once in CI: the consume never ended)
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    try:
        while (args.max is None or printed < args.max) and not interrupted.is_set():
            limit = BATCH_SIZE if args.max is None else min(BATCH_SIZE, args.max - printed)
            messages = consumer.consume(num_messages=limit, timeout=POLL_INTERVAL_S)
            records = [m for m in messages if not _is_error(m, args, kafka)]
            printed += len(records)  # before writing: a reader may send Ctrl-C as soon as it sees them
            out.write(b"".join(_format(message, args.print_key, separator) for message in records))
            out.flush()
            if records:
                last_record_at = time.monotonic()
            elif idle_limit_s is not None and time.monotonic() - last_record_at >= idle_limit_s:
                break
    except KeyboardInterrupt:
        pass  # Ctrl-C is how an open-ended consume ends
    finally:
        signal.signal(signal.SIGINT, previous)
    return printed


def _is_error(message: Any, args: argparse.Namespace, kafka: Any) -> bool:
    """True for an event rather than a record; fatal errors raise, others go to stderr."""
    error = message.error()
    if error is None:
        return False
    if error.code() == kafka.KafkaError._PARTITION_EOF:
        return True
    if error.fatal() or error.code() in (kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, kafka.KafkaError._UNKNOWN_TOPIC):
        raise topic_error(error, args, args.topic)
    print(f"logbus: {describe_kafka_error(error)}", file=sys.stderr)
    return True


def _format(message: Any, print_key: bool, separator: bytes) -> bytes:
    value = message.value()
    line = b"null" if value is None else value
    if print_key:
        key = message.key()
        line = (b"null" if key is None else key) + separator + line
    return line + b"\n"
