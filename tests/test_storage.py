"""The storage layer against real broker processes: files on disk, restarts, crashes, retention.

Every test starts `logbus serve` subprocesses and talks to them with confluent-kafka (and
kafka-python where a second client's view matters); the test process reads the data dir
directly to check Kafka's on-disk formats, and damages it between runs to exercise recovery.
Broker upkeep intervals (retention check, checkpoints) are set small through config so that
the tests can poll the disk with `wait_until` instead of waiting for Kafka's defaults.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType
from helpers import QUIET, RawConnection, ballast, wait_until
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition
from kio.schema.fetch.v11 import request as fetch_v11
from kio.schema.fetch.v12 import request as fetch_v12
from kio.serial import entity_reader

from logbus.broker.server import _uses_sendfile
from logbus.protocol import codec
from logbus.testing import BrokerProcess, running_broker

FAST_UPKEEP = {
    "log.retention.check.interval.ms": "100",
    "log.flush.offset.checkpoint.interval.ms": "100",
    "log.flush.start.offset.checkpoint.interval.ms": "100",
}
FIRST_SEGMENT = "00000000000000000000"
FETCH_KEY = 1
HOUR_MS = 3_600_000


# ---------------------------------------------------------------------- reading the data dir


@dataclass(frozen=True)
class StoredBatch:
    """A v2 record batch as found in a `.log` file, parsed here independently of logbus."""

    position: int
    base_offset: int
    size: int
    leader_epoch: int
    magic: int
    last_offset: int
    max_timestamp: int
    crc_ok: bool


def read_segment(path: str) -> list[StoredBatch]:
    """Every batch of a segment file; fails if the file holds anything but whole batches."""
    with open(path, "rb") as handle:
        data = handle.read()
    batches = []
    position = 0
    while position < len(data):
        base_offset, length, epoch, magic, crc = struct.unpack_from(">qiibI", data, position)
        _, last_delta, _, max_ts = struct.unpack_from(">hiqq", data, position + 21)
        size = length + 12
        assert position + size <= len(data), f"{path}: torn batch at byte {position}"
        crc_ok = crc32c.crc32c(data[position + 21 : position + size]) == crc
        batches.append(
            StoredBatch(position, base_offset, size, epoch, magic, base_offset + last_delta, max_ts, crc_ok)
        )
        position += size
    return batches


def read_offset_index(path: str, base_offset: int) -> list[tuple[int, int]]:
    """(absolute offset, file position) entries of a `.index` file (8 bytes each)."""
    with open(path, "rb") as handle:
        raw = handle.read()
    assert len(raw) % 8 == 0, f"{path}: {len(raw)} bytes is not whole entries"
    return [(base_offset + rel, pos) for rel, pos in struct.iter_unpack(">II", raw)]


def read_time_index(path: str, base_offset: int) -> list[tuple[int, int]]:
    """(timestamp, absolute offset) entries of a `.timeindex` file (12 bytes each)."""
    with open(path, "rb") as handle:
        raw = handle.read()
    assert len(raw) % 12 == 0, f"{path}: {len(raw)} bytes is not whole entries"
    return [(ts, base_offset + rel) for ts, rel in struct.iter_unpack(">qI", raw)]


def read_checkpoint(path: str) -> list[list[str]]:
    """Entries of a Kafka checkpoint file: version 0, a count line, then the entries."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    assert lines[0] == "0", f"{path}: version line {lines[0]!r}"
    assert int(lines[1]) == len(lines) - 2, f"{path}: count line disagrees with the entries"
    return [line.split() for line in lines[2:]]


def checkpointed(broker: BrokerProcess, name: str, topic: str, partition: int = 0) -> int | None:
    path = os.path.join(broker.data_dir, name)
    if not os.path.exists(path):
        return None
    found = [int(o) for t, p, o in read_checkpoint(path) if (t, int(p)) == (topic, partition)]
    return found[0] if found else None


def partition_dir(broker: BrokerProcess, topic: str, partition: int = 0) -> str:
    return os.path.join(broker.data_dir, f"{topic}-{partition}")


def segment_bases(directory: str) -> list[int]:
    return sorted(int(name[:-4]) for name in os.listdir(directory) if name.endswith(".log"))


def stem(directory: str, base: int) -> str:
    return os.path.join(directory, f"{base:020d}")


def log_size(directory: str) -> int:
    """Bytes in the `.log` files (one that retention renames to `.deleted` meanwhile counts as gone)."""
    total = 0
    for base in segment_bases(directory):
        with contextlib.suppress(FileNotFoundError):
            total += os.path.getsize(stem(directory, base) + ".log")
    return total


def all_batches(directory: str) -> list[StoredBatch]:
    return [b for base in segment_bases(directory) for b in read_segment(stem(directory, base) + ".log")]


def assert_indexes_valid(directory: str, unread_time_index: int | None = None) -> None:
    """Each segment's indexes point at batch starts holding the offsets they name, in order
    (but the time index of segment `unread_time_index`, which is checked at its first use)."""
    for base in segment_bases(directory):
        batches = read_segment(stem(directory, base) + ".log")
        by_position = {b.position: b for b in batches}
        entries = read_offset_index(stem(directory, base) + ".index", base)
        assert [o for o, _ in entries] == sorted({o for o, _ in entries}), f"segment {base}: offsets not increasing"
        for offset, position in entries:
            assert position in by_position, f"segment {base}: index entry at {position} is not a batch start"
            assert by_position[position].base_offset <= offset <= by_position[position].last_offset
        if base == unread_time_index:
            continue
        times = read_time_index(stem(directory, base) + ".timeindex", base)
        assert [t for t, _ in times] == sorted({t for t, _ in times}), f"segment {base}: timestamps not increasing"
        for timestamp, offset in times:
            owner = next(b for b in batches if b.base_offset <= offset <= b.last_offset)
            assert owner.max_timestamp == timestamp


