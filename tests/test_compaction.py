"""Log compaction against a real broker: what survives a cleaning, and what the clients read.

The broker runs its cleaner every 50 ms; topics (auto-created, compacted through the broker's
topic defaults) use tiny segments and a dirty ratio of 0.01 so every produce makes the log
cleanable. Records produced last sit in the active segment, which the cleaner never touches,
so each scenario ends with a few records under unique keys.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from helpers import QUIET, wait_until
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition

from logbus.testing import BrokerProcess, running_broker

BROKER_CONFIG = {
    "log.cleaner.backoff.ms": "50", "log.retention.check.interval.ms": "100", "log.cleanup.policy": "compact",
    "log.segment.bytes": "2048", "log.cleaner.min.cleanable.ratio": "0.01",
    "log.cleaner.delete.retention.ms": "5000",
}
KEYS = 20
ROUNDS = 8
DELETED = 5
TAIL = 10

Entry = tuple[int, bytes | None, bytes | None]  # offset, key, value


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config=BROKER_CONFIG) as process:
        yield process


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]],
            **config: object) -> list[Entry]:
    """Produce (one record per batch unless `config` says otherwise); returns (offset, key, value) of each."""
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1, **QUIET, **config})
    entries: list[Entry] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, message: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            entries.append((message.offset(), message.key(), message.value()))  # type: ignore[attr-defined]

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return sorted(entries)


def read_all(bootstrap: str, topic: str) -> list[Entry]:
    """Everything partition 0 holds, from the beginning to its end, read with confluent-kafka."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "compaction-tests", "enable.auto.commit": False,
        "enable.partition.eof": True, **QUIET,
    })
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    entries: list[Entry] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return entries
            entries.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    raise AssertionError("no end of partition within 20 s")


def read_with_kafka_python(bootstrap: str, topic: str, count: int) -> list[Entry]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000)
    partition = KafkaPythonPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    entries = []
    try:
        for message in consumer:
            entries.append((message.offset, message.key, message.value))
            if len(entries) == count:
                break
    finally:
        consumer.close()
    return entries


def read_with_aiokafka(bootstrap: str, topic: str, count: int) -> list[Entry]:
    async def run() -> list[Entry]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        entries: list[Entry] = []
        try:
            partition = __import__("aiokafka").TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            while len(entries) < count:
                message = await asyncio.wait_for(consumer.getone(), 10)
                entries.append((message.offset, message.key, message.value))
        finally:
            await consumer.stop()
        return entries

    return asyncio.run(run())


def updates_then_deletes() -> list[tuple[bytes | None, bytes | None]]:
    """ROUNDS values for each of KEYS keys, tombstones for the first DELETED, then TAIL unique keys."""
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"key-%d" % key, b"value-%d-%d" % (key, round_)) for round_ in range(ROUNDS) for key in range(KEYS)
    ]
    records += [(b"key-%d" % key, None) for key in range(DELETED)]
    # incompressible, so that even compressed the tail fills more than a segment and rolls the
    # tombstones out of the active segment into the cleanable part
    records += [(b"tail-%d" % i, os.urandom(300)) for i in range(TAIL)]
    return records


def latest_per_key(entries: list[Entry]) -> list[Entry]:
    latest: dict[bytes | None, Entry] = {}
    for entry in entries:
        latest[entry[1]] = entry
    return sorted(latest.values())


def live(entries: list[Entry]) -> list[Entry]:
    return [entry for entry in entries if entry[2] is not None]


def produce_and_await_compaction(bootstrap: str, topic: str, **config: object) -> tuple[list[Entry], list[Entry]]:
    """Produce the update/delete scenario; returns (everything produced, what compaction keeps)."""
    produced = produce(bootstrap, topic, updates_then_deletes(), **config)
    expected = latest_per_key(produced)
    wait_until(lambda: read_all(bootstrap, topic) == expected, timeout=20, message="one record per key")
    return produced, expected


def test_latest_record_per_key_survives_with_its_offset(broker: BrokerProcess) -> None:
    produced, expected = produce_and_await_compaction(broker.bootstrap, "compacted")
    assert len(produced) == KEYS * ROUNDS + DELETED + TAIL
    assert len(expected) == KEYS + TAIL
    assert sum(1 for entry in expected if entry[2] is None) == DELETED  # tombstones kept for now
    assert expected[-1][1] == b"tail-%d" % (TAIL - 1)
    wait_until(lambda: read_all(broker.bootstrap, "compacted") == live(expected), timeout=20,
               message="tombstones to expire after delete.retention.ms")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip_through_the_cleaner(broker: BrokerProcess, codec: str) -> None:
    topic = f"compacted-{codec}"
    _, expected = produce_and_await_compaction(
        broker.bootstrap, topic, **{"compression.type": codec, "linger.ms": 5, "batch.num.messages": 7}
    )
    assert read_with_aiokafka(broker.bootstrap, topic, len(expected)) == expected


