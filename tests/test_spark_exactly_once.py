"""Exactly-once streaming writes (logbus.spark.exactly_once) and read_committed reads, against a
real broker, the connector's own transactional client and real local Spark.

The Spark tests use the session of conftest.py's `spark` fixture, `local[2,2]`: two cores, and a
failed task is tried again once (the task-retry test needs that). The kill test runs its query as a separate process
(tests/spark_eo_job.py) so that the driver can be SIGKILLed, then a last time in the session.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, produce_all, wait_until
from kio.schema.errors import ErrorCode
from test_cluster import FAILOVER_S, create, partition_state, wait_new_leader
from test_cluster_transactions import coordinator_of

from logbus.client.client import LATEST, Client
from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.protocol.records import (
    EndTxnMarker,
    build_batch,
    build_end_txn_marker,
    iter_headers,
    iter_records,
    read_end_txn_marker,
)
from logbus.spark.decode import decode
from logbus.testing import BrokerProcess, Cluster, running_broker, running_cluster

pyspark = pytest.importorskip("pyspark")
import spark_eo_job  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from test_spark import murmur2, murmur2_partition  # noqa: E402

from logbus.spark import exactly_once  # noqa: E402
from logbus.spark.partitioner import murmur2 as murmur2_column  # noqa: E402
from logbus.spark.sink import Target  # noqa: E402
from logbus.spark.txn_client import TransactionalProducer, TxnClient, TxnError  # noqa: E402

pytestmark = pytest.mark.spark
JOB = Path(spark_eo_job.__file__)
RUN_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config={"num.partitions": "1", "transaction.state.log.num.partitions": "5"}) as process:
        yield process


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(10)


@dataclass
class LogOutcome:
    """A topic's records as their transactions' markers decide, read from the raw log: the
    oracle that does not depend on the broker's read_committed."""

    committed: list[bytes] = field(default_factory=list)
    aborted: list[bytes] = field(default_factory=list)
    still_open: list[bytes] = field(default_factory=list)


def log_outcome(bootstrap: str, topic: str) -> LogOutcome:
    outcome = LogOutcome()
    client = Client(bootstrap)
    try:
        for partition in client.partitions([topic])[topic]:
            pending: dict[int, list[bytes]] = {}
            for records, header in _batches(client, topic, partition):
                values = [r.value for r in iter_records(records, header)]
                if header.is_control:
                    marker = read_end_txn_marker(records, header)
                    assert marker is not None
                    ended = pending.pop(header.producer_id, [])
                    (outcome.committed if marker.commit else outcome.aborted).extend(ended)
                elif header.is_transactional:
                    pending.setdefault(header.producer_id, []).extend(values)
                else:
                    outcome.committed.extend(values)
            outcome.still_open += [value for values in pending.values() for value in values]
    finally:
        client.close()
    return outcome


def _batches(client: Client, topic: str, partition: int) -> Iterator[tuple[bytes, object]]:
    offset, end = 0, None
    while end is None or offset < end:
        answer = client.fetch(topic, partition, offset, 1 << 20)
        assert answer.error == ErrorCode.none, answer.error
        end = answer.high_watermark
        for header in iter_headers(answer.records):
            yield answer.records, header
            offset = header.next_offset


