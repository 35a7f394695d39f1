"""The `logbus` PySpark data source against a real broker and real local Spark.

One broker serves the whole module, and one SparkSession (the `spark` fixture of conftest.py)
both Spark modules: a session takes 6-20 s to start. Every test uses its own topics and
checkpoint directories.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from helpers import QUIET, wait_until
from test_sasl import add_user
from test_tls import certs, tls_config  # noqa: F401 - certs: the fixture

from logbus.testing import BrokerProcess, running_broker

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.types import BinaryType, StructField, StructType  # noqa: E402
from pyspark.sql.utils import StreamingQueryException  # noqa: E402

import logbus.spark  # noqa: E402
from logbus.client.errors import AuthenticationError  # noqa: E402
from logbus.protocol.records import build_batch  # noqa: E402
from logbus.spark.decode import decode  # noqa: E402
from logbus.spark.options import client_config  # noqa: E402
from logbus.spark.sink import WriteError, parse_target, produce_batches  # noqa: E402
from logbus.spark.txn_client import TxnClient  # noqa: E402

pytestmark = pytest.mark.spark
HEADERS = "headers"


def spark_home_without_zipped_pyspark(links: Path) -> Path:
    """`links`, made a SPARK_HOME of links to pip's pyspark directory, but for its python/lib
    (pyspark.zip, py4j's zip).

    Spark puts $SPARK_HOME/python/lib/pyspark.zip first on every Python worker's PYTHONPATH
    (PythonUtils.sparkPythonPath), and Python caches no bytecode for a zip: each worker compiled
    pyspark from source, 1.4 s of CPU instead of 0.45 s from the installed package's bytecode.
    The worker a streaming query starts for its source (PythonStreamingSourceRunner) has 10 s to
    connect back, fixed in PythonWorkerFactory (SPARK-45245, no setting), and on two loaded cores
    it missed that ("Python worker failed to connect back"). Without the zips the workers import
    the same pyspark from site-packages."""
    from pyspark.find_spark_home import _find_spark_home

    pip_home = Path(_find_spark_home())
    links.mkdir(exist_ok=True)
    for entry in pip_home.iterdir():
        if entry.name != "python" and not (links / entry.name).exists():
            (links / entry.name).symlink_to(entry)
    return links


# The tests' Spark JVMs (the session's, and the drivers run as processes) compile with C1 only
# and collect garbage on one thread: short-lived JVMs on two cores started in half the time.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_session(name: str, master: str, spark_home: Path) -> Iterator[SparkSession]:
    """A local Spark session with the logbus source registered, stopped afterwards. Until then
    the environment, which the Spark drivers the tests start as processes inherit, names this
    Python, spark_home_without_zipped_pyspark and TEST_JVM_OPTIONS (spark-submit's JVM and the
    launcher's)."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("PYSPARK_PYTHON", sys.executable)
        environment.setenv("SPARK_HOME", str(spark_home_without_zipped_pyspark(spark_home)))
        environment.setenv("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)
        environment.setenv("SPARK_LAUNCHER_OPTS", TEST_JVM_OPTIONS)
        session = (
            SparkSession.builder.master(master).appName(name)
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.streaming.pollingDelay", "10ms")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        logbus.spark.register(session)
        yield session
        session.stop()


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config={"num.partitions": "1"}) as process:
        yield process


def create_topic(broker: BrokerProcess, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        future.result(10)


def produce(broker: BrokerProcess, topic: str, records: list[dict]) -> None:
    """Produce records given as Producer.produce keyword arguments; wait for every ack."""
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **QUIET})
    for record in records:
        producer.produce(topic, on_delivery=lambda err, _m: err and errors.append(err), **record)
    assert producer.flush(30) == 0
    assert not errors, errors


def reader(spark: SparkSession, broker: BrokerProcess, stream: bool = False, **options: str):
    source = spark.readStream if stream else spark.read
    return source.format("logbus").option("logbus.bootstrap.servers", broker.bootstrap).options(**options)


def murmur2(key: bytes) -> int:
    """Kafka's Utils.murmur2 (Java), as an unsigned 32-bit number."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(key)) & mask
    whole = len(key) & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        h = ((h * m) & mask) ^ ((k * m) & mask)
    tail = key[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h = ((h ^ tail[0]) * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    return h ^ (h >> 15)


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Java's DefaultPartitioner for keyed records: toPositive(murmur2(key)) % partitions."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def test_reference_murmur2_matches_kafka_vectors() -> None:
    # Expected values from Kafka's UtilsTest.testMurmur2 (signed 32-bit).
    for key, signed in [(b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
                        (b"a-little-bit-longer-string", -1486304829), (b"abc", 479470107)]:
        assert murmur2(key) == signed & 0xFFFFFFFF


def test_decode_keeps_the_range_and_skips_batches_past_its_end() -> None:
    """A fetch returns whole batches beyond the range; those are not decoded, and a gap (compacted
    offsets) running past the range's end ends the range rather than stalling it."""
    records = b"".join(
        build_batch([(b"k%d" % o, b"v%d" % o) for o in range(base, base + 3)], 1_000, base_offset=base)
        for base in (0, 3, 10)
    )
    batch, next_offset = decode(records, "t", 0, 1, 5, False)
    assert batch is not None and batch.column("offset").to_pylist() == [1, 2, 3, 4]
    assert batch.column("value").to_pylist() == [b"v1", b"v2", b"v3", b"v4"]
    assert next_offset == 6
    batch, next_offset = decode(records, "t", 0, 4, 8, False)
    assert batch is not None and batch.column("offset").to_pylist() == [4, 5]
    assert next_offset == 8


def test_batch_read_returns_every_record_once_with_spark_kafka_columns(spark, broker) -> None:
    create_topic(broker, "batch3", 3)
    records = [{"key": f"k{i}".encode(), "value": f"value-{i}".encode(), "partition": i % 3,
                "timestamp": 1_700_000_000_000 + i, "headers": [("n", str(i).encode())] if i % 2 else None}
               for i in range(3000)]
    produce(broker, "batch3", records)
    df = reader(spark, broker, subscribe="batch3", includeHeaders="true").load()
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", HEADERS]
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = df.collect()
    assert len(rows) == 3000
    by_value = {bytes(row.value): row for row in rows}
    assert len(by_value) == 3000
    for i, record in enumerate(records):
        row = by_value[record["value"]]
        assert (bytes(row.key), row.topic, row.partition, row.offset) == (record["key"], "batch3", i % 3, i // 3)
        assert int(row.timestamp.timestamp() * 1000) == record["timestamp"]
        assert row.timestampType == 0
        expected_headers = [("n", str(i).encode())] if i % 2 else []
        assert [(h.key, bytes(h.value)) for h in row.headers] == expected_headers
    plain = reader(spark, broker, subscribe="batch3", minPartitions="7").load()
    assert HEADERS not in plain.columns
    assert plain.rdd.getNumPartitions() >= 7
    assert plain.select("partition", "offset").distinct().count() == 3000


def test_batch_read_by_offsets_json_and_by_timestamp(spark, broker) -> None:
    create_topic(broker, "ranges", 2)
    base = (int(time.time()) - 3600) * 1000  # not ahead: Kafka 4 refuses timestamps over an hour in the future
    produce(broker, "ranges", [{"value": b"%d" % i, "partition": p, "timestamp": base + i * 1000}
                               for p in range(2) for i in range(100)])

    def offsets(**options: str) -> dict[int, list[int]]:
        rows = reader(spark, broker, subscribe="ranges", **options).load().select("partition", "offset").collect()
        result: dict[int, list[int]] = {0: [], 1: []}
        for row in rows:
            result[row.partition].append(row.offset)
        return {p: sorted(found) for p, found in result.items()}

    assert offsets(startingOffsets='{"ranges": {"0": 10, "1": -2}}',
                   endingOffsets='{"ranges": {"0": 20, "1": 5}}') == {0: list(range(10, 20)), 1: list(range(5))}
    assert offsets(startingOffsets='{"ranges": {"0": 95}}', endingOffsets="latest") == {
        0: list(range(95, 100)), 1: list(range(100))}
    assert offsets(startingOffsetsByTimestamp=f'{{"ranges": {{"0": {base + 40_000}, "1": {base + 90_500}}}}}') == {
        0: list(range(40, 100)), 1: list(range(91, 100))}
    assert offsets(startingTimestamp=str(base + 98_000), endingOffsetsByTimestamp=(
        f'{{"ranges": {{"0": {base + 99_000}, "1": {base + 99_999_000}}}}}')) == {0: [98], 1: [98, 99]}
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        offsets(startingTimestamp=str(base + 10**9))


def test_streaming_max_offsets_per_trigger_bounds_micro_batches(spark, broker, tmp_path) -> None:
    create_topic(broker, "bounded", 2)
    produce(broker, "bounded", [{"value": b"x" * 10, "partition": i % 2} for i in range(1000)])
    stream = reader(spark, broker, stream=True, subscribe="bounded", startingOffsets="earliest",
                    maxOffsetsPerTrigger="250").load()
    query = (stream.writeStream.format("memory").queryName("bounded").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 1000
    assert len(sizes) >= 4 and max(sizes) <= 250, sizes
    assert spark.table("bounded").select("partition", "offset").distinct().count() == 1000


def test_streaming_restart_from_checkpoint_misses_and_repeats_nothing(spark, broker, tmp_path) -> None:
    create_topic(broker, "restart", 3)
    batches: dict[int, list[tuple[int, int]]] = {}

    def remember(df, batch_id: int) -> None:
        rows = sorted((row.partition, row.offset) for row in df.select("partition", "offset").collect())
        assert batches.setdefault(batch_id, rows) == rows, "a replayed micro-batch read different records"

    def start():
        stream = reader(spark, broker, stream=True, subscribe="restart", startingOffsets="earliest",
                        maxOffsetsPerTrigger="150").load()
        return (stream.writeStream.foreachBatch(remember).option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(processingTime="0 seconds").start())

    def seen() -> int:
        return sum(len(rows) for rows in list(batches.values()))

    producer = threading.Thread(target=produce, args=(broker, "restart", [
        {"value": b"%d" % i, "key": b"%d" % i} for i in range(1500)]))
    producer.start()
    query = start()
    wait_until(lambda: seen() >= 300, timeout=60, message="first micro-batches")
    query.stop()
    assert seen() < 1500, "the first run should have stopped before the end of the input"
    producer.join()
    query = start()
    try:
        wait_until(lambda: seen() >= 1500, timeout=90, message="every record after the restart")
    finally:
        query.stop()
    offsets = sorted(pair for rows in batches.values() for pair in rows)
    expected = sorted((p, o) for p, count in _end_offsets(broker, "restart", 3).items() for o in range(count))
    assert offsets == expected
    assert len(expected) == 1500


def _end_offsets(broker: BrokerProcess, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ends", **QUIET})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def test_fail_on_data_loss_after_delete_records(spark, broker, tmp_path) -> None:
    create_topic(broker, "lossy", 1)
    produce(broker, "lossy", [{"value": b"%d" % i} for i in range(100)])
    checkpoint = str(tmp_path / "cp")

    offsets: dict[str, list[int]] = {"true": [], "false": []}

    def run(fail_on_data_loss: str):
        def remember(df, _batch_id: int) -> None:
            offsets[fail_on_data_loss] += [row.offset for row in df.select("offset").collect()]

        stream = reader(spark, broker, stream=True, subscribe="lossy", startingOffsets="earliest",
                        failOnDataLoss=fail_on_data_loss).load()
        query = (stream.writeStream.foreachBatch(remember).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(120)
        return query

    assert run("true").exception() is None
    assert sorted(offsets["true"]) == list(range(100))
    produce(broker, "lossy", [{"value": b"%d" % i} for i in range(100, 200)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    for future in admin.delete_records([TopicPartition("lossy", 0, 150)]).values():
        future.result(10)

    failed = run("true")
    assert isinstance(failed.exception(), StreamingQueryException)
    message = str(failed.exception())
    assert "Some data may have been lost" in message and "lossy-0" in message and "failOnDataLoss" in message

    skipped = run("false")
    assert skipped.exception() is None
    assert sorted(offsets["false"]) == list(range(150, 200))
    with pytest.raises(Exception, match="Some data may have been lost"):
        reader(spark, broker, subscribe="lossy", startingOffsets='{"lossy": {"0": 10}}').load().collect()
    assert reader(spark, broker, subscribe="lossy", startingOffsets='{"lossy": {"0": 10}}',
                  failOnDataLoss="false").load().count() == 50


def test_pattern_subscription_picks_up_new_topics_and_partitions(spark, broker) -> None:
    create_topic(broker, "pat-a", 1)
    produce(broker, "pat-a", [{"value": b"a%d" % i} for i in range(10)])
    stream = reader(spark, broker, stream=True, subscribePattern="pat-.*", startingOffsets="earliest").load()
    query = (stream.writeStream.format("memory").queryName("patterned")
             .trigger(processingTime="200 milliseconds").start())
    try:
        count = lambda: spark.table("patterned").count()  # noqa: E731
        wait_until(lambda: count() == 10, timeout=60, message="the first topic's records")
        create_topic(broker, "pat-b", 2)
        produce(broker, "pat-b", [{"value": b"b%d" % i, "partition": i % 2} for i in range(20)])
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
        for future in admin.create_partitions([NewPartitions("pat-a", 2)]).values():
            future.result(10)
        produce(broker, "pat-a", [{"value": b"a-new%d" % i, "partition": 1} for i in range(5)])
        wait_until(lambda: count() >= 35, timeout=60, message="records of the new topic and partition")
    finally:
        query.stop()
    rows = spark.table("patterned").select("topic", "partition", "offset").collect()
    assert len({(r.topic, r.partition, r.offset) for r in rows}) == len(rows) == 35
    assert {(r.topic, r.partition) for r in rows} == {("pat-a", 0), ("pat-a", 1), ("pat-b", 0), ("pat-b", 1)}


def test_batch_write_round_trip_with_keys_headers_and_partitions(spark, broker) -> None:
    create_topic(broker, "written", 4)
    data = [(f"key-{i}" if i % 5 else None, f"value-{i}".encode(), [("h", f"{i}".encode())] if i % 3 else [],
             (i % 4) if i % 7 == 0 else None) for i in range(400)]
    df = spark.createDataFrame(data, "key string, value binary, headers array<struct<key:string,value:binary>>, "
                                     "partition int")
    (df.write.format("logbus").mode("append").option("logbus.bootstrap.servers", broker.bootstrap)
     .option("topic", "written")
     .save())
    rows = reader(spark, broker, subscribe="written", includeHeaders="true").load().collect()
    assert len(rows) == 400
    by_value = {bytes(row.value): row for row in rows}
    for i, (key, value, headers, partition) in enumerate(data):
        row = by_value[value]
        assert (bytes(row.key).decode() if row.key is not None else None) == key
        assert [(h.key, bytes(h.value)) for h in row.headers] == headers
        if partition is not None:
            assert row.partition == partition, i
        elif key is not None:
            assert row.partition == murmur2_partition(key.encode(), 4), i


@pytest.mark.parametrize("exactly_once", ["true", "false"])
def test_streaming_write_round_trip(spark, broker, tmp_path, exactly_once: str) -> None:
    """Both sinks: transactions (the default) and the at-least-once producer."""
    source, target = f"copy-in-{exactly_once}", f"copy-out-{exactly_once}"
    create_topic(broker, source, 2)
    create_topic(broker, target, 3)
    produce(broker, source, [{"key": b"k%d" % i, "value": b"v%d" % i, "headers": [("i", b"%d" % i)]}
                             for i in range(500)])
    stream = reader(spark, broker, stream=True, subscribe=source, startingOffsets="earliest",
                    includeHeaders="true", maxOffsetsPerTrigger="200").load()
    query = (stream.select("key", "value", "headers").writeStream.format("logbus")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", target)
             .option("logbus.exactlyOnce", exactly_once)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    rows = reader(spark, broker, subscribe=target, includeHeaders="true",
                  **{"isolation.level": "read_committed"}).load().collect()
    assert sorted((bytes(r.key), bytes(r.value), bytes(r.headers[0].value)) for r in rows) == sorted(
        (b"k%d" % i, b"v%d" % i, b"%d" % i) for i in range(500))
    assert all(r.partition == murmur2_partition(bytes(r.key), 3) for r in rows)


def test_bad_options_fail_with_clear_messages(spark, broker) -> None:
    with pytest.raises(Exception, match="exactly one of"):
        reader(spark, broker).load().collect()
    with pytest.raises(Exception, match="not JSON"):
        reader(spark, broker, subscribe="batch3", startingOffsets="{nope").load().collect()


def test_reference_pipeline_survives_a_kill_without_losing_or_double_counting(spark, broker, tmp_path) -> None:
    """The job is killed (SIGKILL, whole process group) mid-stream, then restarted: the Parquet
    output and the topic (read_committed) equal aggregates computed here from the input topic,
    each window exactly once."""
    from logbus.spark import pipeline

    pipeline.create_topics(broker.bootstrap)
    pipeline.generate(broker.bootstrap, 6000, start_ms=1_750_000_000_000, seed=3)
    out = tmp_path / "out"
    commits = out / "checkpoints" / "parquet" / "commits"
    job = subprocess.Popen(
        [sys.executable, "-m", "logbus.spark.pipeline", "--bootstrap-server", broker.bootstrap, "job",
         "--out", str(out), "--master", "local[2]", "--trigger", "0 seconds", "--max-offsets-per-trigger", "800"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_until(lambda: commits.is_dir() and len(list(commits.glob("[0-9]*"))) >= 2, timeout=240,
                   interval=0.2, message="two committed micro-batches of the first run")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    assert len(list(commits.glob("[0-9]*"))) < 9, "the first run should not have finished the input"

    for query in pipeline.start_job(spark, broker.bootstrap, out, trigger=None, max_offsets_per_trigger=None):
        query.awaitTermination(240)
        assert query.exception() is None

    expected = expected_windows(broker)
    rows = spark.read.parquet(str(out / "parquet")).collect()
    found = [(int(r.window_start.timestamp() * 1000), r.region, r.orders, r.revenue, r.max_amount) for r in rows]
    assert len(found) == len({(start, region) for start, region, *_ in found}), "a window was written twice"
    assert sorted(found) == sorted(expected)
    published = pipeline.latest_results(broker.bootstrap)
    assert sorted((r["region"], r["orders"]) for r in published.values()) == sorted((e[1], e[2]) for e in expected)
    committed = reader(spark, broker, subscribe=pipeline.OUTPUT_TOPIC, **{"isolation.level": "read_committed"}).load()
    assert committed.count() == len(expected), "the topic got each window once (exactly-once sink)"


def expected_windows(broker: BrokerProcess) -> list[tuple]:
    """Per 1 minute window and region, from the input topic: orders, revenue, largest amount; only
    windows the 1 minute watermark has closed (end <= latest event time - 1 minute)."""
    from decimal import Decimal

    from helpers import consume_partition

    from logbus.spark import pipeline

    events = []
    for partition, end in _end_offsets(broker, pipeline.INPUT_TOPIC, 4).items():
        for message in consume_partition(broker.bootstrap, pipeline.INPUT_TOPIC, partition, end):
            events.append(json.loads(message.value(), parse_float=Decimal))
    watermark = max(e["event_time_ms"] for e in events) - 60_000
    windows: dict[tuple[int, str], list[Decimal]] = {}
    for event in events:
        start = event["event_time_ms"] // 60_000 * 60_000
        windows.setdefault((start, event["region"]), []).append(event["amount"])
    return [(start, region, len(amounts), sum(amounts), max(amounts))
            for (start, region), amounts in windows.items() if start + 60_000 <= watermark]


# ---------------------------------------------------------------- secured listeners

PASSWORD = "alice-secret"


@pytest.fixture(scope="module")
def secured(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:  # noqa: F811
    """SASL_SSL (SCRAM-SHA-512, certificates from `logbus certs`) beside PLAINTEXT; user `alice`
    made with `logbus users set` before the broker started."""
    data = tmp_path_factory.mktemp("secured") / "data"
    add_user(["--data-dir", str(data)], "alice", PASSWORD, data.parent, mechanisms=("SCRAM-SHA-512",))
    config = tls_config(certs, listeners="PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                        **{"sasl.enabled.mechanisms": "SCRAM-SHA-512", "num.partitions": "1"})
    with running_broker(config, data_dir=str(data)) as started:
        yield started


def java_security(broker: BrokerProcess, certs: Path, password: str = PASSWORD) -> dict[str, str]:  # noqa: F811
    """The SASL_SSL listener as Spark's Kafka source is told about it: Java client names."""
    return {"kafka.bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_SSL']}", "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                      f'username="alice" password="{password}";',
            "kafka.ssl.truststore.location": str(certs / "ca.pem"), "kafka.ssl.truststore.type": "PEM"}


def test_source_and_sinks_work_through_sasl_ssl_with_java_style_options(spark, secured, certs,  # noqa: F811
                                                                         tmp_path) -> None:
    """A batch read, a batch write (at least once) and an exactly-once streaming write, all over
    SASL_SSL; writes checked over PLAINTEXT. A wrong password fails the query, naming the refusal."""
    options = java_security(secured, certs)
    for topic in ("sec-in", "sec-out", "sec-eo"):
        create_topic(secured, topic, 2)
    produce(secured, "sec-in", [{"key": b"k%d" % i, "value": b"v%d" % i} for i in range(100)])
    expected = sorted(b"v%d" % i for i in range(100))
    rows = spark.read.format("logbus").options(**options, subscribe="sec-in").load().collect()
    assert sorted(bytes(row.value) for row in rows) == expected

    written = spark.createDataFrame([(b"w%d" % i,) for i in range(50)], "value binary")
    written.write.format("logbus").mode("append").options(**options, topic="sec-out").save()
    stream = spark.readStream.format("logbus").options(**options, subscribe="sec-in", startingOffsets="earliest").load()
    query = (stream.select("key", "value").writeStream.format("logbus").options(**options, topic="sec-eo")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(bytes(r.value) for r in reader(spark, secured, subscribe="sec-out").load().collect()) == sorted(
        b"w%d" % i for i in range(50))
    committed = reader(spark, secured, subscribe="sec-eo", **{"isolation.level": "read_committed"}).load().collect()
    assert sorted(bytes(row.value) for row in committed) == expected

    wrong = java_security(secured, certs, password="wrong")
    with pytest.raises(Exception, match="Authentication failed"):
        spark.read.format("logbus").options(**wrong, subscribe="sec-in").load().collect()


@pytest.mark.parametrize("sink", ["at-least-once", "exactly-once"])
def test_sinks_give_up_at_once_on_a_wrong_password(secured, certs, sink: str) -> None:  # noqa: F811
    """librdkafka retries a refused login until its records time out (5 minutes), the transactional
    client retries lost connections for a minute: both sinks fail on the first refusal instead."""
    options = {**java_security(secured, certs, password="wrong"), "topic": "sec-in"}
    began = time.monotonic()
    if sink == "at-least-once":
        target = parse_target(options, StructType([StructField("value", BinaryType())]))
        with pytest.raises(WriteError, match="Authentication failed"):
            produce_batches(target, iter([pa.RecordBatch.from_pydict({"value": [b"x"]})]))
    else:
        client = TxnClient.from_settings(client_config(options))
        try:
            with pytest.raises(AuthenticationError, match="Authentication failed"):
                client.init_producer_id("sec-0", 60_000)
        finally:
            client.close()
    assert time.monotonic() - began < 15
