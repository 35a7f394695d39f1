"""Transactions with real clients against a real broker: confluent-kafka (librdkafka),
kafka-python, aiokafka and kcat producers; commit, abort, fencing, timeouts, restarts, and the
coordinator's admin APIs (DescribeTransactions, ListTransactions)."""

from __future__ import annotations

import asyncio
import datetime
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import aiokafka
import helpers
import kafka
import kafka.errors
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from helpers import QUIET, raw_request, transactional_producer, wait_until
from kafka.admin._transactions import TransactionDescription, TransactionState

from logbus.testing import BrokerProcess, running_broker

INIT_PRODUCER_ID, LIST_TRANSACTIONS = 22, 66
INVALID_TRANSACTION_TIMEOUT = 50
FAST = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "transaction.max.timeout.ms": "120000",
    "transaction.state.log.num.partitions": "7",
    "transaction.state.log.segment.bytes": "10485760",
}


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(FAST) as started:
        yield started


def new_topics(bootstrap: str, count: int = 1, partitions: int = 3) -> list[str]:
    names = [f"txn-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})  # kept alive until the futures are done
    for future in admin.create_topics([NewTopic(name, partitions, 1) for name in names]).values():
        future.result(15)
    return names


def read_values(bootstrap: str, topics: list[str], isolation: str, until: set[bytes],
                partitions: int = 3) -> list[bytes]:
    """Every value of `topics` from the start, read with `isolation` until each value of `until`
    has been read (sentinels written last), so what came before them is all there is to see."""
    return helpers.read_values(bootstrap, spread(topics, partitions), lambda values, _: until <= set(values),
                               isolation)


def commit_sentinels(bootstrap: str, topics: list[str], partitions: int = 3) -> set[bytes]:
    return helpers.commit_sentinels(bootstrap, spread(topics, partitions))


def spread(topics: list[str], partitions: int) -> list[tuple[str, int]]:
    return [(topic, index) for topic in topics for index in range(partitions)]


def test_confluent_kafka_commits_and_aborts_across_partitions_and_topics(broker: BrokerProcess) -> None:
    topics = new_topics(broker.bootstrap, 2)
    producer = transactional_producer(broker.bootstrap, "ck-commit-abort")
    producer.begin_transaction()
    for i in range(60):
        producer.produce(topics[i % 2], value=b"committed-%d" % i, partition=i % 3)
    producer.commit_transaction(20)
    producer.begin_transaction()
    for i in range(60):
        producer.produce(topics[i % 2], value=b"aborted-%d" % i, partition=i % 3)
    producer.flush(20)
    producer.abort_transaction(20)
    sentinels = commit_sentinels(broker.bootstrap, topics)

    committed = read_values(broker.bootstrap, topics, "read_committed", sentinels)
    assert sorted(v for v in committed if v not in sentinels) == sorted(b"committed-%d" % i for i in range(60))
    everything = read_values(broker.bootstrap, topics, "read_uncommitted", sentinels)
    assert {v for v in everything if v.startswith(b"aborted-")} == {b"aborted-%d" % i for i in range(60)}


def test_kafka_python_transactions_commit_and_abort(broker: BrokerProcess) -> None:
    [topic] = new_topics(broker.bootstrap)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-commit-abort")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(30):
            producer.send(topic, value=b"kp-committed-%d" % i, partition=i % 3)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(30):
            producer.send(topic, value=b"kp-aborted-%d" % i, partition=i % 3)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()
    sentinels = commit_sentinels(broker.bootstrap, [topic])
    committed = read_values(broker.bootstrap, [topic], "read_committed", sentinels)
    assert sorted(v for v in committed if v not in sentinels) == sorted(b"kp-committed-%d" % i for i in range(30))


def test_aiokafka_transactions_commit_and_abort(broker: BrokerProcess) -> None:
    [topic] = new_topics(broker.bootstrap)

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio-commit-abort")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(30):
                    await producer.send(topic, value=b"aio-committed-%d" % i, partition=i % 3)
            await producer.begin_transaction()
            for i in range(30):
                await producer.send(topic, value=b"aio-aborted-%d" % i, partition=i % 3)
            await producer.flush()
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    sentinels = commit_sentinels(broker.bootstrap, [topic])
    committed = read_values(broker.bootstrap, [topic], "read_committed", sentinels)
    assert sorted(v for v in committed if v not in sentinels) == sorted(b"aio-committed-%d" % i for i in range(30))


def test_a_second_producer_with_the_same_id_fences_the_first(broker: BrokerProcess) -> None:
    [topic] = new_topics(broker.bootstrap)
    first = transactional_producer(broker.bootstrap, "fenced-id")
    first.begin_transaction()
    first.produce(topic, value=b"from-the-zombie", partition=0)
    first.flush(10)
    second = transactional_producer(broker.bootstrap, "fenced-id")  # aborts the first's transaction
    second.begin_transaction()
    second.produce(topic, value=b"from-the-successor", partition=0)
    second.commit_transaction(20)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(20)
    assert raised.value.args[0].fatal()
    sentinels = commit_sentinels(broker.bootstrap, [topic])
    committed = read_values(broker.bootstrap, [topic], "read_committed", sentinels)
    assert b"from-the-successor" in committed and b"from-the-zombie" not in committed


def test_an_abandoned_transaction_is_aborted_at_its_timeout(broker: BrokerProcess) -> None:
    [topic] = new_topics(broker.bootstrap, partitions=1)
    abandoned = transactional_producer(broker.bootstrap, "abandoned", **{"transaction.timeout.ms": 1000})
    abandoned.begin_transaction()
    abandoned.produce(topic, value=b"never-committed", partition=0)
    abandoned.flush(10)
    wait_until(lambda: describe(broker, "abandoned").state == TransactionState.COMPLETE_ABORT, timeout=15,
               message="the coordinator aborting the timed-out transaction")
    sentinels = commit_sentinels(broker.bootstrap, [topic], partitions=1)
    committed = read_values(broker.bootstrap, [topic], "read_committed", sentinels, partitions=1)
    assert b"never-committed" not in committed


def test_a_timeout_over_transaction_max_timeout_ms_is_refused(broker: BrokerProcess) -> None:
    response = raw_request(broker.bootstrap, INIT_PRODUCER_ID, 4, transactional_id="too-long",
                           transaction_timeout=datetime.timedelta(milliseconds=120001), producer_id=-1,
                           producer_epoch=-1)
    assert response.error_code == INVALID_TRANSACTION_TIMEOUT


def test_the_state_topic_is_created_from_its_keys(broker: BrokerProcess) -> None:
    """Partitions and segment size as configured; replication factor 3 and min.isr 2 (the
    defaults) capped by the one live broker, so a single broker runs transactions."""
    transactional_producer(broker.bootstrap, "creates-the-topic")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    topic = admin.list_topics(timeout=10).topics["__transaction_state"]
    assert len(topic.partitions) == 7
    assert {len(p.replicas) for p in topic.partitions.values()} == {1}
    resource = ConfigResource("topic", "__transaction_state")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["segment.bytes"].value == "10485760"
    assert configs["min.insync.replicas"].value == "1"
    assert configs["cleanup.policy"].value == "compact"


def test_describe_and_list_transactions(broker: BrokerProcess) -> None:
    [topic] = new_topics(broker.bootstrap)
    producer = transactional_producer(broker.bootstrap, "described")
    producer.begin_transaction()
    producer.produce(topic, value=b"x", partition=1)
    producer.flush(10)
    state = describe(broker, "described")
    assert state.state == TransactionState.ONGOING
    assert {(tp.topic, tp.partition) for tp in state.topic_partitions} == {(topic, 1)}
    assert state.producer_id >= 0 and state.transaction_timeout_ms == 60000
    assert time.time() * 1000 - 60000 < state.transaction_start_time_ms <= time.time() * 1000
    listed = raw_request(broker.bootstrap, LIST_TRANSACTIONS, 1, state_filters=("Ongoing", "Bogus"),
                         producer_id_filters=(), duration_filter=-1)
    assert listed.unknown_state_filters == ("Bogus",)
    assert "described" in {t.transactional_id for t in listed.transaction_states}
    producer.commit_transaction(20)
    wait_until(lambda: describe(broker, "described").state == TransactionState.COMPLETE_COMMIT,
               message="the markers written and the commit completed")
    with pytest.raises(kafka.errors.TransactionalIdNotFoundError):
        describe(broker, "no-such-id")


def test_the_coordinator_survives_a_crash_and_aborts_what_was_open(tmp_path) -> None:
    with running_broker(FAST, data_dir=str(tmp_path / "data")) as broker:
        [topic] = new_topics(broker.bootstrap, partitions=1)
        before = transactional_producer(broker.bootstrap, "survivor")
        before.begin_transaction()
        before.produce(topic, value=b"committed-before", partition=0)
        before.commit_transaction(20)
        before.begin_transaction()
        before.produce(topic, value=b"open-at-the-crash", partition=0)
        before.flush(10)
        epoch_before = describe(broker, "survivor").producer_epoch
        broker.kill()
        broker.restart()
        after = transactional_producer(broker.bootstrap, "survivor")  # fences and aborts the open one
        state = describe(broker, "survivor")
        assert state.producer_epoch > epoch_before
        after.begin_transaction()
        after.produce(topic, value=b"committed-after", partition=0)
        after.commit_transaction(20)
        values = read_values(broker.bootstrap, [topic], "read_committed", {b"committed-after"}, partitions=1)
        assert values == [b"committed-before", b"committed-after"]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (./dev test installs it)")
def test_kcat_produces_in_a_transaction_and_consumes_read_committed(broker: BrokerProcess) -> None:
    [topic] = new_topics(broker.bootstrap, partitions=1)
    lines = "".join(f"kcat-{i}\n" for i in range(20))
    subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-X", "transactional.id=kcat-txn"],
                   input=lines.encode(), check=True, timeout=60)
    wait_until(lambda: describe(broker, "kcat-txn").state == TransactionState.COMPLETE_COMMIT,
               message="kcat's transaction committed")
    result = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-e", "-o", "beginning",
                             "-X", "isolation.level=read_committed"], capture_output=True, timeout=60, check=True)
    assert result.stdout.decode().split() == [f"kcat-{i}" for i in range(20)]