# ---------------------------------------------------------------------- talking to the broker


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)], operation_timeout=10)
    futures[name].result(10)


def topic_config(broker: BrokerProcess, topic: str, name: str) -> tuple[str, ConfigSource]:
    """(value, source) of one topic config through DescribeConfigs."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entry = admin.describe_configs([resource], request_timeout=10)[resource].result(10)[name]
    return entry.value, ConfigSource(entry.source)


def delete_records(broker: BrokerProcess, topic: str, before: int) -> int:
    """DeleteRecords up to `before`; returns the low watermark the broker reports."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    futures = admin.delete_records([TopicPartition(topic, 0, before)], request_timeout=10)
    return next(iter(futures.values())).result(10).low_watermark


def produce(broker: BrokerProcess, topic: str, values: list[bytes], timestamp: int = 0,
            partition: int = 0, **config: object) -> list[int]:
    """Produce one record per batch; returns the acknowledged offsets in order."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 1, **QUIET, **config})
    offsets: list[int] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, message: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(message.offset())  # type: ignore[attr-defined]

    for value in values:
        producer.produce(topic, value=value, partition=partition, timestamp=timestamp, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return offsets


def watermarks(broker: BrokerProcess, topic: str, partition: int = 0) -> tuple[int, int]:
    """(earliest, latest) through ListOffsets."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "storage-watermarks", **QUIET})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def read_confluent(broker: BrokerProcess, topic: str, end: int, start: int = OFFSET_BEGINNING,
                   partition: int = 0, **config: object) -> dict[int, bytes]:
    """offset -> value up to `end` with confluent-kafka and CRC checks; any error fails the test."""
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "storage-tests", "enable.auto.commit": False,
        "check.crcs": True, **QUIET, **config,
    })
    consumer.assign([TopicPartition(topic, partition, start)])
    found: dict[int, bytes] = {}
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and max(found, default=-1) < end - 1:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            found[message.offset()] = message.value()
    finally:
        consumer.close()
    return found


