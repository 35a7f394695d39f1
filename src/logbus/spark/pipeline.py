"""The reference pipeline: order events -> windowed revenue per region, on Structured Streaming.

    logbus pipeline demo --bootstrap-server 127.0.0.1:9092     # all of it, once, then the results
    logbus pipeline generate --events 20000                    # the event stream only
    logbus pipeline job --out ./pipeline-out [--master URL]    # the streaming job, until Ctrl-C
    logbus pipeline show                                       # the aggregates from the output topic

Events (topic `orders`, key = customer id, JSON value): `order_id`, `customer`, `region`,
`amount` (2 decimals) and `event_time_ms`. Event time runs on a simulated clock; about 5% of
the events arrive late, up to 30 s behind the clock, which the 1 minute watermark admits
(events later than the watermark would be dropped, as Spark drops them).

The job reads `orders` with the `logbus` data source, sums per 1 minute event-time window and
region (orders, revenue, largest order) with a 1 minute watermark, and writes each closed window
(append mode) with two queries on the same source:
- to Parquet under `<out>/parquet`: Spark's file sink records committed files per micro-batch in
  `_spark_metadata`, and the source's offsets are in the checkpoint, so killing the job and
  starting it again neither loses input nor counts a window twice (exactly once, when the
  Parquet directory is read by Spark, which follows `_spark_metadata`);
- to the topic `order-stats` (key `region|window start`, JSON value): exactly once, through
  the sink's transactions (`logbus.exactlyOnce`), for readers at read_committed, as
  `logbus pipeline show` reads it.
Checkpoints live under `<out>/checkpoints`. `--master` takes any Spark master URL; on a cluster,
the executors need this package installed (`pip install logbus[spark]`) and must reach the broker.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

INPUT_TOPIC, OUTPUT_TOPIC = "orders", "order-stats"
REGIONS = ("eu-west", "eu-north", "us-east", "us-west", "ap-south")
WINDOW, WATERMARK = "1 minute", "1 minute"
EVENT_SCHEMA = "order_id string, customer string, region string, amount decimal(12,2), event_time_ms long"
LATE_SHARE, MAX_LATENESS_MS, STEP_MS = 0.05, 30_000, 100


@dataclass(frozen=True)
class Order:
    order_id: str
    customer: str
    region: str
    amount: Decimal
    event_time_ms: int

    def to_json(self) -> bytes:
        return json.dumps({"order_id": self.order_id, "customer": self.customer, "region": self.region,
                           "amount": float(self.amount), "event_time_ms": self.event_time_ms}).encode()


def orders(count: int, start_ms: int, seed: int = 7) -> Iterator[Order]:
    """`count` orders on a clock advancing ~STEP_MS per order; some arrive up to 30 s late."""
    rng = random.Random(seed)
    customers = [f"c-{n:04d}" for n in range(500)]
    clock = start_ms
    for number in range(count):
        clock += rng.randint(1, 2 * STEP_MS)
        customer = rng.choice(customers)
        late = rng.random() < LATE_SHARE
        event_time = clock - rng.randint(1_000, MAX_LATENESS_MS) if late else clock
        amount = Decimal(round(rng.lognormvariate(3.0, 0.8), 2)).quantize(Decimal("0.01"))
        region = REGIONS[hash_customer(customer) % len(REGIONS)]
        yield Order(f"o-{seed}-{number}", customer, region, amount, event_time)


def hash_customer(customer: str) -> int:
    return sum(customer.encode())


def generate(bootstrap: str, count: int, start_ms: int, seed: int, rate: float | None = None,
             topic: str = INPUT_TOPIC) -> int:
    """Produce the orders (keyed by customer) and wait for every acknowledgement."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "log_level": 0,
                         "enable.idempotence": True})
    failures: list[str] = []
    began = time.monotonic()
    for number, order in enumerate(orders(count, start_ms, seed)):
        _produce(producer, topic, order, failures)
        if rate and number % 100 == 0:
            time.sleep(max(0.0, began + number / rate - time.monotonic()))
    left = producer.flush(60)
    if failures or left:
        raise RuntimeError(f"{len(failures)} orders failed ({failures[:3]}), {left} unacknowledged")
    return count


def _produce(producer, topic: str, order: Order, failures: list[str]) -> None:
    def delivered(error, _message) -> None:
        if error is not None:
            failures.append(str(error))

    while True:
        try:
            producer.produce(topic, key=order.customer.encode(), value=order.to_json(), on_delivery=delivered)
            producer.poll(0)
            return
        except BufferError:
            producer.poll(0.05)


