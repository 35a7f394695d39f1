"""Real clients against a real broker: confluent-kafka, kafka-python, aiokafka and kcat write and
read each other's records for every codec, with headers, null keys and null values; keyed records
land on Java's murmur2 partition; idempotent producers are deduplicated (also after a restart);
ListOffsets answers by timestamp."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator

import aiokafka
import kafka
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import (
    LIST_OFFSETS,
    QUIET,
    RawConnection,
    consume_partition,
    produce_all,
    raw_produce,
    raw_request,
)
from kafka.partitioner.default import murmur2
from kio.schema.list_offsets.v7 import request as list_offsets_v7

from logbus.protocol.records import build_batch
from logbus.testing import BrokerProcess, running_broker

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
HEADERS = [("trace", b"abc-123"), ("empty", b""), ("trace", b"repeated key")]
INIT_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER = 22, 45
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3

Record = tuple[bytes | None, bytes | None]  # key, value
Read = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]  # key, value, headers
_topic_numbers = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker() as started:
        yield started


def new_topic(prefix: str) -> str:
    return f"{prefix}-{next(_topic_numbers)}-{os.getpid()}"


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})  # alive until the future is done
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(15)


def sample_records(count: int = 40) -> list[Record]:
    """Text records (kcat reads and writes lines) with null keys and null values among them,
    values long and repetitive enough that every codec really compresses."""
    records: list[Record] = []
    for index in range(count):
        key = None if index % 5 == 1 else f"key-{index}".encode()
        value = None if index % 7 == 2 and key is not None else f"value-{index}-".encode() * (1 + index % 9)
        records.append((key, value))
    return records


# ------------------------------------------------------------------------ producers


def produce_confluent(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "compression.codec": codec, "linger.ms": 20, **QUIET})
    for key, value in records:
        producer.produce(topic, key=key, value=value, headers=HEADERS,
                         on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors


def produce_kafka_python(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                                   linger_ms=20)
    try:
        futures = [producer.send(topic, key=key, value=value, headers=HEADERS) for key, value in records]
        producer.flush(30)
        for future in futures:
            future.get(10)
    finally:
        producer.close(10)


def produce_aiokafka(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                                             compression_type=None if codec == "none" else codec)
        await producer.start()
        try:
            sent = [await producer.send(topic, key=key, value=value, headers=HEADERS) for key, value in records]
            await asyncio.wait_for(asyncio.gather(*sent), 30)
        finally:
            await producer.stop()

    asyncio.run(run())


def produce_kcat(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    """One line a record: `key<TAB>value`; a line without a tab has no key; -Z makes an empty value null."""
    lines = [(value or b"") if key is None else key + b"\t" + (value or b"") for key, value in records]
    assert all(key is not None or value is not None for key, value in records), "kcat cannot send a bare null"
    headers = [arg for name, value in HEADERS for arg in ("-H", f"{name}={value.decode()}")]
    subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-z", codec, "-K", "\t", "-Z", *headers],
        input=b"\n".join(lines) + b"\n", check=True, timeout=30, capture_output=True,
    )


# ------------------------------------------------------------------------ consumers


def read_confluent(bootstrap: str, topic: str, count: int) -> list[Read]:
    messages = consume_partition(bootstrap, topic, 0, count)
    return [(m.key(), m.value(), list(m.headers() or [])) for m in messages]


def read_kafka_python(bootstrap: str, topic: str, count: int) -> list[Read]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=15000)
    partition = kafka.TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    read: list[Read] = []
    try:
        for message in consumer:
            read.append((message.key, message.value, list(message.headers)))
            if len(read) == count:
                break
    finally:
        consumer.close()
    return read


def read_aiokafka(bootstrap: str, topic: str, count: int) -> list[Read]:
    async def run() -> list[Read]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        read: list[Read] = []
        try:
            partition = aiokafka.TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            while len(read) < count:
                message = await asyncio.wait_for(consumer.getone(), 15)
                read.append((message.key, message.value, list(message.headers)))
        finally:
            await consumer.stop()
        return read

    return asyncio.run(run())


def read_kcat(bootstrap: str, topic: str, count: int) -> list[Read]:
    """kcat with a -f format: key and value lengths (-1 for null) tell null from empty."""
    result = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
         "-f", "%K\t%k\t%S\t%s\t%h\n"],
        capture_output=True, timeout=30, check=True,
    )
    return [_kcat_line(line) for line in result.stdout.splitlines()]


def _kcat_line(line: bytes) -> Read:
    key_length, key, value_length, value, headers = line.split(b"\t")
    pairs = [header.split(b"=", 1) for header in headers.split(b",")] if headers else []
    return (None if key_length == b"-1" else key, None if value_length == b"-1" else value,
            [(name.decode(), header_value) for name, header_value in pairs])


PRODUCERS: dict[str, Callable[[str, str, list[Record], str], None]] = {
    "confluent": produce_confluent, "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka, "kcat": produce_kcat,
}
READERS: dict[str, Callable[[str, str, int], list[Read]]] = {
    "confluent": read_confluent, "kafka-python": read_kafka_python,
    "aiokafka": read_aiokafka, "kcat": read_kcat,
}


# ------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", PRODUCERS)
def test_every_client_reads_what_every_client_wrote(broker: BrokerProcess, producer: str, codec: str) -> None:
    topic = new_topic(f"compat-{producer}-{codec}")
    records = sample_records()
    PRODUCERS[producer](broker.bootstrap, topic, records, codec)
    expected = [(key, value, HEADERS) for key, value in records]
    for reader, read in READERS.items():
        assert read(broker.bootstrap, topic, len(records)) == expected, f"{reader} read back {producer}/{codec}"


def test_kcat_json_envelope_has_offsets_and_nulls(broker: BrokerProcess) -> None:
    topic = new_topic("kcat-json")
    produce_all(broker.bootstrap, topic, [(None, b"first"), (b"k", None)])
    result = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-J"],
                            capture_output=True, timeout=30, check=True, text=True)
    envelopes = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["offset"], e["key"], e["payload"]) for e in envelopes] == [(0, None, "first"), (1, "k", None)]


# ------------------------------------------------------------------------ partitioning and order


def java_partition(key: bytes, partitions: int) -> int:
    """Java's DefaultPartitioner for a keyed record, from an implementation other than the broker's."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def keyed_records(count: int = 120, keys: int = 17) -> list[Record]:
    return [(f"user-{index % keys}".encode(), f"{index:05d}".encode()) for index in range(count)]