def read_kafka_python(broker: BrokerProcess, topic: str, end: int, partition: int = 0) -> dict[int, bytes]:
    """offset -> value from the log start up to `end` with kafka-python (which checks CRCs)."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
        check_crcs=True,
    )
    tp = KafkaPythonPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    found: dict[int, bytes] = {}
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and consumer.position(tp) < end:
            for records in consumer.poll(timeout_ms=200).values():
                found.update((record.offset, record.value) for record in records)
    finally:
        consumer.close()
    return found


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """A broker with fast upkeep; a test parametrized indirectly picks its `socket.sendfile`."""
    sendfile = getattr(request, "param", None)
    config = {**FAST_UPKEEP, "socket.sendfile": sendfile} if sendfile else FAST_UPKEEP
    with running_broker(config=config) as process:
        yield process


# ---------------------------------------------------------------------- raw idempotent produce


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def record_batch(value: bytes, producer_id: int = -1, sequence: int = -1, timestamp: int | None = None) -> bytes:
    """A one-record v2 batch; with a producer id it is idempotent (epoch 0, the given base sequence)."""
    body = b"\x00" + _varint(0) + _varint(0) + _varint(-1) + _varint(len(value)) + value + _varint(0)
    record = _varint(len(body)) + body
    timestamp = int(time.time() * 1000) if timestamp is None else timestamp
    after_crc = struct.pack(">hiqqqhii", 0, 0, timestamp, timestamp, producer_id, 0, sequence, 1) + record
    crc = crc32c.crc32c(after_crc)
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc) + after_crc


def idempotent_batch(producer_id: int, sequence: int, value: bytes) -> bytes:
    return record_batch(value, producer_id, sequence)


def produce_raw(broker: BrokerProcess, topic: str, batch: bytes) -> tuple[int, int]:
    """One Produce v3 request (acks=1) on a plain socket; returns (error code, base offset)."""
    name = topic.encode()
    body = struct.pack(">hhi", -1, 1, 10000) + struct.pack(">ih", 1, len(name)) + name
    body += struct.pack(">iii", 1, 0, len(batch)) + batch
    header = struct.pack(">hhih", 0, 3, 7, 4) + b"test"
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        response = _recv_exactly(sock, size)
    # correlation id, topic count, topic name, partition count, then index, error, base offset
    position = 4 + 4 + 2 + len(name) + 4
    _, error, base_offset = struct.unpack_from(">ihq", response, position)
    return error, base_offset


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "broker closed the connection"
        data += chunk
    return data


# ---------------------------------------------------------------------- layout


def test_on_disk_layout_uses_kafka_formats(broker: BrokerProcess) -> None:
    create_topic(broker, "layout", **{"index.interval.bytes": "1"})
    offsets = produce(broker, "layout", [b"value-%d" % i for i in range(5)])
    assert offsets == [0, 1, 2, 3, 4]
    assert broker.stop() == 0
    directory = partition_dir(broker, "layout")
    for extension in (".log", ".index", ".timeindex"):
        assert os.path.isfile(os.path.join(directory, FIRST_SEGMENT + extension))

    with open(os.path.join(directory, FIRST_SEGMENT + ".log"), "rb") as handle:
        raw = handle.read()
    assert raw[16] == 2, "magic byte of the first stored batch"
    batches = read_segment(os.path.join(directory, FIRST_SEGMENT + ".log"))
    assert [b.base_offset for b in batches] == offsets, "base offsets patched in place"
    assert all(b.crc_ok and b.magic == 2 and b.leader_epoch >= 0 for b in batches)

    index = read_offset_index(os.path.join(directory, FIRST_SEGMENT + ".index"), 0)
    assert index == [(b.last_offset, b.position) for b in batches], "index.interval.bytes=1: one entry per batch"
    times = read_time_index(os.path.join(directory, FIRST_SEGMENT + ".timeindex"), 0)
    newest = max(b.max_timestamp for b in batches)
    assert times[-1] == (newest, next(b.last_offset for b in batches if b.max_timestamp == newest))
    assert_indexes_valid(directory)

    assert checkpointed(broker, "recovery-point-offset-checkpoint", "layout") == 5
    assert checkpointed(broker, "log-start-offset-checkpoint", "layout") == 0
    assert read_checkpoint(os.path.join(directory, "leader-epoch-checkpoint")) == [[str(batches[0].leader_epoch), "0"]]
    with open(os.path.join(broker.data_dir, "meta.properties"), encoding="utf-8") as handle:
        properties = dict(line.split("=", 1) for line in handle.read().splitlines() if "=" in line)
    assert properties["version"] == "0" and properties["broker.id"] == "0" and properties["cluster.id"]
    assert os.path.exists(os.path.join(broker.data_dir, ".kafka_cleanshutdown"))

    broker.restart()
    assert not os.path.exists(os.path.join(broker.data_dir, ".kafka_cleanshutdown")), "marker removed on start"


# ---------------------------------------------------------------------- restarts


def test_clean_restart_keeps_offsets_records_configs_and_producer_state(broker: BrokerProcess) -> None:
    create_topic(broker, "restart", **{"segment.bytes": "1000", "index.interval.bytes": "1"})
    values = [b"first-%03d" % i + b"x" * 60 for i in range(40)]
    assert produce(broker, "restart", values) == list(range(40))
    assert produce_raw(broker, "restart", idempotent_batch(4242, 0, b"idempotent-0")) == (0, 40)
    assert produce_raw(broker, "restart", idempotent_batch(4242, 1, b"idempotent-1")) == (0, 41)
    directory = partition_dir(broker, "restart")
    before_segments = segment_bases(directory)
    assert len(before_segments) > 1

    for round_ in range(2):  # later rounds append to an active segment (and its indexes) from before a restart
        assert broker.stop() == 0, "SIGTERM is a clean exit"
        broker.restart()
        assert segment_bases(directory)[: len(before_segments)] == before_segments
        assert watermarks(broker, "restart") == (0, 42 + 2 * round_)
        found = read_confluent(broker, "restart", 42 + 2 * round_)
        assert [found[i] for i in range(40)] == values
        assert (found[40], found[41]) == (b"idempotent-0", b"idempotent-1")
        assert produce_raw(broker, "restart", idempotent_batch(4242, 1, b"idempotent-1")) == (0, 41), (
            "a duplicate of the producer's last batch is acknowledged with its original offset"
        )
        assert produce_raw(broker, "restart", idempotent_batch(4242, 7, b"gap"))[0] == 45, "OUT_OF_ORDER_SEQUENCE"
        more = [b"round-%d-%d" % (round_, i) for i in range(2)]
        assert produce(broker, "restart", more) == [42 + 2 * round_, 43 + 2 * round_]
        assert_indexes_valid(directory)

    assert topic_config(broker, "restart", "segment.bytes") == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    produce(broker, "restart", [b"last-%02d" % i + b"w" * 60 for i in range(20)])
    after_restarts = segment_bases(directory)[len(before_segments) :]
    assert len(after_restarts) >= 2
    sizes = [os.path.getsize(stem(directory, base) + ".log") for base in after_restarts[:-1]]
    assert all(size <= 1000 for size in sizes), f"segment.bytes survives restarts: {sizes}"
    for segment_start, segment_end in zip(segment_bases(directory), segment_bases(directory)[1:], strict=False):
        got = read_confluent(broker, "restart", segment_end, start=segment_start + 1)
        assert min(got) == segment_start + 1, "a fetch from the middle of a segment starts at its offset"


def test_idle_idempotent_producers_expire() -> None:
    config = {**FAST_UPKEEP, "producer.id.expiration.ms": "60000"}
    with running_broker(config=config) as broker:
        create_topic(broker, "expiry")
        an_hour_ago = int(time.time() * 1000) - HOUR_MS
        assert produce_raw(broker, "expiry", record_batch(b"idle", 31, 0, timestamp=an_hour_ago)) == (0, 0)
        assert produce_raw(broker, "expiry", record_batch(b"active", 32, 0)) == (0, 1)
        wait_until(lambda: produce_raw(broker, "expiry", record_batch(b"idle", 31, 0))[1] == 2, timeout=10,
                   message="the idle producer forgotten: its batch is new again")
        assert produce_raw(broker, "expiry", record_batch(b"active", 32, 0)) == (0, 1), "still deduplicated"


# ---------------------------------------------------------------------- crash during a produce stream


class StreamingProducer(threading.Thread):
    """Produces numbered records with acks=1 until stopped; remembers what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.acked: dict[int, bytes] = {}
        self.stopping = threading.Event()
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 2, "message.timeout.ms": 3000,
            "enable.idempotence": False, **QUIET,
        })

    def _delivered(self, err: KafkaError | None, message: object) -> None:
        if err is None:
            self.acked[message.offset()] = message.value()  # type: ignore[attr-defined]

    def run(self) -> None:
        sequence = 0
        while not self.stopping.is_set():
            if len(self.producer) > 500:
                self.producer.poll(0.01)
                continue
            self.producer.produce(self.topic, value=b"record-%08d" % sequence, on_delivery=self._delivered)
            sequence += 1
            self.producer.poll(0)
        self.producer.flush(10)


