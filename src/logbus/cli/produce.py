"""`logbus produce TOPIC`: one record per input line, from stdin or `--file`.

With `--key-separator`, a line is split at the first separator into key and value; a line
without it is reported and counted as failed. Exits 1 if any record was not acknowledged.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

from .common import (
    CliError,
    add_connection_options,
    client_config,
    describe_kafka_error,
    fetch_topic_metadata,
    import_confluent_kafka,
    non_negative_int,
)

COMPRESSION_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("all", "-1", "0", "1")
BAR_WIDTH = 30
REDRAW_INTERVAL_S = 0.1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("produce", help="write lines from stdin or a file as records")
    parser.add_argument("topic")
    parser.add_argument("--file", metavar="PATH", help="read lines from PATH instead of stdin")
    parser.add_argument("--key-separator", metavar="SEP", help="split each line into key and value at SEP")
    parser.add_argument("--partition", type=non_negative_int, help="write every record to this partition")
    parser.add_argument("--compression", choices=COMPRESSION_CODECS, default="none", help="batch compression codec")
    parser.add_argument("--acks", choices=ACKS, default="all", help="acknowledgements to wait for (default all)")
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="draw a progress bar on stderr (default: when reading --file with stderr on a terminal)",
    )
    add_connection_options(parser)
    parser.set_defaults(run=run)


class ProgressBar:
    """`[#####-----]  50%  1.0/2.0 MiB` on one stderr line, redrawn at most every 0.1 s."""

    def __init__(self, total: int, stream: IO[str]) -> None:
        self.total = total
        self.stream = stream
        self.last_drawn = 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_drawn < REDRAW_INTERVAL_S:
            return
        self.last_drawn = now
        fraction = min(done / self.total, 1.0) if self.total else 1.0
        filled = int(fraction * BAR_WIDTH)
        mib = 1024 * 1024
        self.stream.write(
            f"\r[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {fraction:4.0%}  "
            f"{done / mib:.1f}/{self.total / mib:.1f} MiB"
        )
        self.stream.flush()

    def finish(self, done: int) -> None:
        self.update(done, force=True)
        self.stream.write("\n")
        self.stream.flush()


class DeliveryTally:
    """Counts acknowledged and failed records; remembers the first failure to report it."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: str | None = None

    def on_delivery(self, error: Any, _message: Any) -> None:
        if error is None:
            self.delivered += 1
        else:
            self.fail(describe_kafka_error(error))

    def fail(self, reason: str) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = reason


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes] | None:
    """(key, value) of one line (without its newline); None if the separator is missing."""
    if separator is None:
        return None, line
    key, found, value = line.partition(separator)
    return (key, value) if found else None


def read_lines(stream: IO[bytes]) -> Iterator[tuple[bytes, int]]:
    """Each line without its line ending, with the bytes consumed so far."""
    consumed = 0
    for raw in stream:
        consumed += len(raw)
        yield raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw, consumed


def run(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    producer = kafka.Producer(client_config(
        args, acks=args.acks, **{
            "compression.type": args.compression,
            "linger.ms": 5,
            "message.timeout.ms": int(args.timeout * 1000),
        },
    ))
    topic = fetch_topic_metadata(producer, args, args.topic)
    if args.partition is not None and args.partition not in topic.partitions:
        raise CliError(f"topic '{args.topic}' has no partition {args.partition} (it has {len(topic.partitions)})")
    tally = DeliveryTally()
    if args.file:
        try:
            stream = open(args.file, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    else:
        stream = sys.stdin.buffer
    try:
        _produce_lines(producer, args, stream, tally)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    unacknowledged = producer.flush(args.timeout)
    if unacknowledged:
        tally.failed += unacknowledged
        tally.first_error = tally.first_error or f"no acknowledgement within {args.timeout:g}s"
    if tally.failed:
        print(f"logbus: {tally.failed} of {tally.failed + tally.delivered} records failed; first: {tally.first_error}",
              file=sys.stderr)
        return 1
    return 0


def _progress_bar(args: argparse.Namespace, stream: IO[bytes]) -> ProgressBar | None:
    wanted = args.progress if args.progress is not None else bool(args.file) and sys.stderr.isatty()
    if not wanted:
        return None
    try:
        size = os.fstat(stream.fileno()).st_size
    except (OSError, ValueError):
        size = 0
    return ProgressBar(size, sys.stderr)


def _produce_lines(producer: Any, args: argparse.Namespace, stream: IO[bytes], tally: DeliveryTally) -> None:
    separator = args.key_separator.encode() if args.key_separator is not None else None
    partition = {"partition": args.partition} if args.partition is not None else {}
    bar = _progress_bar(args, stream)
    consumed = 0
    for number, (line, consumed) in enumerate(read_lines(stream), start=1):
        record = split_line(line, separator)
        if record is None:
            tally.fail(f"line {number} has no key separator {args.key_separator!r}")
            continue
        _send(producer, args.topic, record, partition, tally)
        if bar is not None:
            bar.update(consumed)
    if bar is not None:
        bar.finish(consumed)


def _send(producer: Any, topic: str, record: tuple[bytes | None, bytes], partition: dict[str, int],
          tally: DeliveryTally) -> None:
    """Queue one record, serving delivery reports to make room while the local queue is full.

    The wait is bounded: queued records leave the queue by delivery or by `message.timeout.ms`.
    """
    key, value = record
    while True:
        try:
            producer.produce(topic, value=value, key=key, on_delivery=tally.on_delivery, **partition)
        except BufferError:
            producer.poll(0.1)
            continue
        producer.poll(0)
        return
