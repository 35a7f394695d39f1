"""Log compaction against a real broker: what survives a cleaning, and what the clients read.

The broker runs its cleaner every 50 ms; topics (compacted through the broker's
topic defaults) use tiny segments and a dirty ratio of 0.01 so every produce makes the log
cleanable. Records produced last sit in the active segment, which the cleaner never touches,
so each scenario ends with a few records under unique keys.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from helpers import QUIET, wait_until
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition

from logbus.config import BrokerConfig, log_config
from logbus.protocol.records import (
    TRANSACTIONAL_BIT,
    BatchHeader,
    build_batch,
    iter_headers,
    validate_batches,
    whole_batches_length,
)
from logbus.storage.log import PartitionLog
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
TOMBSTONES_KEPT_MS = 3_600_000

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
    return read_from(bootstrap, topic, OFFSET_BEGINNING)


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


def read_with_kcat(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """(offset, key) of everything in partition 0, as kcat (librdkafka's C consumer) reads it."""
    result = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o %k\\n"],
        capture_output=True, timeout=30, check=True,
    )
    return [(int(offset), key) for offset, key in (line.split(b" ", 1) for line in result.stdout.splitlines())]


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
    """Produce the update/delete scenario into a new topic that keeps its tombstones (a
    cleaning removes them `delete.retention.ms` after it; a loaded machine can take longer
    than the broker's 5 s between two reads); returns (everything produced, what compaction keeps)."""
    create_topic(bootstrap, topic, {"delete.retention.ms": str(TOMBSTONES_KEPT_MS)})
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


def test_tombstones_go_delete_retention_ms_after_the_cleaning(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "compacted-expiring", {"delete.retention.ms": "100"})
    produced = produce(broker.bootstrap, "compacted-expiring", updates_then_deletes())
    wait_until(lambda: read_all(broker.bootstrap, "compacted-expiring") == live(latest_per_key(produced)),
               timeout=30, message="tombstones to expire after delete.retention.ms")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip_through_the_cleaner(broker: BrokerProcess, codec: str) -> None:
    topic = f"compacted-{codec}"
    _, expected = produce_and_await_compaction(
        broker.bootstrap, topic, **{"compression.type": codec, "linger.ms": 5, "batch.num.messages": 7}
    )
    assert read_with_aiokafka(broker.bootstrap, topic, len(expected)) == expected
    assert read_with_kcat(broker.bootstrap, topic) == [(offset, key) for offset, key, _ in expected]
    if codec == "gzip":  # kafka-python finds no snappy, lz4 or zstd library in this environment
        assert read_with_kafka_python(broker.bootstrap, topic, len(expected)) == expected


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
    # Retention long enough that the records are still there for the first read on a busy
    # machine (1.5 s was not: they were gone before it), short enough to wait for.
    config = {**BROKER_CONFIG, "log.cleanup.policy": "compact,delete", "log.retention.ms": "5000"}
    with running_broker(config=config) as broker:
        produced = produce(broker.bootstrap, "compact-delete", [(b"k%d" % i, b"v" * 100) for i in range(60)])
        assert read_all(broker.bootstrap, "compact-delete") != []
        wait_until(lambda: read_all(broker.bootstrap, "compact-delete") == [], timeout=30,
                   message="retention to delete every segment")
        assert watermarks(broker.bootstrap, "compact-delete") == (len(produced), len(produced))


def test_produce_and_fetch_go_on_while_a_large_log_is_cleaned() -> None:
    with running_broker(config={**BROKER_CONFIG, "log.segment.bytes": str(4 << 20)}) as broker:
        produce_during_cleaning(broker, "compacted-large")


def produce_during_cleaning(broker: BrokerProcess, topic: str) -> None:
    """Write the log under cleanup.policy=delete, then switch to compact: one cleaning of it all."""
    create_topic(broker.bootstrap, topic, {"cleanup.policy": "delete"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, **QUIET})
    value = os.urandom(400)
    for i in range(60_000):  # about 25 MB over 1000 keys
        producer.produce(topic, key=b"key-%d" % (i % 1000), value=value)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"cleanup.policy": "compact"})
    admin.alter_configs([resource])[resource].result(15)
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