def read_values(spark: SparkSession, broker: BrokerProcess, topic: str, isolation: str) -> list[bytes]:
    rows = (spark.read.format("logbus").option("logbus.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic).option("isolation.level", isolation).load().select("value").collect())
    return sorted(bytes(row.value) for row in rows)


# ---------------------------------------------------------------- no broker


def test_murmur2_of_a_column_is_javas() -> None:
    rng = random.Random(5)
    keys = [b"21", b"foobar", b"a-little-bit-long-string", b"", b"abc"] + [
        bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(3000)]
    assert murmur2_column(pa.array(keys)).tolist() == [murmur2(key) for key in keys]
    assert murmur2_column(pa.array(["héllo", "x"])).tolist() == [murmur2("héllo".encode()), murmur2(b"x")]
    sliced = pa.array(keys).slice(7, 50)
    assert murmur2_column(sliced).tolist() == [murmur2(key) for key in keys[7:57]]


def test_split_cuts_runs_of_rows_by_size() -> None:
    rows = np.arange(10, 20)
    sizes = np.array([400, 400, 400, 1500, 100, 100, 100, 100, 100, 999])
    parts = [part.tolist() for part in exactly_once._split(rows, sizes, 1000)]
    assert parts == [[10, 11], [12], [13], [14, 15, 16, 17, 18], [19]]
    assert exactly_once._split(rows[:0], sizes[:0], 1000) == []


def test_decode_skips_aborted_transactions_and_markers() -> None:
    """Kafka's read_committed rule over one fetched record set: producer 7's first transaction
    (offsets 2-3) is aborted, its second (6) and producer 8's (4) commit."""
    def data(base: int, producer_id: int, values: list[bytes]) -> bytes:
        return build_batch([(None, v) for v in values], 1000, base_offset=base, producer_id=producer_id,
                           producer_epoch=0, base_sequence=base, attributes=0x10)

    def marker(base: int, producer_id: int, commit: bool) -> bytes:
        batch = bytearray(build_end_txn_marker(producer_id, 0, EndTxnMarker(commit, 0), 1000))
        batch[:8] = base.to_bytes(8, "big")
        return bytes(batch)

    records = b"".join([
        build_batch([(None, b"plain0"), (None, b"plain1")], 1000),
        data(2, 7, [b"aborted2", b"aborted3"]), data(4, 8, [b"other4"]), marker(5, 7, False),
        data(6, 7, [b"again6"]), marker(7, 8, True), marker(8, 7, True),
    ])
    batch, next_offset = decode(records, "t", 0, 0, 9, False, aborted=[(7, 2)])
    assert batch is not None and next_offset == 9
    assert batch.column("value").to_pylist() == [b"plain0", b"plain1", b"other4", b"again6"]
    assert batch.column("offset").to_pylist() == [0, 1, 4, 6]
    unfiltered, _ = decode(records, "t", 0, 0, 9, False)
    assert unfiltered is not None and unfiltered.num_rows == 6


# ---------------------------------------------------------------- the transactional client


def test_transactional_producer_numbers_batches_and_another_client_commits(broker) -> None:
    """Sequences run from 0 per partition across batches; the transaction's batches carry the
    producer id, epoch and transactional bit; a second connection ends the transaction."""
    create_topic(broker, "txn-seq", 2)
    writer, driver = TxnClient(broker.bootstrap), TxnClient(broker.bootstrap)
    try:
        producer = writer.init_producer_id("seq-0", 60_000)
        sender = TransactionalProducer(writer, producer)
        sender.send({("txn-seq", 0): [([(b"k1", b"a"), (b"k2", b"b")], None), ([(None, b"c")], [[("h", b"1")]])],
                     ("txn-seq", 1): [([(None, b"d")], None)]})
        sender.send({("txn-seq", 0): [([(None, b"e"), (None, b"f"), (None, b"g")], None)]})
        assert sender.partitions == (("txn-seq", 0), ("txn-seq", 1))
        driver.end_txn(producer, commit=True)
        driver.end_txn(producer, commit=True)  # a retried decision succeeds
    finally:
        writer.close()
        driver.close()
    client = Client(broker.bootstrap)
    try:
        headers = [header for _, header in _batches(client, "txn-seq", 0)]
    finally:
        client.close()
    data = [h for h in headers if not h.is_control]
    assert [h.base_sequence for h in data] == [0, 2, 3]
    assert {(h.producer_id, h.producer_epoch, h.is_transactional) for h in data} == {
        (producer.producer_id, producer.epoch, True)}
    assert log_outcome(broker.bootstrap, "txn-seq").committed == [b"a", b"b", b"c", b"e", b"f", b"g", b"d"]


def test_a_new_attempt_aborts_and_fences_the_previous_one(broker) -> None:
    create_topic(broker, "txn-fence", 1)
    first, second = TxnClient(broker.bootstrap, retry_for_s=20), TxnClient(broker.bootstrap, retry_for_s=20)
    try:
        old = first.init_producer_id("fence-0", 60_000)
        TransactionalProducer(first, old).send({("txn-fence", 0): [([(None, b"old")], None)]})
        new = second.init_producer_id("fence-0", 60_000)
        assert (new.producer_id, new.epoch) > (old.producer_id, old.epoch)
        with pytest.raises(TxnError) as refused:
            TransactionalProducer(first, old).send({("txn-fence", 0): [([(None, b"late")], None)]})
        assert refused.value.code in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced)
        with pytest.raises(TxnError):
            second.end_txn(old, commit=True)
        TransactionalProducer(second, new).send({("txn-fence", 0): [([(None, b"new")], None)]})
        second.end_txn(new, commit=True)
    finally:
        first.close()
        second.close()
    outcome = log_outcome(broker.bootstrap, "txn-fence")
    assert (outcome.committed, outcome.aborted, outcome.still_open) == ([b"new"], [b"old"], [])


def test_transactional_producer_follows_a_new_leader_and_coordinator(zookeeper: ZooKeeperServer) -> None:
    """The broker that leads the partition and coordinates the transaction is killed between
    two sends: the producer finds the new leader through Metadata and the new coordinator
    through FindCoordinator, and the transaction commits every record once."""
    with running_cluster(3, zookeeper=zookeeper) as cluster:
        create(cluster, "moving")
        leader = partition_state(cluster, "moving")[0]
        transactional_id = next(f"moving-{n}" for n in range(1000) if _coordinator(cluster, f"moving-{n}") == leader)
        client = TxnClient(cluster.bootstrap, retry_for_s=2 * FAILOVER_S)
        try:
            producer = client.init_producer_id(transactional_id, 60_000)
            sender = TransactionalProducer(client, producer)
            sender.send({("moving", 0): [([(None, b"before")], None)]})
            cluster.brokers[leader].kill()
            wait_new_leader(cluster, "moving", leader)
            sender.send({("moving", 0): [([(None, b"after")], None)]})
            client.end_txn(producer, commit=True)
        finally:
            client.close()
        wait_until(lambda: log_outcome(cluster.bootstrap, "moving").committed == [b"before", b"after"],
                   timeout=FAILOVER_S, message="both records committed once")


def _coordinator(cluster: Cluster, transactional_id: str) -> int:
    """The id's coordinator (broker ids start at 1; -1, not yet known, waits)."""
    return wait_until(lambda: max(coordinator_of(cluster, transactional_id), 0), timeout=FAILOVER_S,
                      message=f"the coordinator of {transactional_id}")


def test_driver_commits_and_a_later_abort_leaves_the_commit(broker) -> None:
    """Spark may call abort() after a commit() that went through: the abort is a no-op. A
    replay whose row count differs from the committed attempt's is refused."""
    create_topic(broker, "txn-end", 1)
    client = TxnClient(broker.bootstrap)
    try:
        producer = client.init_producer_id("end-0", 60_000)
        TransactionalProducer(client, producer).send({("txn-end", 0): [([(None, b"kept")], None)]})
    finally:
        client.close()
    prepared = [exactly_once.Prepared(producer, (("txn-end", 0),), 1), exactly_once.Prepared(None, (), 0), None]
    exactly_once.end_transactions({"bootstrap.servers": broker.bootstrap}, prepared, commit=True)
    exactly_once.end_transactions({"bootstrap.servers": broker.bootstrap}, prepared, commit=False)
    assert log_outcome(broker.bootstrap, "txn-end").committed == [b"kept"]
    task = exactly_once.TaskIdentity("end-0", 0, 3)
    exactly_once._check_replay(task, '{"rows": 1}', 1)
    with pytest.raises(exactly_once.ReplayMismatchError, match="not deterministic"):
        exactly_once._check_replay(task, '{"rows": 1}', 2)


def test_router_places_rows_as_the_java_producer_does(broker) -> None:
    create_topic(broker, "routed", 4)
    client = TxnClient(broker.bootstrap)
    values = [b"v%d" % i + (b"x" * 600_000 if i < 8 else b"") for i in range(30)]  # 8 large: several batches
    batch = pa.RecordBatch.from_pydict({
        "key": [b"k%d" % i if i % 3 else None for i in range(30)],
        "value": values,
        "partition": [2 if i == 5 else None for i in range(30)],
    })
    try:
        chunks = exactly_once.Router(client, Target({}, "routed", True, True, False)).chunks(batch)
    finally:
        client.close()
    placed = {value: (partition, n) for (_, partition), parts in chunks.items()
              for n, (records, _) in enumerate(parts) for _, value in records}
    for i, value in enumerate(values):
        if i == 5:
            assert placed[value][0] == 2
        elif i % 3:
            assert placed[value][0] == murmur2_partition(b"k%d" % i, 4), i
    assert len({placed[values[i]][0] for i in range(0, 30, 3)}) == 1, "unkeyed rows share one partition"
    assert max(n for _, n in placed.values()) >= 1, "the large rows took more than one batch"
    for parts in chunks.values():
        assert all(sum(len(v) for _, v in records) <= exactly_once.MAX_BATCH_BYTES for records, _ in parts)


def test_router_routes_by_the_topic_column(broker) -> None:
    create_topic(broker, "routed-a", 2)
    create_topic(broker, "routed-b", 5)
    keys = [b"key-%d" % i for i in range(40)]
    topics = ["routed-a" if i % 3 else "routed-b" for i in range(40)]
    client = TxnClient(broker.bootstrap)
    try:
        router = exactly_once.Router(client, Target({}, None, True, False, False))
        chunks = router.chunks(pa.RecordBatch.from_pydict({"key": keys, "value": keys, "topic": topics}))
        with pytest.raises(exactly_once.WriteError, match="null topic"):
            null_topic = pa.array([None], pa.string())
            router.chunks(pa.RecordBatch.from_pydict({"value": [b"v"], "key": [b"k"], "topic": null_topic}))
    finally:
        client.close()
    placed = {key: tp for tp, parts in chunks.items() for records, _ in parts for key, _ in records}
    assert placed == {key: (topic, murmur2_partition(key, 2 if topic == "routed-a" else 5))
                      for key, topic in zip(keys, topics, strict=True)}


# ---------------------------------------------------------------- Spark


def _run_job(broker: BrokerProcess, checkpoint: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(JOB), broker.bootstrap, "eo-in", "eo-out", str(checkpoint), *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


def _batch_ids(checkpoint: Path, log: str) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / log).glob("[0-9]*") if p.name.isdigit())