def test_every_client_reads_the_compacted_log(broker: BrokerProcess) -> None:
    _, expected = produce_and_await_compaction(broker.bootstrap, "compacted-clients", **{"enable.idempotence": True})
    assert read_with_kafka_python(broker.bootstrap, "compacted-clients", len(expected)) == expected
    assert read_with_aiokafka(broker.bootstrap, "compacted-clients", len(expected)) == expected
    # the idempotent producer goes on where it was: its state survived the cleaning
    more = produce(broker.bootstrap, "compacted-clients", [(b"key-0", b"again")], **{"enable.idempotence": True})
    assert more[0][0] == expected[-1][0] + 1


def test_keyless_records_are_refused_by_a_compacted_topic(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000, **QUIET})
    outcome: list[KafkaError | None] = []
    producer.produce("compacted-keys", value=b"no key", on_delivery=lambda err, _m: outcome.append(err))
    assert producer.flush(15) == 0
    assert outcome and outcome[0] is not None and outcome[0].code() == KafkaError.INVALID_RECORD
    assert read_all(broker.bootstrap, "compacted-keys") == []


def test_compact_delete_also_applies_retention() -> None:
    config = {**BROKER_CONFIG, "log.cleanup.policy": "compact,delete", "log.retention.ms": "1500"}
    with running_broker(config=config) as broker:
        produced = produce(broker.bootstrap, "compact-delete", [(b"k%d" % i, b"v" * 100) for i in range(60)])
        assert read_all(broker.bootstrap, "compact-delete") != []
        wait_until(lambda: read_all(broker.bootstrap, "compact-delete") == [], timeout=20,
                   message="retention to delete every segment")
        assert watermarks(broker.bootstrap, "compact-delete") == (len(produced), len(produced))


def test_produce_and_fetch_go_on_while_a_large_log_is_cleaned() -> None:
    with running_broker(config={**BROKER_CONFIG, "log.segment.bytes": str(4 << 20)}) as broker:
        produce_during_cleaning(broker, "compacted-large")


def produce_during_cleaning(broker: BrokerProcess, topic: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, **QUIET})
    value = os.urandom(400)
    for i in range(60_000):  # about 25 MB over 1000 keys
        producer.produce(topic, key=b"key-%d" % (i % 1000), value=value)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    partition_dir = os.path.join(broker.data_dir, f"{topic}-0")
    wait_until(lambda: glob.glob(os.path.join(partition_dir, "*.cleaned")), timeout=30, interval=0.01,
               message="a cleaning to start")
    latencies = []
    while glob.glob(os.path.join(partition_dir, "*.cleaned")) and len(latencies) < 200:
        began = time.monotonic()
        producer.produce(topic, key=b"during", value=b"%d" % len(latencies))
        assert producer.flush(10) == 0
        latencies.append(time.monotonic() - began)
    assert len(latencies) >= 3, "the cleaning was too quick to observe"
    assert max(latencies) < 1.0, latencies
    tail = read_from(broker.bootstrap, topic, watermarks(broker.bootstrap, topic)[1] - 3)
    assert [entry[1] for entry in tail] == [b"during"] * 3


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", **QUIET})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()


def read_from(bootstrap: str, topic: str, offset: int) -> list[Entry]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "from", "enable.partition.eof": True, **QUIET,
    })
    consumer.assign([TopicPartition(topic, 0, offset)])
    entries: list[Entry] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                return entries
            entries.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    raise AssertionError("no end of partition")


def test_cleaned_state_and_swaps_survive_restarts() -> None:
    with running_broker(config=BROKER_CONFIG) as process:
        _, expected = produce_and_await_compaction(process.bootstrap, "compacted-restart")
        assert process.stop() == 0
        with open(os.path.join(process.data_dir, "cleaner-offset-checkpoint"), encoding="utf-8") as handle:
            checkpoint = handle.read().split("\n")
        assert checkpoint[0] == "0"
        entry = next(line.split() for line in checkpoint[2:] if line.startswith("compacted-restart "))
        assert entry[1] == "0" and int(entry[2]) > 0
        simulate_crash_mid_swap(os.path.join(process.data_dir, "compacted-restart-0"))
        process.restart()
        assert read_all(process.bootstrap, "compacted-restart") in (expected, live(expected))
        partition_dir = os.path.join(process.data_dir, "compacted-restart-0")
        assert not glob.glob(os.path.join(partition_dir, "*.cleaned"))
        assert not glob.glob(os.path.join(partition_dir, "*.swap"))


def simulate_crash_mid_swap(partition_dir: str) -> None:
    """Leave what a crash during a swap leaves: a `.swap` segment whose index was half renamed,
    the old segment it replaces still present, and an abandoned `.cleaned` file."""
    first = sorted(glob.glob(os.path.join(partition_dir, "*.log")))[0]
    stem = first[:-4]
    shutil.copy(first, first + ".swap")
    with open(first, "wb") as stale:
        stale.write(b"\x00" * 100)  # the old segment's bytes: gone once the swap completes
    os.unlink(stem + ".timeindex")
    with open(stem + ".log.cleaned", "wb") as abandoned:
        abandoned.write(b"junk")