def delivered_partitions_confluent(bootstrap: str, topic: str, records: list[Record]) -> dict[bytes, set[int]]:
    seen: dict[bytes, set[int]] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", **QUIET})

    def delivered(err: object, message: object) -> None:
        assert err is None, err
        seen.setdefault(message.key(), set()).add(message.partition())  # type: ignore[attr-defined]

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
    assert producer.flush(30) == 0
    return seen


def delivered_partitions_kafka_python(bootstrap: str, topic: str, records: list[Record]) -> dict[bytes, set[int]]:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
    try:
        futures = [(key, producer.send(topic, key=key, value=value)) for key, value in records]
        producer.flush(30)
        seen: dict[bytes, set[int]] = {}
        for key, future in futures:
            seen.setdefault(key, set()).add(future.get(10).partition)
        return seen
    finally:
        producer.close(10)


def delivered_partitions_aiokafka(bootstrap: str, topic: str, records: list[Record]) -> dict[bytes, set[int]]:
    async def run() -> dict[bytes, set[int]]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            sent = [(key, await producer.send(topic, key=key, value=value)) for key, value in records]
            seen: dict[bytes, set[int]] = {}
            for key, future in sent:
                seen.setdefault(key, set()).add((await asyncio.wait_for(future, 30)).partition)
            return seen
        finally:
            await producer.stop()

    return asyncio.run(run())