def _killed_mid_batch(broker: BrokerProcess, checkpoint: Path, new_commits: int) -> None:
    """Run the job until it committed `new_commits` more micro-batches and the tasks of the next
    one have written into the output (its transactions open, or being committed), then SIGKILL
    its whole process group."""
    before = len(_batch_ids(checkpoint, "commits"))
    job = _run_job(broker, checkpoint)
    client = Client(broker.bootstrap)
    output_end_at_start: dict[int, int] = {}  # micro-batch in flight -> output end offset when first seen

    def writing() -> bool:
        assert job.poll() is None, "the job ended before it could be killed"
        commits, offsets = _batch_ids(checkpoint, "commits"), _batch_ids(checkpoint, "offsets")
        if len(commits) < before + new_commits or offsets[-1] == commits[-1]:
            return False
        output_end = sum(client.list_offsets({("eo-out", p): LATEST for p in range(3)}).values())
        return output_end > output_end_at_start.setdefault(offsets[-1], output_end)

    try:
        wait_until(writing, timeout=RUN_TIMEOUT_S, interval=0.01, message="a micro-batch being written")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        client.close()


def _killed_half_committed(broker: BrokerProcess, checkpoint: Path, marker: Path) -> None:
    job = _run_job(broker, checkpoint, "--crash-in-commit", str(marker))
    try:
        wait_until(lambda: marker.exists() or job.poll() is not None, timeout=RUN_TIMEOUT_S,
                   message="a half-committed micro-batch")
        assert marker.exists(), f"the job ended with {job.returncode} before committing half a micro-batch"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)