def read_from(bootstrap: str, topic: str, offset: int, isolation: str = "read_committed") -> list[Entry]:
    """Partition 0 from `offset` to its end, read with confluent-kafka."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "compaction-tests", "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": isolation, **QUIET,
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
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
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
    first = next(log for log in sorted(glob.glob(os.path.join(partition_dir, "*.log")))
                 if os.path.exists(log[:-4] + ".timeindex"))  # one with records (an empty one has no index files)
    stem = first[:-4]
    shutil.copy(first, first + ".swap")
    with open(first, "wb") as stale:
        stale.write(b"\x00" * 100)  # the old segment's bytes: gone once the swap completes
    os.unlink(stem + ".timeindex")
    with open(stem + ".log.cleaned", "wb") as abandoned:
        abandoned.write(b"junk")


# ---------------------------------------------------------------- topic configs and cleaner rounds


def create_topic(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(15)


def first_dirty_offset(broker: BrokerProcess, topic: str, partition: int = 0) -> int | None:
    """Where the cleaner's last cleaning of the partition ended (its checkpoint), None before any."""
    try:
        with open(os.path.join(broker.data_dir, "cleaner-offset-checkpoint"), encoding="utf-8") as handle:
            lines = handle.read().splitlines()[2:]
    except FileNotFoundError:
        return None
    for line in lines:
        name, index, offset = line.split()
        if (name, int(index)) == (topic, partition):
            return int(offset)
    return None


def await_cleaner_rounds(broker: BrokerProcess, rounds: int = 2) -> None:
    """Wait until the cleaner has planned, and finished, a round that began after this call.

    Each round cleans a fresh topic (two segments of unique keys) and records it in the checkpoint;
    the second fresh topic is cleaned in a round that began after the first one's round had ended.
    """
    for _ in range(rounds):
        topic = f"round-{uuid.uuid4().hex[:8]}"
        produce(broker.bootstrap, topic, [(b"r%d" % i, b"v" * 400) for i in range(8)])
        wait_until(lambda topic=topic: first_dirty_offset(broker, topic) is not None, timeout=20,
                   message=f"a cleaner round to clean {topic}")


def stored_batches(broker: BrokerProcess, topic: str) -> list[BatchHeader]:
    """The headers of every batch in the partition's segment files, in order."""
    headers = []
    for path in sorted(glob.glob(os.path.join(broker.data_dir, f"{topic}-0", "*.log"))):
        with open(path, "rb") as handle:
            data = handle.read()
        headers += list(iter_headers(memoryview(data)[: whole_batches_length(data)]))
    return headers


def test_min_cleanable_dirty_ratio_decides_when_a_log_is_cleaned(broker: BrokerProcess) -> None:
    """Unique keys in single-record batches of one size: the ratio is a count of batches."""
    value = b"v" * 50
    batch = len(build_batch([(b"k000", value)], 0))
    create_topic(broker.bootstrap, "ratio", {"min.cleanable.dirty.ratio": "0.5", "segment.bytes": str(10 * batch)})

    def add(start: int, count: int) -> None:
        produce(broker.bootstrap, "ratio", [(b"k%03d" % i, value) for i in range(start, start + count)])

    add(0, 21)  # segments [0, 10) and [10, 20), all dirty; offset 20 in the active segment
    wait_until(lambda: first_dirty_offset(broker, "ratio") == 20, timeout=20, message="the first cleaning")
    add(21, 20)  # segments [20, 30) and [30, 40): 20 dirty batches of 40, a ratio of 0.5, not above it
    await_cleaner_rounds(broker)
    assert first_dirty_offset(broker, "ratio") == 20
    add(41, 10)  # [40, 50): 30 dirty of 50
    wait_until(lambda: first_dirty_offset(broker, "ratio") == 50, timeout=20, message="a cleaning at ratio 0.6")
    assert [entry[0] for entry in read_all(broker.bootstrap, "ratio")] == list(range(51))