def delivered_partitions_kcat(bootstrap: str, topic: str, records: list[Record]) -> dict[bytes, set[int]]:
    """kcat picks partitions itself (no per-record report): where each key went is read back."""
    lines = b"".join(key + b"\t" + value + b"\n" for key, value in records)
    subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-K", "\t", "-X", "partitioner=murmur2_random"],
                   input=lines, check=True, timeout=30, capture_output=True)
    result = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                             "-c", str(len(records)), "-f", "%k\t%p\n"], capture_output=True, timeout=30, check=True)
    seen: dict[bytes, set[int]] = {}
    for line in result.stdout.splitlines():
        key, partition = line.split(b"\t")
        seen.setdefault(key, set()).add(int(partition))
    return seen


@pytest.mark.parametrize("produce", [
    delivered_partitions_confluent, delivered_partitions_kafka_python, delivered_partitions_aiokafka,
    delivered_partitions_kcat,
], ids=["confluent-murmur2_random", "kafka-python", "aiokafka", "kcat-murmur2_random"])
def test_keyed_records_land_on_the_murmur2_partition_in_order(broker: BrokerProcess, produce: Callable) -> None:
    partitions = 6
    topic = new_topic("keyed")
    create_topic(broker.bootstrap, topic, partitions)
    records = keyed_records()
    seen = produce(broker.bootstrap, topic, records)
    assert seen == {key: {java_partition(key, partitions)} for key, _ in records}
    for partition in range(partitions):
        expected = [(key, value) for key, value in records if java_partition(key, partitions) == partition]
        read = consume_partition(broker.bootstrap, topic, partition, len(expected)) if expected else []
        assert [(m.key(), m.value()) for m in read] == expected, f"partition {partition} in produce order"
        assert [m.offset() for m in read] == list(range(len(expected)))


# ------------------------------------------------------------------------ idempotence


def test_idempotent_producers_write_each_record_once(broker: BrokerProcess) -> None:
    topic = new_topic("idempotent")
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(200)]
    produce_all(broker.bootstrap, topic, records[:100], **{"enable.idempotence": True})
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)  # idempotent by default
    try:
        assert producer.config["enable_idempotence"]
        futures = [producer.send(topic, key=key, value=value, partition=0) for key, value in records[100:]]
        producer.flush(30)
        assert [future.get(10).offset for future in futures] == list(range(100, 200))
    finally:
        producer.close(10)
    assert [(m.key(), m.value()) for m in consume_partition(broker.bootstrap, topic, 0, 200)] == records
    assert end_offset(broker.bootstrap, topic) == 200


def init_producer_id(bootstrap: str) -> tuple[int, int]:
    response = raw_request(bootstrap, INIT_PRODUCER_ID, 4, transactional_id=None,
                           transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1)
    assert response.error_code == 0
    return int(response.producer_id), int(response.producer_epoch)


def idempotent_batch(producer: tuple[int, int], sequence: int, *values: bytes) -> bytes:
    producer_id, epoch = producer
    return build_batch([(None, value) for value in values], int(time.time() * 1000),
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat", **QUIET})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        consumer.close()


def test_duplicate_batches_are_acknowledged_once_and_gaps_refused() -> None:
    with running_broker() as broker:
        topic = new_topic("dedupe")
        create_topic(broker.bootstrap, topic, 1)
        producer = init_producer_id(broker.bootstrap)
        first, second = idempotent_batch(producer, 0, b"a", b"b"), idempotent_batch(producer, 2, b"c")
        with RawConnection(broker.bootstrap) as connection:
            assert raw_produce(connection, topic, first) == (0, 0)
            assert raw_produce(connection, topic, second) == (0, 2)
            assert raw_produce(connection, topic, first) == (0, 0), "a duplicate gets its original offset"
            assert raw_produce(connection, topic, second) == (0, 2)
            gap = idempotent_batch(producer, 5, b"skipped ahead")
            assert raw_produce(connection, topic, gap)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert end_offset(broker.bootstrap, topic) == 3, "each batch stored once"

        assert broker.stop() == 0
        broker.restart()
        with RawConnection(broker.bootstrap) as connection:
            assert raw_produce(connection, topic, second) == (0, 2), "producer state survives the restart"
            assert raw_produce(connection, topic, gap)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
            assert raw_produce(connection, topic, idempotent_batch(producer, 3, b"d")) == (0, 3)
        read = consume_partition(broker.bootstrap, topic, 0, 4)
        assert [m.value() for m in read] == [b"a", b"b", b"c", b"d"]
        assert end_offset(broker.bootstrap, topic) == 4


# ------------------------------------------------------------------------ offsets by timestamp


def list_offsets(bootstrap: str, topic: str, timestamp: int) -> tuple[int, int]:
    """Raw ListOffsets v7: (offset, timestamp) for one target."""
    schema = list_offsets_v7
    partition = schema.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=timestamp)
    response = raw_request(bootstrap, LIST_OFFSETS, 7, replica_id=-1, isolation_level=0,
                           topics=(schema.ListOffsetsTopic(name=topic, partitions=(partition,)),))
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0
    return int(answer.offset), int(answer.timestamp)