def test_killed_driver_restarts_without_duplicates_or_loss(spark, broker, tmp_path) -> None:
    """SIGKILL three times (twice with a micro-batch in flight, once with one task's transaction
    of a micro-batch committed and the others not), then a run to the end (in the tests' own
    Spark session): every input record is in the output exactly once, and no transaction is
    left open. Of the 12 micro-batches, the killed runs take about 5."""
    create_topic(broker, "eo-in", 4)
    create_topic(broker, "eo-out", 3)
    values = [b"r%d" % i for i in range(12 * spark_eo_job.MAX_OFFSETS_PER_TRIGGER)]
    produce_all(broker.bootstrap, "eo-in", [(b"k%d" % (i % 500), value) for i, value in enumerate(values)],
                **{"linger.ms": 5})
    checkpoint = tmp_path / "cp"
    _killed_mid_batch(broker, checkpoint, new_commits=2)
    _killed_half_committed(broker, checkpoint, tmp_path / "half-committed")
    _killed_mid_batch(broker, checkpoint, new_commits=2)
    query = spark_eo_job.start_query(spark, broker.bootstrap, "eo-in", "eo-out", str(checkpoint))
    query.awaitTermination(RUN_TIMEOUT_S)
    assert query.exception() is None

    outcome = log_outcome(broker.bootstrap, "eo-out")
    assert outcome.still_open == []
    assert len(outcome.committed) == len(values)
    assert sorted(outcome.committed) == sorted(values)
    assert outcome.aborted, "the half-committed micro-batch's other transactions were aborted on restart"
    assert read_values(spark, broker, "eo-out", "read_committed") == sorted(values)