def test_min_compaction_lag_keeps_young_records(broker: BrokerProcess) -> None:
    lag_ms = 6000
    create_topic(broker.bootstrap, "min-lag", {"min.compaction.lag.ms": str(lag_ms)})
    before = time.time()
    produced = produce(broker.bootstrap, "min-lag", updates_then_deletes())
    wait_until(lambda: first_dirty_offset(broker, "min-lag") is not None, timeout=30, interval=0.02,
               message="a cleaning once the records are old enough")
    assert time.time() - before >= lag_ms / 1000
    expected = latest_per_key(produced)
    wait_until(lambda: read_all(broker.bootstrap, "min-lag") in (expected, live(expected)), timeout=20,
               message="one record per key")


def test_max_compaction_lag_rolls_the_active_segment_and_cleans_below_the_dirty_ratio(broker: BrokerProcess) -> None:
    """A ratio of 1.0 is never exceeded and the segment is far from full: only the lag rolls and cleans."""
    lag_ms = 2000
    create_topic(broker.bootstrap, "max-lag", {
        "min.cleanable.dirty.ratio": "1.0", "max.compaction.lag.ms": str(lag_ms), "segment.bytes": str(1 << 20),
    })
    before = time.time()
    produced = produce(broker.bootstrap, "max-lag", updates_then_deletes())
    probes: list[Entry] = []

    def rolled() -> bool:  # a segment rolls on an append only
        probes.extend(produce(broker.bootstrap, "max-lag", [(b"probe-%d" % len(probes), b"p")]))
        return len(glob.glob(os.path.join(broker.data_dir, "max-lag-0", "*.log"))) > 1

    wait_until(rolled, timeout=20, interval=0.5, message="the active segment to roll")
    assert time.time() - before >= lag_ms / 1000
    wait_until(lambda: first_dirty_offset(broker, "max-lag") == probes[-1][0], timeout=20,
               message="the rolled segment to be cleaned")
    expected = latest_per_key(produced + probes)
    assert read_all(broker.bootstrap, "max-lag") in (expected, live(expected))


def test_the_active_segment_is_never_cleaned(broker: BrokerProcess) -> None:
    produced = produce(broker.bootstrap, "active", updates_then_deletes() + [(b"dup", b"first"), (b"dup", b"second")])
    expected = latest_per_key(produced[:-2]) + produced[-2:]
    wait_until(lambda: read_all(broker.bootstrap, "active") == expected, timeout=20, message="the cleaning")
    await_cleaner_rounds(broker)
    assert read_all(broker.bootstrap, "active") in (expected, live(produced[:-2]) + produced[-2:])


def test_a_producer_whose_records_all_went_keeps_an_empty_batch(broker: BrokerProcess) -> None:
    """Kafka keeps the last batch of each producer, emptied, so sequence numbers survive a reload;
    every client reads past it."""
    topic = "compacted-producers"
    idempotent = produce(broker.bootstrap, topic, [(b"key-%d" % key, b"early") for key in range(KEYS)],
                         **{"enable.idempotence": True})
    produced = idempotent + produce(broker.bootstrap, topic, updates_then_deletes())
    expected = latest_per_key(produced)
    wait_until(lambda: read_all(broker.bootstrap, topic) == expected, timeout=20, message="one record per key")
    last = idempotent[-1][0]
    kept = [header for header in stored_batches(broker, topic) if header.base_offset <= last]
    assert len(kept) == 1
    assert (kept[0].last_offset, kept[0].record_count, kept[0].compression) == (last, 0, 0)
    assert kept[0].producer_id >= 0 and kept[0].base_sequence == KEYS - 1
    assert read_with_kafka_python(broker.bootstrap, topic, len(expected)) == expected
    assert read_with_aiokafka(broker.bootstrap, topic, len(expected)) == expected
    assert read_with_kcat(broker.bootstrap, topic) == [(offset, key) for offset, key, _ in expected]