def _crash(broker: BrokerProcess) -> None:
    broker.kill()


def _terminate(broker: BrokerProcess) -> None:
    assert broker.stop() == 0, "SIGTERM under load is still a clean exit"
    assert os.path.exists(os.path.join(broker.data_dir, ".kafka_cleanshutdown"))


@pytest.mark.parametrize("stop", [_crash, _terminate], ids=["kill-9", "sigterm"])
def test_stop_during_produce_stream_loses_nothing_acknowledged(stop) -> None:
    config = {**FAST_UPKEEP, "log.flush.interval.messages": "1", "log.segment.bytes": "65536"}
    with running_broker(config=config) as broker:
        create_topic(broker, "stream")
        assert produce_raw(broker, "stream", idempotent_batch(777, 0, b"idempotent")) == (0, 0)
        stream = StreamingProducer(broker.bootstrap, "stream")
        stream.start()
        wait_until(lambda: len(stream.acked) >= 3000, timeout=60, message="3000 acknowledged records")
        stop(broker)
        stream.stopping.set()
        stream.join(30)
        acked = dict(stream.acked)

        broker.restart()
        earliest, latest = watermarks(broker, "stream")
        assert earliest == 0 and latest >= max(acked) + 1
        for found in (read_confluent(broker, "stream", latest), read_kafka_python(broker, "stream", latest)):
            assert sorted(found) == list(range(latest)), "every offset below the log end is readable"
            lost = {offset: value for offset, value in acked.items() if found.get(offset) != value}
            assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. {sorted(lost)[:5]}"
        assert_indexes_valid(partition_dir(broker, "stream"))
        assert produce_raw(broker, "stream", idempotent_batch(777, 0, b"idempotent")) == (0, 0), (
            "producer state rebuilt after the crash: the duplicate gets its original offset"
        )
        assert produce(broker, "stream", [b"after-crash"]) == [latest]


# ---------------------------------------------------------------------- torn tails and bad indexes


def _garbage(_last: bytes) -> bytes:
    return b"\xde\xad\xbe\xef" * 40


def _zeros(_last: bytes) -> bytes:
    return bytes(4096)  # what a power loss can leave: the file grew, its data never reached the disk


def _stale_copy(last: bytes) -> bytes:
    stale = bytearray(last)
    struct.pack_into(">q", stale, 0, 0)  # intact (the CRC does not cover the offset) but offset 0 again
    return bytes(stale)