def test_a_task_that_fails_after_writing_is_retried_without_duplicates(spark, broker, tmp_path) -> None:
    """The first attempt of one task fails once the sink has written some of its rows; the second
    attempt fences it (its transaction is aborted) and writes the rows once."""
    from pyspark.sql.functions import udf

    create_topic(broker, "retry-in", 2)
    create_topic(broker, "retry-out", 2)
    values = [b"r%d:" % i + b"x" * 1000 for i in range(2000)]  # large enough for Spark to flush each Arrow batch
    produce_all(broker.bootstrap, "retry-in", [(value[:8], value) for value in values])
    bootstrap = broker.bootstrap
    last_of_first_task = _last_value(broker, "retry-in", 0)

    def fail_first_attempt(value: bytes) -> bytes:
        from pyspark import TaskContext

        from logbus.client.client import LATEST, Client

        context = TaskContext.get()
        if context.attemptNumber() == 0 and context.partitionId() == 0 and value == last_of_first_task:
            client = Client(bootstrap)
            ends = lambda: client.list_offsets({("retry-out", 0): LATEST, ("retry-out", 1): LATEST})  # noqa: E731
            deadline = time.monotonic() + 60
            while sum(ends().values()) == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            raise RuntimeError("the first attempt fails after the sink wrote")
        return value

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        stream = (spark.readStream.format("logbus").option("logbus.bootstrap.servers", bootstrap)
                  .option("subscribe", "retry-in").option("startingOffsets", "earliest").load())
        query = (stream.select(udf(fail_first_attempt, "binary", useArrow=False)("value").alias("value"))
                 .writeStream.format("logbus").option("logbus.bootstrap.servers", bootstrap)
                 .option("topic", "retry-out").option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(RUN_TIMEOUT_S)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert query.exception() is None
    outcome = log_outcome(bootstrap, "retry-out")
    assert outcome.aborted, "the failed attempt had written rows"
    assert outcome.still_open == []
    assert sorted(outcome.committed) == sorted(values)


def _last_value(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    client = Client(broker.bootstrap)
    try:
        records = [r.value for payload, header in _batches(client, topic, partition)
                   for r in iter_records(payload, header)]
    finally:
        client.close()
    return records[-1]


def test_read_committed_reads_committed_transactions_only(spark, broker) -> None:
    """Aborted transactions are skipped, and nothing at or past an open transaction's first
    record is read (the last stable offset) until it ends."""
    create_topic(broker, "rc", 1)
    client = TxnClient(broker.bootstrap)

    def transaction(transactional_id: str, values: list[bytes]):
        # a timeout far beyond the test: the broker must not abort rc-3 while Spark reads (slow when loaded)
        producer = client.init_producer_id(transactional_id, 600_000)
        TransactionalProducer(client, producer).send({("rc", 0): [([(None, v) for v in values], None)]})
        return producer

    try:
        produce_all(broker.bootstrap, "rc", [(None, b"plain-a")])
        client.end_txn(transaction("rc-1", [b"committed-b", b"committed-c"]), commit=True)
        client.end_txn(transaction("rc-2", [b"aborted-x"]), commit=False)
        still_open = transaction("rc-3", [b"open-d"])
        produce_all(broker.bootstrap, "rc", [(None, b"plain-e")])
        assert read_values(spark, broker, "rc", "read_committed") == [b"committed-b", b"committed-c", b"plain-a"]
        assert len(read_values(spark, broker, "rc", "read_uncommitted")) == 6
        client.end_txn(still_open, commit=True)
        assert read_values(spark, broker, "rc", "read_committed") == [
            b"committed-b", b"committed-c", b"open-d", b"plain-a", b"plain-e"]
    finally:
        client.close()