def test_consumer_offsets_are_compacted_and_load_after_a_restart() -> None:
    config = {**BROKER_CONFIG, "offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "4096"}
    with running_broker(config=config) as broker:
        produce(broker.bootstrap, "source", [(b"k", b"v")])
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "compacted", **QUIET})
        try:
            for offset in range(300):
                consumer.commit(offsets=[TopicPartition("source", 0, offset)], asynchronous=False)
        finally:
            consumer.close()
        wait_until(lambda: first_dirty_offset(broker, "__consumer_offsets") is not None, timeout=20,
                   message="a cleaning of __consumer_offsets")
        assert len(read_all(broker.bootstrap, "__consumer_offsets")) < 100
        broker.kill()  # recovery reads the cleaned segments
        broker.restart()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "compacted", **QUIET})
        try:
            assert consumer.committed([TopicPartition("source", 0)], timeout=15)[0].offset == 299
        finally:
            consumer.close()


def test_the_cleaner_removes_aborted_transactions_and_every_client_reads_past_the_markers() -> None:
    """Transactions written with the storage layer (exact offsets, the aborting producer's last
    batch known) into a stopped broker's compacted topic: the cleaning removes the aborted
    records, so even a read_uncommitted reader no longer sees them; the aborting producer's last
    batch stays, empty; the markers stay (delete.retention.ms has not passed), and every client
    reads past them."""
    topic = "txn-compacted"
    with running_broker(config=BROKER_CONFIG) as broker:
        create_topic(broker.bootstrap, topic, {})
        assert broker.stop() == 0
        log_ = PartitionLog(os.path.join(broker.data_dir, f"{topic}-0"), topic, 0,
                            log_config(BrokerConfig(BROKER_CONFIG)))
        log_.load(0, 0, clean_shutdown=False)

        def append(key: bytes, value: bytes, producer_id: int = -1) -> None:
            transactional = producer_id >= 0
            raw = build_batch([(key, value)], int(time.time() * 1000), producer_id=producer_id,
                              producer_epoch=0 if transactional else -1, base_sequence=0 if transactional else -1,
                              attributes=TRANSACTIONAL_BIT if transactional else 0)
            log_.append(bytearray(raw), validate_batches(raw), 0)

        append(b"k", b"before")  # 0
        append(b"k", b"aborted", producer_id=1)  # 1
        append(b"c", b"committed", producer_id=2)  # 2
        log_.append_control_marker(1, 0, False, 0, 0)  # 3
        log_.append_control_marker(2, 0, True, 0, 0)  # 4
        for i in range(8):  # 5-12: the markers leave the active segment (segment.bytes 2048)
            append(b"pad-%d" % i, b"p" * 400)
        log_.close_files()
        broker.restart()

        def aborted_batch() -> BatchHeader:
            return next(header for header in stored_batches(broker, topic) if header.base_offset == 1)

        wait_until(lambda: aborted_batch().record_count == 0, timeout=20, message="the aborted records cleaned")
        assert [(h.base_offset, h.is_control) for h in stored_batches(broker, topic)][:5] == [
            (0, False), (1, False), (2, False), (3, True), (4, True)]
        expected = [(0, b"k", b"before"), (2, b"c", b"committed")] + [
            (5 + i, b"pad-%d" % i, b"p" * 400) for i in range(8)]
        assert read_from(broker.bootstrap, topic, OFFSET_BEGINNING, "read_uncommitted") == expected
        assert read_all(broker.bootstrap, topic) == expected
        assert read_with_kafka_python(broker.bootstrap, topic, len(expected)) == expected
        assert read_with_aiokafka(broker.bootstrap, topic, len(expected)) == expected