def _truncated_batch(last: bytes) -> bytes:
    return last[: len(last) // 2]


def _wrong_crc(last: bytes) -> bytes:
    damaged = bytearray(last)
    next_offset = struct.unpack_from(">q", last)[0] + 1
    struct.pack_into(">q", damaged, 0, next_offset)
    damaged[-3] ^= 0xFF  # a value byte: the stored CRC no longer matches
    return bytes(damaged)


@pytest.mark.parametrize("damage", [_garbage, _zeros, _truncated_batch, _wrong_crc, _stale_copy],
                         ids=["garbage", "zeros", "truncated", "bad-crc", "offset-going-back"])
def test_torn_tail_is_truncated_and_indexes_rebuilt(broker: BrokerProcess, damage) -> None:
    create_topic(broker, "torn", **{"index.interval.bytes": "1"})
    values = [b"torn-%d" % i for i in range(10)]
    produce(broker, "torn", values)
    assert broker.stop() == 0
    directory = partition_dir(broker, "torn")
    log_path = os.path.join(directory, FIRST_SEGMENT + ".log")
    intact_size = os.path.getsize(log_path)
    last = read_segment(log_path)[-1]
    with open(log_path, "rb") as handle:
        handle.seek(last.position)
        last_bytes = handle.read()
    with open(log_path, "ab") as handle:
        handle.write(damage(last_bytes))
    with open(os.path.join(directory, FIRST_SEGMENT + ".index"), "ab") as handle:
        handle.write(struct.pack(">II", 10, intact_size))  # an entry pointing into the torn tail
    os.unlink(os.path.join(broker.data_dir, ".kafka_cleanshutdown"))

    broker.restart()
    assert os.path.getsize(log_path) == intact_size, "the torn tail is cut off"
    assert watermarks(broker, "torn") == (0, 10)
    assert_indexes_valid(directory)
    assert produce(broker, "torn", [b"after"]) == [10]
    found = read_confluent(broker, "torn", 11)
    assert [found[i] for i in range(11)] == values + [b"after"]
    assert "truncated" in broker.read_log()


def test_missing_and_corrupt_index_files_are_rebuilt(broker: BrokerProcess) -> None:
    create_topic(broker, "indexes", **{"segment.bytes": "700", "index.interval.bytes": "1"})
    values = [b"index-%03d" % i + b"z" * 40 for i in range(60)]
    produce(broker, "indexes", values)
    assert broker.stop() == 0
    directory = partition_dir(broker, "indexes")
    bases = segment_bases(directory)
    assert len(bases) >= 4
    os.unlink(stem(directory, bases[0]) + ".index")
    os.unlink(stem(directory, bases[0]) + ".timeindex")
    with open(stem(directory, bases[1]) + ".index", "r+b") as handle:  # entries in the wrong order
        entries = handle.read()
        handle.seek(0)
        handle.write(entries[::-1])
    with open(stem(directory, bases[2]) + ".index", "ab") as handle:  # a torn last entry
        handle.write(b"\x00\x00\x00")
    with open(stem(directory, bases[-1]) + ".timeindex", "wb") as handle:  # garbage
        handle.write(b"\xff" * 24)

    broker.restart()  # a clean restart: the indexes must be checked, not trusted
    assert_indexes_valid(directory, unread_time_index=bases[-1])  # read, checked, rebuilt by the produce below
    for start in (bases[0] + 3, bases[1] + 1, bases[2] + 2, bases[-1]):
        got = read_confluent(broker, "indexes", 60, start=start)
        assert min(got) == start and all(got[i] == values[i] for i in got)
    assert produce(broker, "indexes", [b"more"]) == [60]
    assert_indexes_valid(directory)


def test_corruption_in_an_unflushed_middle_segment_truncates_the_log_there(broker: BrokerProcess) -> None:
    create_topic(broker, "middle", **{"segment.bytes": "700"})
    values = [b"middle-%03d" % i + b"m" * 40 for i in range(40)]
    produce(broker, "middle", values)
    assert broker.stop() == 0
    directory = partition_dir(broker, "middle")
    bases = segment_bases(directory)
    assert len(bases) >= 4
    damaged_base, after = bases[1], bases[2]
    victim = read_segment(stem(directory, damaged_base) + ".log")[-1]
    with open(stem(directory, damaged_base) + ".log", "r+b") as handle:  # flip a value byte of its last batch
        handle.seek(victim.position + victim.size - 3)
        byte = handle.read(1)
        handle.seek(victim.position + victim.size - 3)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with open(os.path.join(broker.data_dir, "recovery-point-offset-checkpoint"), "w", encoding="utf-8") as handle:
        handle.write("0\n1\nmiddle 0 0\n")  # nothing of the log was known flushed
    os.unlink(os.path.join(broker.data_dir, ".kafka_cleanshutdown"))

    broker.restart()
    assert segment_bases(directory) == bases[:2], "segments after the corrupt batch are gone"
    assert watermarks(broker, "middle") == (0, victim.base_offset)
    assert victim.base_offset == after - 1
    found = read_confluent(broker, "middle", victim.base_offset)
    assert found == {i: values[i] for i in range(victim.base_offset)}
    assert produce(broker, "middle", [b"continues"]) == [victim.base_offset]
    assert_indexes_valid(directory)


def test_a_lost_metadata_file_stops_the_broker_instead_of_deleting_the_logs(broker: BrokerProcess) -> None:
    produce(broker, "precious", [b"keep-me"])
    assert broker.stop() == 0
    os.unlink(os.path.join(broker.data_dir, "logbus-metadata.json"))
    with pytest.raises(RuntimeError, match="cluster.id"):
        broker.restart()
    assert read_segment(os.path.join(partition_dir(broker, "precious"), FIRST_SEGMENT + ".log"))[0].base_offset == 0


def test_a_second_broker_on_the_same_data_dir_is_refused(broker: BrokerProcess) -> None:
    produce(broker, "shared-dir", [b"first"])
    intruder = BrokerProcess(broker.data_dir)
    with pytest.raises(RuntimeError, match="in use by another broker process"):
        intruder.start()
    assert produce(broker, "shared-dir", [b"second"]) == [1]


def test_damaged_checkpoint_files_are_ignored(broker: BrokerProcess) -> None:
    produce(broker, "hints", [b"hint-%d" % i for i in range(5)])
    assert broker.stop() == 0
    damaged = ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint",
               os.path.join("hints-0", "leader-epoch-checkpoint")]
    for name, garbage in zip(damaged, [b"0\n7\nhints 0\n", b"\xff\xfe", b"0\nx\n", b"0\n1\nnot numbers\n"],
                             strict=True):
        with open(os.path.join(broker.data_dir, name), "wb") as handle:
            handle.write(garbage)
    os.unlink(os.path.join(broker.data_dir, ".kafka_cleanshutdown"))

    broker.restart()
    assert watermarks(broker, "hints") == (0, 5)
    assert read_confluent(broker, "hints", 5) == {i: b"hint-%d" % i for i in range(5)}
    assert produce(broker, "hints", [b"more"]) == [5]
    assert "ignoring checkpoint file" in broker.read_log()
    wait_until(lambda: checkpointed(broker, "recovery-point-offset-checkpoint", "hints") is not None,
               message="checkpoints written afresh")


@pytest.mark.parametrize("first_append_on_full_disk", [False, True], ids=["fills-up", "full-from-the-start"])
def test_full_disk_takes_the_log_dir_offline_until_a_restart(
    small_disk: str, first_append_on_full_disk: bool
) -> None:
    """KIP-112: the append that finds the disk full fails with KAFKA_STORAGE_ERROR and takes the
    log dir offline: its partitions answer KAFKA_STORAGE_ERROR even once space returns, until a
    restart, which recovers every acknowledged record (and nothing of the failed appends)."""
    with running_broker(config=FAST_UPKEEP, data_dir=os.path.join(small_disk, "data")) as broker:
        create_topic(broker, "full")
        if first_append_on_full_disk:
            filler = ballast(small_disk, 0)
            results = [produce_raw(broker, "full", record_batch(b"x" * 3000)) for _ in range(3)]
            assert results == [(56, -1)] * 3, results
        else:
            assert produce_raw(broker, "full", record_batch(b"before")) == (0, 0)
            filler = ballast(small_disk, 200_000)
            results = [produce_raw(broker, "full", record_batch(b"x" * 50_000)) for _ in range(8)]
            assert results[0][0] == 0 and results[-1] == (56, -1), f"KAFKA_STORAGE_ERROR once full: {results}"
        acknowledged = sum(1 for error, _ in results if error == 0) + (not first_append_on_full_disk)
        assert all(error == 56 for error, _ in results[results.index((56, -1)):]), "offline after the first"
        read_segment(os.path.join(partition_dir(broker, "full"), FIRST_SEGMENT + ".log"))  # whole batches only

        os.unlink(filler)
        assert produce_raw(broker, "full", record_batch(b"after")) == (56, -1), "offline until a restart"
        assert broker.stop() == 0
        broker.restart()
        assert watermarks(broker, "full") == (0, acknowledged), "the broker stays up; failed appends left nothing"
        assert len(read_confluent(broker, "full", acknowledged)) == acknowledged
        assert produce_raw(broker, "full", record_batch(b"after")) == (0, acknowledged)
        assert read_confluent(broker, "full", acknowledged + 1, start=acknowledged) == {acknowledged: b"after"}