def describe(broker: BrokerProcess, transactional_id: str) -> TransactionDescription:
    """DescribeTransactions through kafka-python's admin client (it finds the coordinator)."""
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        return admin.describe_transactions([transactional_id])[transactional_id]
    finally:
        admin.close()


READ_PROCESS_WRITE = r"""
import sys
from confluent_kafka import Consumer, Producer
bootstrap, source, sink, step = sys.argv[1:5]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rpw", "isolation.level": "read_committed",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                     "log_level": 0})
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "rpw-app", "log_level": 0})
producer.init_transactions(30)
consumer.subscribe([source])
idle = 0
while idle < 6:
    batch = [m for m in consumer.consume(10, 0.5) if m.error() is None]
    if not batch:
        idle += 1 if consumer.assignment() else 0  # (a killed predecessor's session first expires)
        continue
    idle = 0
    producer.begin_transaction()
    for message in batch:
        producer.produce(sink, value=message.value().upper(), partition=message.partition())
    producer.flush(30)
    if step == "stepwise":
        print("open", flush=True)  # a transaction is open: the test may kill this process now
        sys.stdin.readline()
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
consumer.close()
"""


def test_read_process_write_killed_mid_transaction_outputs_each_record_once(broker: BrokerProcess) -> None:
    source, sink = new_topics(broker.bootstrap, 2)
    inputs = [b"record-%03d" % i for i in range(300)]
    producer = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
    for i, value in enumerate(inputs):
        producer.produce(source, value=value, partition=i % 3)
    assert producer.flush(20) == 0
    command = [sys.executable, "-c", READ_PROCESS_WRITE, broker.bootstrap, source, sink]
    stepwise = subprocess.Popen([*command, "stepwise"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(3):  # three transactions commit, the fourth is open when the process dies
            assert stepwise.stdout.readline() == "open\n"
            stepwise.stdin.write("commit\n")
            stepwise.stdin.flush()
        assert stepwise.stdout.readline() == "open\n"
    finally:
        stepwise.kill()
        stepwise.wait()
    subprocess.run([*command, "free"], check=True, timeout=120)
    sentinels = commit_sentinels(broker.bootstrap, [sink])
    outputs = read_values(broker.bootstrap, [sink], "read_committed", sentinels)
    assert sorted(v for v in outputs if v not in sentinels) == sorted(v.upper() for v in inputs)
