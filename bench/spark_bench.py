"""Spark connector benchmark: rows/s read and written, produce -> foreachBatch latency.

    python bench/spark_bench.py [--rows 1000000] [--phases decode,read,write,latency]

Against a fresh `logbus serve` (logbus.testing) with a 4-partition topic of 100-byte values:
- decode: the executor's read path without Spark, one partition: logbus's own Fetch client +
  column-wise Arrow decoding (what the connector uses) vs confluent-kafka's consumer with the
  Arrow batch built from its messages (the alternative), rows/s on one core;
- batch read: `spark.read.format("logbus")` of the whole topic into the noop sink (warm workers);
- read: a streaming query (`local[2]`, Trigger.AvailableNow, noop sink) over the whole topic, once
  in one micro-batch (no maxOffsetsPerTrigger: comparable with the batch read) and once in 8:
  wall rows/s including query start, rows/s over the micro-batches' own durations, and over
  their addBatch (the Spark job) alone;
- fixed cost: the median duration of a micro-batch that reads almost nothing, for logbus (4
  partitions, 100 rows each), a do-nothing Python data source (4 input partitions of one row)
  and Spark's own JVM `rate` source: what a micro-batch costs before any reading, and how much
  of it is the connector's;
- write: `df.write.format("logbus")` of the same number of rows (Spark generates them);
- sink: a streaming query copying the whole topic into another (4 micro-batches, key and
  value), with the exactly-once sink (transactions; `logbus.exactlyOnce=true`, the default)
  and with the at-least-once one (confluent-kafka), alternately, twice each: rows/s over the
  micro-batches' durations and over their addBatch (the Spark job: reading and writing); and
  the median duration of a micro-batch of 400 rows (12 of them), the fixed cost of each sink;
- latency: records produced every 100 ms, seen by `foreachBatch` with a 0 s processing-time
  trigger: produce -> foreachBatch time, p50 / p90 / max.
Results are printed as a markdown table and written as JSON next to this file (results/).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from logbus.spark.decode import SCHEMA
from logbus.spark.source import OffsetRange, read_range
from logbus.testing import running_broker

TOPIC, PARTITIONS, VALUE_SIZE = "bench", 4, 100
SMALL_TOPIC, SMALL_BATCHES, SMALL_BATCH_ROWS = "bench-small", 12, 400
QUIET = {"log_level": 0}


def fill_topic(bootstrap: str, rows: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000, **QUIET})
    value = b"v" * VALUE_SIZE
    for i in range(rows):
        while True:
            try:
                producer.produce(TOPIC, value=value, key=b"%d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def bench_decode(bootstrap: str, rows_per_partition: int) -> dict:
    """One partition into Arrow batches: logbus client + numpy decode vs confluent-kafka."""
    task = OffsetRange({"bootstrap.servers": bootstrap}, TOPIC, 0, 0, rows_per_partition, False, True)
    began = time.perf_counter()
    own = sum(batch.num_rows for batch in read_range(task))
    own_s = time.perf_counter() - began
    began = time.perf_counter()
    theirs = sum(batch.num_rows for batch in confluent_batches(bootstrap, rows_per_partition))
    theirs_s = time.perf_counter() - began
    assert own == theirs == rows_per_partition
    return {"decode_own_rows_s": own / own_s, "decode_confluent_rows_s": theirs / theirs_s}


def confluent_batches(bootstrap: str, end: int, batch_rows: int = 10_000):
    """What `read()` would do with confluent-kafka: consume(), then columns from the messages."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 8 << 20, **QUIET})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    position = 0
    try:
        while position < end:
            messages = [m for m in consumer.consume(batch_rows, 1.0) if m.error() is None and m.offset() < end]
            if not messages:
                continue
            position = messages[-1].offset() + 1
            stamps = [m.timestamp() for m in messages]
            yield pa.RecordBatch.from_arrays([
                pa.array([m.key() for m in messages], pa.binary()),
                pa.array([m.value() for m in messages], pa.binary()),
                pa.array([m.topic() for m in messages], pa.string()),
                pa.array([m.partition() for m in messages], pa.int32()),
                pa.array([m.offset() for m in messages], pa.int64()),
                pa.array([s[1] * 1000 for s in stamps], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array([s[0] - 1 for s in stamps], pa.int32()),
            ], schema=SCHEMA)
    finally:
        consumer.close()


def spark_session():
    from pyspark.sql import SparkSession

    import logbus.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("logbus-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    logbus.spark.register(spark)
    return spark


def bench_batch_read(spark, bootstrap: str, rows: int) -> dict:
    """Two batch reads into the noop sink: the first starts Python workers (imports of pyarrow and
    logbus, ~10 s), the second is the measurement."""
    df = spark.read.format("logbus").option("logbus.bootstrap.servers", bootstrap).option("subscribe", TOPIC).load()
    df.write.format("noop").mode("overwrite").save()
    began = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return {"batch_read_rows_s": rows / (time.perf_counter() - began)}


def bench_read(spark, bootstrap: str, rows: int, checkpoint: str, micro_batches: int) -> dict:
    """A streaming query (Trigger.AvailableNow, noop sink) over the whole topic in `micro_batches`
    micro-batches (maxOffsetsPerTrigger = rows / micro_batches; 1: no limit, Spark's default).
    Each micro-batch costs a fixed few hundred ms on top of reading (offset log and commit log
    writes, planning, a Spark job with one task per partition), so small ones read slowly."""
    reader = (spark.readStream.format("logbus").option("logbus.bootstrap.servers", bootstrap)
              .option("subscribe", TOPIC).option("startingOffsets", "earliest"))
    if micro_batches > 1:
        reader = reader.option("maxOffsetsPerTrigger", str(-(-rows // micro_batches)))
    began = time.perf_counter()
    query = (reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    wall = time.perf_counter() - began
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert sum(p["numInputRows"] for p in batches) == rows
    assert len(batches) == micro_batches, f"{len(batches)} micro-batches, expected {micro_batches}"
    busy_s = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    add_batch_s = sum(p["durationMs"]["addBatch"] for p in batches) / 1000
    name = f"read_{micro_batches}mb"
    return {f"{name}_wall_rows_s": rows / wall, f"{name}_batches_rows_s": rows / busy_s,
            f"{name}_add_batch_rows_s": rows / add_batch_s}


class _IdleStreamReader(DataSourceStreamReader):
    """A stream of one row per input partition per micro-batch, read from nowhere."""

    def __init__(self) -> None:
        self.batches = 0

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self) -> dict:
        self.batches += 1
        return {"batch": self.batches}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(i) for i in range(PARTITIONS)]

    def read(self, partition: InputPartition):
        yield pa.RecordBatch.from_pydict({"n": [partition.value]}, schema=pa.schema([("n", pa.int64())]))


class IdleSource(DataSource):
    """The floor under any Python streaming source: Spark's cost of a micro-batch of tasks."""

    @classmethod
    def name(cls) -> str:
        return "bench_idle"

    def schema(self) -> str:
        return "n long"

    def streamReader(self, schema) -> DataSourceStreamReader:
        return _IdleStreamReader()


def bench_fixed_cost(spark, bootstrap: str, checkpoint: str, micro_batches: int = 12) -> dict:
    """Median micro-batch duration (ms) with next to nothing to read, for logbus, a do-nothing
    Python source and Spark's JVM rate source, all into the noop sink."""
    spark.dataSource.register(IdleSource)
    streams = {
        "logbus": spark.readStream.format("logbus").option("logbus.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PARTITIONS * 100)),
        "python_idle": spark.readStream.format("bench_idle"),
        "jvm_rate": spark.readStream.format("rate").option("rowsPerSecond", "1000")
        .option("numPartitions", str(PARTITIONS)),
    }
    results = {}
    for name, reader in streams.items():
        query = (reader.load().writeStream.format("noop").option("checkpointLocation", f"{checkpoint}-{name}")
                 .trigger(processingTime="0 seconds").start())
        deadline = time.monotonic() + 120
        while len([p for p in query.recentProgress if p["numInputRows"]]) < micro_batches + 2:
            assert time.monotonic() < deadline, f"{name}: too few micro-batches"
            time.sleep(0.1)
        query.stop()
        busy = [p["durationMs"] for p in query.recentProgress if p["numInputRows"]][2:]  # warmed up
        for part in ("triggerExecution", "addBatch"):
            results[f"fixed_{name}_{part}_ms"] = statistics.median(d.get(part, 0) for d in busy)
    return results


def bench_write(spark, bootstrap: str, rows: int) -> dict:
    from pyspark.sql import functions as F

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic("bench-out", PARTITIONS, 1)]).values():
        future.result(15)
    df = (spark.range(rows, numPartitions=PARTITIONS)
          .select(F.col("id").cast("string").alias("key"), F.lit(b"w" * VALUE_SIZE).alias("value")).cache())
    df.count()
    began = time.perf_counter()
    df.write.format("logbus").mode("append").option("logbus.bootstrap.servers", bootstrap) \
        .option("topic", "bench-out").save()
    return {"write_rows_s": rows / (time.perf_counter() - began)}


def bench_sink(spark, bootstrap: str, rows: int, checkpoint: str, rounds: int = 2) -> dict:
    """The topic copied by a streaming query into a new topic, exactly once and at least once
    alternately; the best of `rounds` for each (the machine is shared and noisy). Then the
    fixed cost: the median duration of a micro-batch of SMALL_BATCH_ROWS rows."""
    results: dict[str, float] = {}
    _create_filled(bootstrap, SMALL_TOPIC, SMALL_BATCHES * SMALL_BATCH_ROWS)
    for round_number in range(rounds):
        for mode in ("at_least_once", "exactly_once"):
            name = f"{mode.replace('_', '-')}-{round_number}"
            batches = _copy_topic(spark, bootstrap, TOPIC, rows // 4, f"bench-{name}", f"{checkpoint}-{name}", mode)
            busy_s = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
            add_batch_s = sum(p["durationMs"]["addBatch"] for p in batches) / 1000
            small = _copy_topic(spark, bootstrap, SMALL_TOPIC, SMALL_BATCH_ROWS, f"bench-small-{name}",
                                f"{checkpoint}-small-{name}", mode)
            measured = {"batches_rows_s": rows / busy_s, "add_batch_rows_s": rows / add_batch_s}
            for key, value in measured.items():
                results[f"sink_{mode}_{key}"] = max(results.get(f"sink_{mode}_{key}", 0.0), value)
            median_ms = statistics.median(p["durationMs"]["triggerExecution"] for p in small[2:])
            key = f"sink_{mode}_small_batch_ms"
            results[key] = min(results.get(key, float("inf")), median_ms)
    return results


def _create_filled(bootstrap: str, topic: str, rows: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET})
    for i in range(rows):
        producer.produce(topic, value=b"s" * VALUE_SIZE, key=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def _copy_topic(spark, bootstrap: str, source: str, per_trigger: int, target: str, checkpoint: str,
                mode: str) -> list[dict]:
    """Copy `source` into a new topic `target` (key and value), `per_trigger` rows a micro-batch;
    the progress of the micro-batches that read rows."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(target, PARTITIONS, 1)]).values():
        future.result(15)
    query = (spark.readStream.format("logbus").option("logbus.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(per_trigger)).load()
             .select("key", "value").writeStream.format("logbus").option("logbus.bootstrap.servers", bootstrap)
             .option("topic", target).option("logbus.exactlyOnce", str(mode == "exactly_once").lower())
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return [p for p in query.recentProgress if p["numInputRows"]]


def bench_latency(spark, bootstrap: str, samples: int, checkpoint: str) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic("bench-latency", 1, 1)]).values():
        future.result(15)
    latencies: list[float] = []

    def seen(df, _batch_id: int) -> None:
        now = time.time()
        latencies.extend(now - float(row.value) for row in df.select(df.value.cast("string").alias("value")).collect())

    stream = (spark.readStream.format("logbus").option("logbus.bootstrap.servers", bootstrap)
              .option("subscribe", "bench-latency").load())
    query = (stream.writeStream.foreachBatch(seen).option("checkpointLocation", checkpoint)
             .trigger(processingTime="0 seconds").start())
    while not query.recentProgress:  # the first (empty) batch ran: the query is reading
        time.sleep(0.1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **QUIET})
    stop = threading.Event()
    for _ in range(samples):
        producer.produce("bench-latency", value=repr(time.time()).encode())
        producer.flush(5)
        stop.wait(0.1)
    deadline = time.monotonic() + 60
    while len(latencies) < samples and time.monotonic() < deadline:
        time.sleep(0.1)
    query.stop()
    ordered = sorted(latencies)
    return {"latency_p50_ms": 1000 * statistics.median(ordered),
            "latency_p90_ms": 1000 * ordered[int(0.9 * (len(ordered) - 1))], "latency_max_ms": 1000 * ordered[-1],
            "latency_samples": len(ordered)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--phases", default="decode,read,fixed,write,sink,latency")
    parser.add_argument("--latency-samples", type=int, default=50)
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    results: dict = {"rows": args.rows, "partitions": PARTITIONS, "value_bytes": VALUE_SIZE, "cpus": os.cpu_count(),
                     "load_average_1m_before": os.getloadavg()[0]}
    with running_broker() as broker:
        fill_topic(broker.bootstrap, args.rows)
        if "decode" in phases:
            results |= bench_decode(broker.bootstrap, args.rows // PARTITIONS)
        if phases & {"read", "fixed", "write", "sink", "latency"}:
            import tempfile

            spark = spark_session()
            results |= bench_batch_read(spark, broker.bootstrap, args.rows)
            with tempfile.TemporaryDirectory() as scratch:
                if "read" in phases:
                    for micro_batches in (1, 8):
                        results |= bench_read(spark, broker.bootstrap, args.rows, f"{scratch}/read{micro_batches}",
                                              micro_batches)
                if "fixed" in phases:
                    results |= bench_fixed_cost(spark, broker.bootstrap, f"{scratch}/fixed")
                if "write" in phases:
                    results |= bench_write(spark, broker.bootstrap, args.rows)
                if "sink" in phases:
                    results |= bench_sink(spark, broker.bootstrap, args.rows, f"{scratch}/sink")
                if "latency" in phases:
                    results |= bench_latency(spark, broker.bootstrap, args.latency_samples, f"{scratch}/latency")
            spark.stop()
    results["load_average_1m_after"] = os.getloadavg()[0]
    print("| metric | value |\n|---|---|")
    for name, value in results.items():
        print(f"| {name} | {value:,.0f} |" if isinstance(value, float) and value >= 100 else f"| {name} | {value} |")
    target = Path(__file__).parent / "results" / "spark_bench.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