# ---------------------------------------------------------------------- large fetches (sendfile or copy)


# `always` sends large ranges with sendfile; `remote`, the default, copies them for loopback readers.
BOTH_FETCH_PATHS = pytest.mark.parametrize("broker", ["always", "remote"], indirect=True)


@pytest.mark.parametrize(("policy", "host", "expected"), [
    ("remote", "127.0.0.1", False), ("remote", "127.3.4.5", False), ("remote", "::1", False),
    ("remote", "192.0.2.7", True), ("remote", "2001:db8::7", True), ("remote", "?", False),
    ("always", "127.0.0.1", True), ("never", "192.0.2.7", False),
])
def test_sendfile_is_for_readers_off_this_host(policy: str, host: str, expected: bool) -> None:
    assert _uses_sendfile(policy, host) is expected


def _fetch_body(version: int, topic: str, partitions: int, partition_max_bytes: int) -> bytes:
    schema = {11: fetch_v11, 12: fetch_v12}[version]
    wanted = tuple(codec.make(schema.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=0,
                              last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=partition_max_bytes)
                   for p in range(partitions))
    request = codec.make(codec.request_class(FETCH_KEY, version), cluster_id=None, replica_id=-1,
                         max_wait=datetime.timedelta(milliseconds=100), min_bytes=1, max_bytes=50_000_000,
                         isolation_level=0, session_id=0, session_epoch=-1,
                         topics=(codec.make(schema.FetchTopic, topic=topic, partitions=wanted),),
                         forgotten_topics_data=(), rack_id="")
    return b"".join(codec.encode(request))


@BOTH_FETCH_PATHS
def test_large_fetches_send_the_stored_bytes_cut_at_whole_batches(broker: BrokerProcess) -> None:
    """Ranges past SENDFILE_MIN_BYTES, by sendfile or copied, between the response's other bytes:
    pipelined requests, several partitions per response, legacy and flexible encodings."""
    partitions, limit = 3, 300_000
    create_topic(broker, "large-fetch", partitions, **{"segment.bytes": "400000"})
    for partition in range(partitions):
        produce(broker, "large-fetch", [bytes([partition]) * 20_000] * 30, partition=partition)
    versions = (11, 12, 11, 12)
    with RawConnection(broker.bootstrap) as connection:
        for version in versions:  # all sent before any answer is read
            connection.send_frame(connection.header(FETCH_KEY, version)
                                  + _fetch_body(version, "large-fetch", partitions, limit))
        for version in versions:
            frame = connection.read_frame()
            start = 5 if version >= 12 else 4
            response, used = entity_reader(codec.response_class(FETCH_KEY, version))(frame, start)
            assert start + used == len(frame)
            for answer in response.responses[0].partitions:
                on_disk = os.path.join(partition_dir(broker, "large-fetch", answer.partition_index),
                                       FIRST_SEGMENT + ".log")
                stored = read_segment(on_disk)
                whole = max(b.position + b.size for b in stored if b.position + b.size <= limit)
                assert answer.error_code == 0 and 64 * 1024 < len(answer.records) == whole
                with open(on_disk, "rb") as handle:
                    assert answer.records == handle.read(whole), "the stored batches, byte for byte"


@BOTH_FETCH_PATHS
def test_a_reader_that_does_not_read_holds_up_only_its_own_large_fetch(broker: BrokerProcess) -> None:
    """A large answer into a full socket (sendfile's EAGAIN, or the transport's buffer) waits for
    room without blocking the broker."""
    create_topic(broker, "slow-reader")
    produce(broker, "slow-reader", [b"s" * 100_000] * 120)  # 12 MB: more than both socket buffers hold
    body = _fetch_body(12, "slow-reader", 1, 20_000_000)
    with RawConnection(broker.bootstrap) as slow, RawConnection(broker.bootstrap) as other:
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        slow.send_frame(slow.header(FETCH_KEY, 12) + body)  # not read for now
        for _ in range(3):
            answer = other.call_body(FETCH_KEY, 12, body).responses[0].partitions[0]
            assert len(answer.records) > 12_000_000
        frame = slow.read_frame()
        response, _ = entity_reader(codec.response_class(FETCH_KEY, 12))(frame, 5)
        assert response.responses[0].partitions[0].records == answer.records


@BOTH_FETCH_PATHS
def test_readers_hanging_up_mid_sendfile_leak_nothing(broker: BrokerProcess) -> None:
    create_topic(broker, "hang-up")
    produce(broker, "hang-up", [b"h" * 100_000] * 120)
    body = _fetch_body(12, "hang-up", 1, 20_000_000)
    open_files = os.path.join("/proc", str(broker.process.pid), "fd")
    before = len(os.listdir(open_files))
    for _ in range(20):
        reader = RawConnection(broker.bootstrap)
        reader.send_frame(reader.header(FETCH_KEY, 12) + body)
        assert reader.sock.recv(1000), "the 12 MB answer has begun"
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        reader.sock.close()  # a reset in the middle of the answer
    with RawConnection(broker.bootstrap) as other:
        assert len(other.call_body(FETCH_KEY, 12, body).responses[0].partitions[0].records) > 12_000_000
    wait_until(lambda: len(os.listdir(open_files)) <= before, message="descriptors of the dead readers released")


