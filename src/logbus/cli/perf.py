"""`logbus producer-perf` and `logbus consumer-perf`: kafka-producer-perf-test.sh and
kafka-consumer-perf-test.sh on confluent-kafka, with their main options and output lines.

producer-perf sends `--num-records` records of `--record-size` random uppercase letters (as
Kafka's tool makes them), at most `--throughput` records/s (-1: as fast as possible), and
prints a line per 5-second window and a total:

    N records sent, X records/sec (Y MB/sec), Z ms avg latency, W ms max latency, p ms 50th, ...

Latency is from `produce()` to the delivery report, as Kafka's tool measures it from `send()` to
its callback. consumer-perf reads `--messages` records (or fewer: it stops when none arrives for
`--timeout` ms) with a consumer in `--group` and prints Kafka's CSV header and row. Both loops are
bounded: by the record count, and by a deadline.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..config import load_properties
from .common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    EXIT_FAILURE,
    EXIT_USAGE,
    CliError,
    describe_kafka_error,
    import_confluent_kafka,
    parse_key_values,
    positive_int,
)

REPORTING_INTERVAL_S = 5.0  # Kafka's producer-perf window and consumer-perf --reporting-interval default
MB = 1024 * 1024
MAX_LATENCY_SAMPLES = 500_000  # as Kafka's tool: at most this many latencies are kept for percentiles
FLUSH_TIMEOUT_S = 60.0
DEFAULT_TRANSACTIONAL_ID = "performance-producer-default-transactional-id"  # Kafka's tool's defaults
DEFAULT_TRANSACTION_MS = 3000
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def add_producer_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("producer-perf", help="measure producer throughput and latency "
                                   "(kafka-producer-perf-test.sh)")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help=f"broker to connect to (default: bootstrap.servers of --producer-props, "
                             f"else {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--num-records", type=positive_int, required=True, metavar="N")
    parser.add_argument("--record-size", type=positive_int, required=True, metavar="BYTES")
    parser.add_argument("--throughput", type=float, required=True, metavar="RECORDS_PER_S",
                        help="the most records per second; -1: no limit")
    parser.add_argument("--producer-props", nargs="+", default=[], metavar="K=V",
                        help="producer settings (librdkafka names, most of them Kafka's)")
    parser.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                        help="a properties file of producer settings")
    parser.add_argument("--transactional-id", metavar="ID",
                        help=f"send in transactions with this id (default {DEFAULT_TRANSACTIONAL_ID} when "
                             "--transaction-duration-ms is given)")
    parser.add_argument("--transaction-duration-ms", type=positive_int, metavar="MS",
                        help=f"commit a transaction every this many ms (default {DEFAULT_TRANSACTION_MS} "
                             "with --transactional-id)")
    parser.set_defaults(run=run_producer)


def add_consumer_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("consumer-perf", help="measure consumer throughput "
                                   "(kafka-consumer-perf-test.sh)")
    parser.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--messages", "--num-records", dest="messages", type=positive_int, required=True,
                        metavar="N", help="how many records to read")
    parser.add_argument("--group", help="consumer group (default perf-consumer-<random>)")
    parser.add_argument("--timeout", type=positive_int, default=10_000, metavar="MS",
                        help="give up when no record arrives for this long (default 10000)")
    parser.add_argument("--from-latest", action="store_true", help="start at the end when the group has no offset")
    parser.add_argument("--fetch-size", type=positive_int, default=1024 * 1024, metavar="BYTES",
                        help="max bytes fetched per partition (default 1048576)")
    parser.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                        help="a properties file of consumer settings")
    parser.add_argument("--hide-header", action="store_true", help="print the numbers without the header line")
    parser.set_defaults(run=run_consumer)


# ---------------------------------------------------------------- producer


@dataclass
class ProducerStats:
    """Kafka's ProducerPerformance.Stats: totals, a reporting window, and sampled latencies."""

    num_records: int
    start: float = field(default_factory=time.monotonic)
    count: int = 0
    bytes: int = 0
    total_latency_ms: int = 0
    max_latency_ms: int = 0
    window_start: float = field(default_factory=time.monotonic)
    window_count: int = 0
    window_bytes: int = 0
    window_latency_ms: int = 0
    window_max_ms: int = 0
    latencies: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def sampling(self) -> int:
        return max(self.num_records // MAX_LATENCY_SAMPLES, 1)

    def record(self, iteration: int, latency_ms: int, size: int, now: float) -> None:
        self.count += 1
        self.bytes += size
        self.total_latency_ms += latency_ms
        self.max_latency_ms = max(self.max_latency_ms, latency_ms)
        self.window_count += 1
        self.window_bytes += size
        self.window_latency_ms += latency_ms
        self.window_max_ms = max(self.window_max_ms, latency_ms)
        if iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        if now - self.window_start >= REPORTING_INTERVAL_S:
            print(self.window_line(now), flush=True)
            self.window_start, self.window_count, self.window_bytes = now, 0, 0
            self.window_latency_ms, self.window_max_ms = 0, 0

    def window_line(self, now: float) -> str:
        elapsed = max(now - self.window_start, 1e-9)
        return (f"{self.window_count} records sent, {self.window_count / elapsed:.1f} records/sec "
                f"({self.window_bytes / MB / elapsed:.2f} MB/sec), "
                f"{self.window_latency_ms / max(self.window_count, 1):.1f} ms avg latency, "
                f"{float(self.window_max_ms):.1f} ms max latency.")

    def total_line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        p50, p95, p99, p999 = percentiles(self.latencies, (0.5, 0.95, 0.99, 0.999))
        return (f"{self.count} records sent, {self.count / elapsed:f} records/sec "
                f"({self.bytes / MB / elapsed:.2f} MB/sec), {self.total_latency_ms / max(self.count, 1):.2f} ms avg "
                f"latency, {float(self.max_latency_ms):.2f} ms max latency, {p50} ms 50th, {p95} ms 95th, "
                f"{p99} ms 99th, {p999} ms 99.9th.")


def percentiles(latencies: list[int], points: tuple[float, ...]) -> list[int]:
    """Kafka's percentiles: the sorted sample at index int(p * size) (0 without samples)."""
    ordered = sorted(latencies)
    return [ordered[int(p * len(ordered))] if ordered else 0 for p in points]


class Throttler:
    """Kafka's ThroughputThrottler: sleep as needed to send at most `per_second` records a second."""

    def __init__(self, per_second: float, start: float) -> None:
        self.per_second = per_second
        self.start = start

    def wait(self, sent: int, poll: Any) -> None:
        """Before record `sent`: serve delivery reports (`poll`) while ahead of the rate."""
        if self.per_second <= 0:
            return
        due = self.start + sent / self.per_second
        while (remaining := due - time.monotonic()) > 0:
            poll(min(remaining, 0.1))


def _producer_settings(args: argparse.Namespace) -> dict[str, str]:
    settings = load_properties(args.producer_config) if args.producer_config else {}
    settings.update(parse_key_values(args.producer_props, "--producer-props"))
    if args.bootstrap_server:
        settings["bootstrap.servers"] = args.bootstrap_server
    settings.setdefault("bootstrap.servers", DEFAULT_BOOTSTRAP)
    if args.transactional_id or args.transaction_duration_ms:
        settings["transactional.id"] = args.transactional_id or DEFAULT_TRANSACTIONAL_ID
    return settings


class Transactions:
    """Kafka's producer-perf transactions: one begun before a send when none is open, committed
    once it has lasted `duration_s`, and the last one committed at the end. Without a duration
    every call is a no-op."""

    def __init__(self, producer: Any, duration_s: float | None) -> None:
        self.producer = producer
        self.duration_s = duration_s
        self.started: float | None = None
        if duration_s is not None:
            producer.init_transactions(DEFAULT_TIMEOUT_S)

    def before_send(self, now: float) -> None:
        if self.duration_s is not None and self.started is None:
            self.producer.begin_transaction()
            self.started = now

    def after_send(self, now: float) -> None:
        if self.started is not None and now - self.started >= self.duration_s:  # type: ignore[operator]
            self.finish()

    def finish(self) -> None:
        if self.started is not None:
            self.producer.commit_transaction(FLUSH_TIMEOUT_S)
            self.started = None


def run_producer(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    settings = _producer_settings(args)
    try:
        producer = kafka.Producer({**settings, "log_level": 0})
    except (kafka.KafkaException, OSError) as exc:
        raise CliError(f"cannot create the producer: {exc}", EXIT_USAGE) from None
    _require_topic(producer, kafka, settings["bootstrap.servers"], args.topic)
    payload = bytes(random.choices(range(ord("A"), ord("Z") + 1), k=args.record_size))
    try:
        transactions = Transactions(producer, _transaction_duration_s(args))  # before the clock starts
        stats = ProducerStats(args.num_records)
        throttler = Throttler(args.throughput, stats.start)
        for iteration in range(args.num_records):
            throttler.wait(iteration, producer.poll)
            transactions.before_send(time.monotonic())
            _produce(producer, kafka, args.topic, payload, _on_delivery(stats, iteration, time.monotonic()))
            producer.poll(0)
            transactions.after_send(time.monotonic())
        transactions.finish()
    except kafka.KafkaException as exc:
        raise CliError(f"transaction failed: {describe_kafka_error(exc.args[0])}") from None
    left = producer.flush(FLUSH_TIMEOUT_S)
    print(stats.total_line(time.monotonic()), flush=True)
    for error in sorted(set(stats.errors)):
        print(f"logbus: {stats.errors.count(error)} records failed: {error}", file=sys.stderr)
    if left:
        print(f"logbus: {left} records not acknowledged within {FLUSH_TIMEOUT_S:g}s", file=sys.stderr)
    return EXIT_FAILURE if left or stats.errors else 0


def _transaction_duration_s(args: argparse.Namespace) -> float | None:
    if args.transaction_duration_ms:
        return args.transaction_duration_ms / 1000
    return DEFAULT_TRANSACTION_MS / 1000 if args.transactional_id else None


def _require_topic(client: Any, kafka: Any, bootstrap: str, topic: str) -> None:
    """Fail fast, in one line, when no broker answers or the topic is missing (a producer's
    metadata request may create it, as Kafka's producer-perf does where the broker allows)."""
    try:
        metadata = client.list_topics(topic, timeout=DEFAULT_TIMEOUT_S)
    except kafka.KafkaException:
        raise CliError(f"cannot reach a broker at {bootstrap} within {DEFAULT_TIMEOUT_S:g}s") from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise CliError(f"topic '{topic}' does not exist")


def _produce(producer: Any, kafka: Any, topic: str, payload: bytes, callback: Any) -> None:
    """One `produce()`, waiting for room while librdkafka's queue is full."""
    while True:
        try:
            producer.produce(topic, payload, on_delivery=callback)
            return
        except BufferError:
            producer.poll(0.1)
        except kafka.KafkaException as exc:
            raise CliError(f"cannot produce to '{topic}': {describe_kafka_error(exc.args[0])}") from None


def _on_delivery(stats: ProducerStats, iteration: int, sent_at: float) -> Any:
    def delivered(error: Any, message: Any) -> None:
        now = time.monotonic()
        if error is not None:
            stats.errors.append(describe_kafka_error(error))
            return
        stats.record(iteration, int((now - sent_at) * 1000), len(message), now)

    return delivered


# ---------------------------------------------------------------- consumer


@dataclass
class ConsumerRun:
    """What consumer-perf measured: wall-clock start and end, when the first assignment came
    (rebalance.time.ms is the time until then, fetch.time.ms the rest)."""

    start_ms: int
    end_ms: int = 0
    joined_ms: int = 0
    messages: int = 0
    bytes: int = 0

    def row(self) -> str:
        elapsed_s = max(self.end_ms - self.start_ms, 1) / 1000
        rebalance_ms = self.joined_ms - self.start_ms if self.joined_ms else 0
        fetch_ms = self.end_ms - self.start_ms - rebalance_ms
        megabytes = self.bytes / MB
        fetch_s = max(fetch_ms, 1) / 1000
        return (f"{_date(self.start_ms)}, {_date(self.end_ms)}, {megabytes:.4f}, {megabytes / elapsed_s:.4f}, "
                f"{self.messages}, {self.messages / elapsed_s:.4f}, {rebalance_ms}, {fetch_ms}, "
                f"{megabytes / fetch_s:.4f}, {self.messages / fetch_s:.4f}")


def _date(epoch_ms: int) -> str:
    """Kafka's "yyyy-MM-dd HH:mm:ss:SSS", local time."""
    moment = datetime.fromtimestamp(epoch_ms / 1000)
    return f"{moment.strftime(DATE_FORMAT)}:{epoch_ms % 1000:03d}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _consumer_settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = load_properties(args.consumer_config) if args.consumer_config else {}
    settings.update({
        "bootstrap.servers": args.bootstrap_server,
        "group.id": args.group or f"perf-consumer-{random.randrange(100_000)}",
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
        "max.partition.fetch.bytes": args.fetch_size,
        "enable.auto.commit": True,
        "log_level": 0,
    })
    return settings


def run_consumer(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    run = ConsumerRun(_now_ms())

    def on_assign(_consumer: Any, _partitions: Any) -> None:
        run.joined_ms = run.joined_ms or _now_ms()

    try:
        consumer = kafka.Consumer(_consumer_settings(args))
        consumer.subscribe([args.topic], on_assign=on_assign)
    except (kafka.KafkaException, OSError) as exc:
        raise CliError(f"cannot create the consumer: {exc}", EXIT_USAGE) from None
    try:
        _require_topic(consumer, kafka, args.bootstrap_server, args.topic)
        complete = _consume(consumer, kafka, args, run)
    finally:
        run.end_ms = _now_ms()
        consumer.close()
    if not args.hide_header:
        print(CONSUMER_HEADER)
    if not complete:
        print(f"WARNING: Exiting before consuming the expected number of messages: timeout ({args.timeout} ms) "
              "exceeded. You can use the --timeout option to increase the timeout.", file=sys.stderr)
    print(run.row())
    return 0


def _consume(consumer: Any, kafka: Any, args: argparse.Namespace, run: ConsumerRun) -> bool:
    """Read until `--messages` records or `--timeout` ms without one; True when all were read."""
    last_record = time.monotonic()
    while run.messages < args.messages:
        idle = time.monotonic() - last_record
        if idle * 1000 >= args.timeout:
            return False
        batch = consumer.consume(min(args.messages - run.messages, 10_000), timeout=min(1.0, args.timeout / 1000))
        for message in batch:
            error = message.error()
            if error is not None:
                if error.code() == kafka.KafkaError._PARTITION_EOF:
                    continue
                raise CliError(f"consuming '{args.topic}' failed: {describe_kafka_error(error)}")
            run.messages += 1
            run.bytes += len(message.key() or b"") + len(message.value() or b"")  # as Kafka's tool counts
            last_record = time.monotonic()
    return True