def create_topics(bootstrap: str, partitions: int = 4) -> None:
    """Create the input and output topics when missing."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    existing = set(admin.list_topics(timeout=10).topics)
    wanted = [NewTopic(INPUT_TOPIC, partitions, 1), NewTopic(OUTPUT_TOPIC, 1, 1)]
    missing = [topic for topic in wanted if topic.topic not in existing]
    for future in (admin.create_topics(missing).values() if missing else []):
        future.result(15)


# ---------------------------------------------------------------- the Spark job


def spark_session(master: str, app_name: str = "logbus-orders-pipeline"):
    import os

    from pyspark.sql import SparkSession

    import logbus.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    logbus.spark.register(session)
    return session


def window_aggregates(spark, bootstrap: str, max_offsets_per_trigger: int | None = None):
    """The streaming DataFrame of closed windows: window_start, window_end, region, orders,
    revenue, max_amount."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("logbus").option("logbus.bootstrap.servers", bootstrap)
              .option("subscribe", INPUT_TOPIC).option("startingOffsets", "earliest"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    events = (reader.load()
              .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("order"))
              .select("order.*")
              .withColumn("event_time", F.timestamp_millis("event_time_ms")))
    return (events.withWatermark("event_time", WATERMARK)
            .groupBy(F.window("event_time", WINDOW), "region")
            .agg(F.count("*").alias("orders"), F.sum("amount").alias("revenue"), F.max("amount").alias("max_amount"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "region", "orders", "revenue", "max_amount"))


def start_job(spark, bootstrap: str, out: Path, trigger: str | None, max_offsets_per_trigger: int | None):
    """Start the Parquet query and the topic query; returns both."""
    from pyspark.sql import functions as F

    aggregates = window_aggregates(spark, bootstrap, max_offsets_per_trigger)
    timing = {"availableNow": True} if trigger is None else {"processingTime": trigger}
    parquet = (aggregates.writeStream.format("parquet").outputMode("append")
               .option("path", str(out / "parquet"))
               .option("checkpointLocation", str(out / "checkpoints" / "parquet"))
               .trigger(**timing).queryName("orders_to_parquet").start())
    as_records = aggregates.select(
        F.concat_ws("|", "region", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm'Z'")).alias("key"),
        F.to_json(F.struct("window_start", "window_end", "region", "orders", "revenue", "max_amount")).alias("value"),
    )
    topic = (as_records.writeStream.format("logbus").outputMode("append")
             .option("logbus.bootstrap.servers", bootstrap).option("topic", OUTPUT_TOPIC)
             .option("logbus.exactlyOnce", "true")
             .option("checkpointLocation", str(out / "checkpoints" / "topic"))
             .trigger(**timing).queryName("orders_to_topic").start())
    return parquet, topic


def run_job(bootstrap: str, out: Path, master: str, trigger: str | None,
            max_offsets_per_trigger: int | None) -> None:
    """Run both queries until they end (availableNow) or until interrupted."""
    spark = spark_session(master)
    queries = start_job(spark, bootstrap, out, trigger, max_offsets_per_trigger)
    try:
        for query in queries:
            query.awaitTermination()
    finally:
        for query in queries:
            query.stop()


# ---------------------------------------------------------------- results


def latest_results(bootstrap: str, timeout_s: float = 10.0) -> dict[str, dict]:
    """The output topic read from the start at read_committed (only what the job committed),
    latest value per key."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "logbus-pipeline-show",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "log_level": 0})
    try:
        consumer.assign([TopicPartition(OUTPUT_TOPIC, 0, OFFSET_BEGINNING)])
        results: dict[str, dict] = {}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:  # the end (the last stable offset)
                    break
                continue
            results[message.key().decode()] = json.loads(message.value())
        return results
    finally:
        consumer.close()


def print_results(results: dict[str, dict]) -> None:
    print(f"{'window start':<26} {'region':<9} {'orders':>7} {'revenue':>11} {'largest':>9}")
    for row in sorted(results.values(), key=lambda r: (r["window_start"], r["region"])):
        print(f"{row['window_start']:<26} {row['region']:<9} {row['orders']:>7} {row['revenue']:>11} "
              f"{row['max_amount']:>9}")
    print(f"{len(results)} windows")


# ---------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", dest="bootstrap", default="127.0.0.1:9092", metavar="HOST:PORT",
                        help="broker to connect to (default %(default)s)")
    commands = parser.add_subparsers(dest="pipeline_command", required=True)
    demo = commands.add_parser("demo", help="create topics, generate orders, run the job once, show results")
    generate_cmd = commands.add_parser("generate", help="produce order events into the input topic")
    job = commands.add_parser("job", help="run the streaming job (until Ctrl-C, or --available-now)")
    commands.add_parser("show", help="print the aggregates from the output topic")
    for command in (demo, generate_cmd):
        command.add_argument("--events", type=int, default=20_000)
        command.add_argument("--seed", type=int, default=7)
        command.add_argument("--start-ms", type=int, default=None, help="event clock start (default: now - 1h)")
    generate_cmd.add_argument("--rate", type=float, default=None, help="events per second (default: no limit)")
    for command in (demo, job):
        command.add_argument("--out", type=Path, default=Path("pipeline-out"), help="Parquet and checkpoints")
        command.add_argument("--master", default="local[*]", help="Spark master URL (default %(default)s)")
        command.add_argument("--max-offsets-per-trigger", type=int, default=None)
    job.add_argument("--trigger", default="5 seconds", help="micro-batch interval (default %(default)s)")
    job.add_argument("--available-now", action="store_true", help="process what is there, then stop")


def run(args: argparse.Namespace) -> int:
    if args.pipeline_command in ("demo", "generate"):
        create_topics(args.bootstrap)
        start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000) - 3_600_000
        sent = generate(args.bootstrap, args.events, start_ms, args.seed, getattr(args, "rate", None))
        print(f"produced {sent} orders to {INPUT_TOPIC}")
    if args.pipeline_command in ("demo", "job"):
        create_topics(args.bootstrap)
        trigger = None if args.pipeline_command == "demo" or args.available_now else args.trigger
        run_job(args.bootstrap, args.out, args.master, trigger, args.max_offsets_per_trigger)
    if args.pipeline_command in ("demo", "show"):
        print_results(latest_results(args.bootstrap))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m logbus.spark.pipeline", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