@pytest.fixture(scope="module")
def timestamped(broker: BrokerProcess) -> tuple[str, int]:
    """A topic whose records (in one batch and in several) carry timestamps out of order."""
    topic = new_topic("by-time")
    base = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, **QUIET})
    for offset, delta in enumerate([0, 300, 100, 200, 400, 350]):
        producer.produce(topic, value=f"{offset}".encode(), timestamp=base + delta)
        if offset == 3:
            assert producer.flush(30) == 0  # offsets 0-3 in a batch, 4-5 in another
    assert producer.flush(30) == 0
    return topic, base


@pytest.mark.parametrize(("target", "expected"), [
    (EARLIEST, 0), (LATEST, 6), (MAX_TIMESTAMP, 4), ("base", 0), ("base+50", 1), ("base+300", 1),
    ("base+301", 4), ("base+360", 4), ("base+401", -1),
])
def test_list_offsets_by_timestamp(broker: BrokerProcess, timestamped: tuple[str, int],
                                   target: int | str, expected: int) -> None:
    topic, base = timestamped
    timestamp = base + int(target.partition("+")[2] or 0) if isinstance(target, str) else target
    offset, found_at = list_offsets(broker.bootstrap, topic, timestamp)
    assert offset == expected
    if target == MAX_TIMESTAMP:
        assert found_at == base + 400
    elif isinstance(target, str) and expected >= 0:
        assert found_at == base + [0, 300, 100, 200, 400, 350][expected]


def test_clients_offsets_for_times(broker: BrokerProcess, timestamped: tuple[str, int]) -> None:
    topic, base = timestamped
    targets = {base + 50: 1, base + 301: 4, base + 401: None}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "compat", **QUIET})
    try:
        for timestamp, expected in targets.items():
            [answer] = consumer.offsets_for_times([TopicPartition(topic, 0, timestamp)], timeout=10)
            assert answer.error is None
            assert answer.offset == (-1 if expected is None else expected), timestamp
    finally:
        consumer.close()
    python_consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        partition = kafka.TopicPartition(topic, 0)
        for timestamp, expected in targets.items():
            answer = python_consumer.offsets_for_times({partition: timestamp})[partition]
            assert (answer and answer.offset) == expected, timestamp
    finally:
        python_consumer.close()


def test_log_append_time_topics_are_found_by_the_brokers_time(broker: BrokerProcess) -> None:
    """Records of a LogAppendTime topic all carry their batch's append time, whatever the client sent."""
    topic = new_topic("append-time")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    created = admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})])
    created[topic].result(15)
    long_ago = 1_500_000_000_000
    before = int(time.time() * 1000)
    with RawConnection(broker.bootstrap) as connection:
        assert raw_produce(connection, topic, build_batch([(None, b"a"), (None, b"b")], long_ago)) == (0, 0)
        assert raw_produce(connection, topic, build_batch([(None, b"c")], long_ago)) == (0, 2)
    read = consume_partition(broker.bootstrap, topic, 0, 3)
    appended = [message.timestamp()[1] for message in read]
    assert all(stamp >= before for stamp in appended), appended
    assert list_offsets(broker.bootstrap, topic, before) == (0, appended[0])
    assert list_offsets(broker.bootstrap, topic, appended[2]) == (2 if appended[2] > appended[0] else 0, appended[2])
    assert list_offsets(broker.bootstrap, topic, MAX_TIMESTAMP) == (
        2 if appended[2] > appended[0] else 0, appended[2])