# ---------------------------------------------------------------------- rolling and index density


def test_segments_roll_by_size_and_index_follows_interval(broker: BrokerProcess) -> None:
    create_topic(broker, "by-size", **{"segment.bytes": "4000", "index.interval.bytes": "600"})
    create_topic(broker, "sparse", **{"segment.bytes": "4000", "index.interval.bytes": "100000"})
    values = [b"s" * 100 for _ in range(150)]
    produce(broker, "by-size", values)
    produce(broker, "sparse", values)

    directory = partition_dir(broker, "by-size")
    bases = segment_bases(directory)
    assert len(bases) >= 4, bases
    batches = all_batches(directory)
    assert [b.base_offset for b in batches] == list(range(150))
    for base, next_base in zip(bases, bases[1:], strict=False):
        segment = read_segment(stem(directory, base) + ".log")
        size = os.path.getsize(stem(directory, base) + ".log")
        assert segment[0].base_offset == base and segment[-1].last_offset == next_base - 1
        assert 4000 - segment[0].size < size <= 4000, "rolled only when the next batch would not fit"
        entries = read_offset_index(stem(directory, base) + ".index", base)
        batch_size = segment[0].size
        assert size // (600 + batch_size) <= len(entries) <= size // 600 + 1, (size, len(entries))
    assert_indexes_valid(directory)

    sparse = partition_dir(broker, "sparse")
    for base in segment_bases(sparse):
        assert len(read_offset_index(stem(sparse, base) + ".index", base)) <= 1


def test_segments_roll_by_time(broker: BrokerProcess) -> None:
    create_topic(broker, "by-time", **{"segment.ms": "300"})
    directory = partition_dir(broker, "by-time")
    began = time.monotonic()
    produce(broker, "by-time", [b"first"])

    def rolled() -> bool:
        produce(broker, "by-time", [b"tick"])
        return len(segment_bases(directory)) >= 2

    wait_until(rolled, timeout=10, interval=0.05, message="a time-based roll")
    assert time.monotonic() - began >= 0.2, "not rolled before segment.ms passed"
    first, second = segment_bases(directory)[:2]
    first_batches = read_segment(stem(directory, first) + ".log")
    assert first_batches[-1].last_offset == second - 1
    assert read_segment(stem(directory, second) + ".log")[0].max_timestamp - first_batches[0].max_timestamp > 300


# ---------------------------------------------------------------------- retention


def test_retention_ms_deletes_old_segments_by_largest_timestamp(broker: BrokerProcess) -> None:
    create_topic(broker, "expiring", **{"retention.ms": "600000", "segment.bytes": "1000"})
    old = int(time.time() * 1000) - HOUR_MS
    produce(broker, "expiring", [b"old-%02d" % i + b"o" * 60 for i in range(40)], timestamp=old)
    produce(broker, "expiring", [b"new-%02d" % i + b"n" * 60 for i in range(30)])
    directory = partition_dir(broker, "expiring")

    def old_segments_gone() -> bool:
        try:
            first_batches = read_segment(stem(directory, segment_bases(directory)[0]) + ".log")
        except FileNotFoundError:  # renamed to .deleted between listing and opening
            return False
        return any(b.max_timestamp > old for b in first_batches)

    wait_until(old_segments_gone, timeout=10, message="segments holding only old records deleted")
    first = segment_bases(directory)[0]
    assert 0 < first <= 40, "whole segments go: the one holding old and new records stays"
    assert watermarks(broker, "expiring") == (first, 70)
    wait_until(lambda: checkpointed(broker, "log-start-offset-checkpoint", "expiring") == first,
               message="log start offset checkpointed")

    found = read_confluent(broker, "expiring", 70, start=0, **{"auto.offset.reset": "earliest"})
    assert min(found) == first and max(found) == 69
    _assert_out_of_range_from_zero(broker, "expiring")


def test_broker_level_retention_and_segment_defaults_apply_to_auto_created_topics() -> None:
    config = {**FAST_UPKEEP, "log.retention.minutes": "10", "log.segment.bytes": "1000"}
    with running_broker(config=config) as broker:
        old = int(time.time() * 1000) - HOUR_MS
        produce(broker, "auto-expiring", [b"old-%02d" % i + b"o" * 60 for i in range(30)], timestamp=old)
        directory = partition_dir(broker, "auto-expiring")
        wait_until(lambda: segment_bases(directory) == [30], timeout=10, message="old segments deleted")
        assert watermarks(broker, "auto-expiring") == (30, 30)


def _assert_out_of_range_from_zero(broker: BrokerProcess, topic: str) -> None:
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "storage-oor", "auto.offset.reset": "error", **QUIET,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        message = wait_until(lambda: consumer.poll(0.2), timeout=10, message="an offset-out-of-range error")
    finally:
        consumer.close()
    assert message.error() is not None and message.error().code() == KafkaError._AUTO_OFFSET_RESET
    assert "out of range" in message.error().str().lower()


def test_retention_ms_never_leaves_a_log_without_active_segment(broker: BrokerProcess) -> None:
    create_topic(broker, "all-old", **{"retention.ms": "600000", "segment.bytes": "1000"})
    old = int(time.time() * 1000) - HOUR_MS
    produce(broker, "all-old", [b"old-%02d" % i + b"o" * 60 for i in range(30)], timestamp=old)
    directory = partition_dir(broker, "all-old")
    wait_until(lambda: segment_bases(directory) == [30], timeout=10, message="every old segment deleted")
    assert os.path.getsize(stem(directory, 30) + ".log") == 0
    assert watermarks(broker, "all-old") == (30, 30)
    assert produce(broker, "all-old", [b"fresh"]) == [30]
    assert read_confluent(broker, "all-old", 31, start=30) == {30: b"fresh"}


def test_retention_ms_measures_segments_without_timestamps_by_file_time(broker: BrokerProcess) -> None:
    create_topic(broker, "untimed", **{"retention.ms": "600000", "segment.bytes": "700"})
    create_topic(broker, "timed", **{"retention.ms": "600000", "segment.bytes": "700"})
    for _ in range(20):
        assert produce_raw(broker, "untimed", record_batch(b"u" * 40, timestamp=-1))[0] == 0
    produce(broker, "timed", [b"t" * 40] * 20, timestamp=int(time.time() * 1000) - HOUR_MS)
    wait_until(lambda: segment_bases(partition_dir(broker, "timed"))[0] > 0, timeout=10, message="retention ran")
    assert segment_bases(partition_dir(broker, "untimed"))[0] == 0, "fresh files are not expired"
    assert watermarks(broker, "untimed") == (0, 20)


def test_retention_bytes_keeps_the_log_under_the_limit(broker: BrokerProcess) -> None:
    create_topic(broker, "bounded", **{"retention.bytes": "3000", "segment.bytes": "1000"})
    produce(broker, "bounded", [b"b" * 100 for _ in range(100)])
    directory = partition_dir(broker, "bounded")
    wait_until(lambda: log_size(directory) <= 3000 + 1000, timeout=10, message="log trimmed to retention.bytes")
    bases = segment_bases(directory)
    assert bases[0] > 0
    assert log_size(directory) - os.path.getsize(stem(directory, bases[0]) + ".log") < 3000, (
        "no more segments deleted than needed"
    )
    assert watermarks(broker, "bounded") == (bases[0], 100)
    found = read_confluent(broker, "bounded", 100, start=0, **{"auto.offset.reset": "earliest"})
    assert sorted(found) == list(range(bases[0], 100))
    _assert_out_of_range_from_zero(broker, "bounded")


def test_delete_records_advances_the_log_start_offset_across_restarts(broker: BrokerProcess) -> None:
    create_topic(broker, "trimmed", **{"segment.bytes": "700"})
    produce(broker, "trimmed", [b"trim-%02d" % i + b"t" * 40 for i in range(40)])
    directory = partition_dir(broker, "trimmed")
    bases = segment_bases(directory)
    cut = bases[2] + 2  # inside the third segment
    assert delete_records(broker, "trimmed", cut) == cut
    assert watermarks(broker, "trimmed") == (cut, 40)
    wait_until(lambda: segment_bases(directory)[0] == bases[2], timeout=10, message="segments below the start deleted")
    wait_until(lambda: checkpointed(broker, "log-start-offset-checkpoint", "trimmed") == cut,
               message="log start offset checkpointed")
    found = read_confluent(broker, "trimmed", 40, start=0, **{"auto.offset.reset": "earliest"})
    assert min(found) == cut, "a record below the log start offset is never served"
    _assert_out_of_range_from_zero(broker, "trimmed")

    broker.kill()
    broker.restart()
    assert watermarks(broker, "trimmed") == (cut, 40)
    assert min(read_confluent(broker, "trimmed", 40, start=cut)) == cut


# ---------------------------------------------------------------------- flushing


@pytest.mark.parametrize("policy", [{"flush.ms": "100"}, {"flush.messages": "5"}], ids=["flush.ms", "flush.messages"])
def test_flush_policy_advances_the_recovery_point(broker: BrokerProcess, policy: dict[str, str]) -> None:
    create_topic(broker, "flushed", **policy)
    create_topic(broker, "unflushed")
    produce(broker, "flushed", [b"f"] * 20)
    produce(broker, "unflushed", [b"u"] * 20)
    wait_until(lambda: checkpointed(broker, "recovery-point-offset-checkpoint", "flushed") == 20,
               timeout=10, message="recovery point of the flushed topic at its log end")
    assert checkpointed(broker, "recovery-point-offset-checkpoint", "unflushed") == 0, (
        "without a flush policy the data stays in the page cache until shutdown"
    )


# ---------------------------------------------------------------------- start-up time


def start_cpu_s(broker: BrokerProcess) -> float:
    """The CPU seconds (user + system) the broker process has used, read as soon as it serves:
    what its start cost."""
    assert broker.process is not None
    with open(f"/proc/{broker.process.pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()  # after the command name: state is field 3
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15


def test_start_up_is_fast_empty_and_with_fifty_partitions(broker: BrokerProcess) -> None:
    """Loading 50 small logs adds little to a start, clean or after SIGKILL. Measured in the
    broker's CPU seconds until it serves, not wall time: at load ~15 a clean start took 2.6 s of
    wall time against 0.7 s empty, the CPU waiting on other work. (Wall time under a second is
    test_smoke's; bench/log_load_bench.py measures large logs.)"""
    broker.stop()
    broker.restart()
    before = start_cpu_s(broker)  # this module's other topics only
    create_topic(broker, "wide", partitions=50)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **QUIET})
    for i in range(20000):
        producer.produce("wide", value=b"w" * 100, partition=i % 50)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0

    assert broker.stop() == 0
    broker.restart()
    clean = start_cpu_s(broker)
    broker.kill()
    broker.restart()
    recovered = start_cpu_s(broker)
    print(f"\nstart-up CPU: before {before:.3f}s; 50 partitions x 400 records: "
          f"clean {clean:.3f}s, after kill -9 {recovered:.3f}s")
    assert clean < before + 1.0 and recovered < before + 2.0, "loading 50 small logs costs under a second or two"
    assert sum(watermarks(broker, "wide", p)[1] for p in (0, 25, 49)) == 3 * 400
