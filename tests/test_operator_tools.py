"""The operator tools against real brokers and real clients: `logbus dump-log` on segments a broker
wrote, `configs`, `log-dirs`, `producer-perf`/`consumer-perf`, and `serve`'s log format and levels.

Every tool runs as a subprocess (`python -m logbus ...`), as an operator runs it; expectations come
from the clients (what confluent-kafka produced and reads back) and from the files' bytes.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from helpers import QUIET, RawConnection, wait_until
from test_tls import tls_config

from logbus.cli.perf import ProducerStats, percentiles
from logbus.cli.serve import log_levels as serve_log_levels
from logbus.config import BrokerConfig, ConfigError
from logbus.logging_config import COMPONENTS, RecurringRecordFilter, configure_logging
from logbus.protocol.records import TRANSACTIONAL_BIT, build_batch, read_header
from logbus.storage.producer_state import ProducerStateManager
from logbus.testing import BrokerProcess, running_broker

CLI_TIMEOUT_S = 60
BATCH_LINE = re.compile(
    r"baseOffset: (?P<baseOffset>-?\d+) lastOffset: (?P<lastOffset>-?\d+) count: (?P<count>\d+) "
    r"baseSequence: (?P<baseSequence>-?\d+) lastSequence: (?P<lastSequence>-?\d+) producerId: (?P<producerId>-?\d+) "
    r"producerEpoch: (?P<producerEpoch>-?\d+) partitionLeaderEpoch: (?P<partitionLeaderEpoch>-?\d+) "
    r"isTransactional: (?P<isTransactional>true|false) isControl: (?P<isControl>true|false) "
    r"deleteHorizonMs: OptionalLong.empty position: (?P<position>\d+) CreateTime: (?P<CreateTime>-?\d+) "
    r"size: (?P<size>\d+) magic: 2 compresscodec: (?P<compresscodec>\w+) crc: (?P<crc>\d+) "
    r"isvalid: (?P<isvalid>true|false)$"
)
RECORD_LINE = re.compile(
    r"\| offset: (?P<offset>\d+) CreateTime: (?P<timestamp>-?\d+) keySize: (?P<keySize>-?\d+) "
    r"valueSize: (?P<valueSize>-?\d+) sequence: (?P<sequence>-?\d+) headerKeys: \[(?P<headerKeys>[^\]]*)\]"
    r"(?: endTxnMarker: (?P<marker>COMMIT|ABORT) coordinatorEpoch: (?P<coordinatorEpoch>\d+))?"
    r"(?: key: (?P<key>\S*))?(?: payload: (?P<payload>\S*))?$"
)
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def logbus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logbus", *args], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)


def succeeded(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    return result.stdout


def failed_cleanly(result: subprocess.CompletedProcess[str]) -> str:
    """A failure reported in words: exit 1 and no traceback."""
    assert result.returncode == 1, f"exit {result.returncode}: {result.stdout}{result.stderr}"
    assert "Traceback" not in result.stderr + result.stdout
    return result.stderr


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker({"group.initial.rebalance.delay.ms": "0", "transaction.state.log.num.partitions": "1",
                         "offsets.topic.num.partitions": "1"}) as started:
        yield started


def new_topic(bootstrap: str, partitions: int = 1, **config: str) -> str:
    name = f"ops-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(15)
    return name


def segment(broker: BrokerProcess, topic: str, partition: int = 0) -> str:
    return os.path.join(broker.data_dir, f"{topic}-{partition}", "00000000000000000000.log")


# ---------------------------------------------------------------- dump-log


def produce_every_kind(bootstrap: str, topic: str) -> None:
    """Plain, compressed (each codec), idempotent and transactional batches (a commit, then an abort).
    Values compress well: librdkafka sends a batch uncompressed when compressing would not shrink it."""
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50,
                             "enable.idempotence": codec == "zstd", **QUIET})
        for i in range(3):
            producer.produce(topic, key=f"{codec}-{i}".encode(), value=f"value-{codec}-{i}-{'x' * 300}".encode(),
                             headers=[("h1", b"x"), ("h2", None)] if i == 0 else None)
        assert producer.flush(15) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}", **QUIET})
    txn.init_transactions(15)
    for outcome in ("committed", "aborted"):
        txn.begin_transaction()
        txn.produce(topic, key=b"t", value=outcome.encode())
        assert txn.flush(15) == 0
        if outcome == "committed":
            txn.commit_transaction(15)
        else:
            txn.abort_transaction(15)


def read_all(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ops-reader", "enable.auto.commit": False,
                         "isolation.level": isolation, **QUIET})
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list[Any] = []
    try:
        wait_until(lambda: records.extend(m for m in consumer.consume(100, 0.5) if m.error() is None)
                   or len(records) >= 17, timeout=20, message="every record read back")
    finally:
        consumer.close()
    return records


def parse_dump(stdout: str) -> list[tuple[dict[str, str], list[dict[str, str]]]]:
    """(batch fields, its records' fields) per batch line of a dump; every line must parse."""
    batches: list[tuple[dict[str, str], list[dict[str, str]]]] = []
    for line in stdout.splitlines()[2:]:
        if line.startswith("|"):
            match = RECORD_LINE.match(line)
            assert match, line
            batches[-1][1].append(match.groupdict())
        else:
            match = BATCH_LINE.match(line)
            assert match, line
            batches.append((match.groupdict(), []))
    return batches


def test_dump_log_agrees_with_the_batches_and_records_a_broker_wrote(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    produce_every_kind(broker.bootstrap, topic)
    path = segment(broker, topic)
    stdout = succeeded(logbus("dump-log", path, "--print-data"))
    assert stdout.splitlines()[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    batches = parse_dump(stdout)
    raw = Path(path).read_bytes()
    position = 0
    for fields, records in batches:  # the header fields against the bytes of the file
        (base_offset, length, leader_epoch, magic, crc, attributes, last_delta, _base_ts, max_ts, pid, epoch,
         base_seq, count) = struct.unpack_from(">qiibIhiqqqhii", raw, position)
        assert int(fields["position"]) == position and int(fields["size"]) == length + 12
        assert (int(fields["baseOffset"]), int(fields["lastOffset"]), int(fields["count"])) == (
            base_offset, base_offset + last_delta, count)
        assert (int(fields["producerId"]), int(fields["producerEpoch"]), int(fields["baseSequence"])) == (
            pid, epoch, base_seq)
        assert int(fields["partitionLeaderEpoch"]) == leader_epoch and magic == 2
        assert int(fields["crc"]) == crc == crc32c.crc32c(raw[position + 21 : position + length + 12])
        assert fields["isvalid"] == "true" and int(fields["CreateTime"]) == max_ts
        assert fields["compresscodec"] == CODECS[attributes & 7]
        assert fields["isTransactional"] == str(bool(attributes & 0x10)).lower()
        assert fields["isControl"] == str(bool(attributes & 0x20)).lower()
        assert [int(r["offset"]) for r in records] == list(range(base_offset, base_offset + count))
        position += length + 12
    assert position == len(raw)
    assert {fields["compresscodec"] for fields, _ in batches} == {"none", "gzip", "snappy", "lz4", "zstd"}
    idempotent = [(fields, records) for fields, records in batches if fields["compresscodec"] == "zstd"]
    assert len({fields["producerId"] for fields, _ in idempotent}) == 1 and int(idempotent[0][0]["producerId"]) >= 0
    assert (idempotent[0][0]["baseSequence"], idempotent[-1][0]["lastSequence"]) == ("0", "2")
    assert [record["sequence"] for _, records in idempotent for record in records] == ["0", "1", "2"]

    data = [record for fields, records in batches if fields["isControl"] == "false" for record in records]
    consumed = read_all(broker.bootstrap, topic)
    assert len(data) == len(consumed) == 17
    for record, message in zip(data, consumed, strict=True):  # field for field, as the client reads them
        assert int(record["offset"]) == message.offset()
        assert int(record["timestamp"]) == message.timestamp()[1]
        assert record["key"] == message.key().decode() and record["payload"] == message.value().decode()
        assert int(record["keySize"]) == len(message.key()) and int(record["valueSize"]) == len(message.value())
        assert record["headerKeys"] == ",".join(name for name, _ in message.headers() or [])
    markers = [(records[0]["marker"], fields["producerId"]) for fields, records in batches
               if fields["isControl"] == "true"]
    txn_pid = batches[-1][0]["producerId"]
    assert markers == [("COMMIT", txn_pid), ("ABORT", txn_pid)]
    aborted_offset = int(batches[-2][1][0]["offset"])
    marker_offset = int(batches[-1][0]["baseOffset"])
    assert succeeded(logbus("dump-log", path.replace(".log", ".txnindex"))).splitlines()[1] == (
        f"version: 0 producerId: {txn_pid} firstOffset: {aborted_offset} lastOffset: {marker_offset} "
        f"lastStableOffset: {marker_offset + 1}")
    without_data = succeeded(logbus("dump-log", path))
    assert "|" not in without_data and len(without_data.splitlines()) == len(batches) + 2


def produce_one_by_one(bootstrap: str, topic: str, count: int, size: int) -> None:
    """`count` batches of one record each, with timestamps 10 ms apart (each a new time index entry)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **QUIET})
    first = int(time.time() * 1000) - 60_000
    for i in range(count):
        producer.produce(topic, value=b"v" * size, timestamp=first + 10 * i)
        assert producer.flush(15) == 0


def copy_segment(broker: BrokerProcess, topic: str, into: Path) -> Path:
    for path in glob.glob(segment(broker, topic).replace(".log", ".*")):
        shutil.copy(path, into)
    return into / "00000000000000000000.log"


def test_dump_log_reports_a_truncated_or_corrupt_segment(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = new_topic(broker.bootstrap)
    produce_one_by_one(broker.bootstrap, topic, 3, 100)  # three batches of one size
    path = copy_segment(broker, topic, tmp_path)
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size - 10)
    stderr = failed_cleanly(logbus("dump-log", str(path), "--print-data"))
    assert "Damaged segment" in stderr
    result = logbus("dump-log", str(path))
    third = size // 3
    assert f"Found {size - 10 - 2 * third} invalid bytes at the end of {path.name}" in result.stdout
    assert result.stdout.count("baseOffset:") == 2

    with open(path, "r+b") as handle:  # one byte of the first batch's records
        handle.seek(70)
        byte = handle.read(1)
        handle.seek(70)
        handle.write(bytes([byte[0] ^ 0xFF]))
    result = logbus("dump-log", str(path))
    failed_cleanly(result)
    assert "isvalid: false" in result.stdout.splitlines()[2] and "CRC mismatch" in result.stderr

    too_big = failed_cleanly(logbus("dump-log", str(path), "--max-message-size", "100"))
    assert f"a batch of {third} bytes at position 0, more than --max-message-size 100" in too_big

    garbage = tmp_path / "00000000000000000100.log"
    garbage.write_bytes(struct.pack(">qi", 100, 2**31 - 1) + b"\x02" * 100)
    assert "out of bounds" in failed_cleanly(logbus("dump-log", str(garbage)))
    (tmp_path / "00000000000000000200.snapshot").write_text("{not json")
    assert "Damaged snapshot" in failed_cleanly(logbus("dump-log", str(tmp_path / "00000000000000000200.snapshot")))


def test_verify_index_finds_a_planted_index_mismatch(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = new_topic(broker.bootstrap, **{"index.interval.bytes": "100"})
    produce_one_by_one(broker.bootstrap, topic, 6, 150)
    path = copy_segment(broker, topic, tmp_path)
    index, time_index = path.with_suffix(".index"), path.with_suffix(".timeindex")
    assert index.stat().st_size >= 3 * 8, "an entry per batch"
    clean = logbus("dump-log", str(path), "--verify-index")
    assert clean.returncode == 0 and clean.stderr == "", clean.stderr
    listed = succeeded(logbus("dump-log", str(index))).splitlines()[1:]
    assert listed[:2] == ["offset: 0 position: 0", f"offset: 1 position: {path.stat().st_size // 6}"]

    raw = bytearray(index.read_bytes())
    struct.pack_into(">I", raw, 8, 2)  # the second entry names offset 2 at the second batch (offset 1)
    index.write_bytes(bytes(raw))
    stderr = failed_cleanly(logbus("dump-log", str(index), "--verify-index"))
    assert f"Mismatches in :{index}\n  Index offset: 2, log offset: 1\n" in stderr
    assert "Index offset: 2, log offset: 1" in failed_cleanly(logbus("dump-log", str(path), "--verify-index"))

    raw = bytearray(time_index.read_bytes())
    timestamp, _ = struct.unpack_from(">qI", raw, 12)
    struct.pack_into(">q", raw, 12, timestamp + 5)
    time_index.write_bytes(bytes(raw))
    stderr = failed_cleanly(logbus("dump-log", str(time_index), "--verify-index"))
    assert f"Found timestamp mismatch in :{time_index}\n  Index timestamp: {timestamp + 5}, " \
           f"log timestamp: {timestamp}\n" in stderr


def test_dump_log_prints_a_producer_state_snapshot_in_kafkas_words(tmp_path: Path) -> None:
    state = ProducerStateManager(str(tmp_path))
    batch = build_batch([(b"k", b"v")] * 3, 1000, base_offset=10, producer_id=7, producer_epoch=2,
                        base_sequence=5, attributes=TRANSACTIONAL_BIT)
    state.update(read_header(batch))
    state.write_snapshot(13)
    assert succeeded(logbus("dump-log", str(tmp_path / "00000000000000000013.snapshot"))).splitlines()[1] == (
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong[10] "
        "lastTimestamp: 1000 firstSequence: 5 lastSequence: 7 lastOffset: 12 offsetDelta: 2 timestamp: 1000")


# ---------------------------------------------------------------- configs and log-dirs


def configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return logbus("configs", "--bootstrap-server", broker.bootstrap, *args)


def test_configs_alter_and_describe_a_groups_configs(broker: BrokerProcess) -> None:
    entity = ("--entity-type", "groups", "--entity-name", "cli-group")
    assert succeeded(configs(broker, "alter", *entity, "--add-config", "consumer.session.timeout.ms=50000")) == (
        "Completed updating config for group cli-group.\n")
    assert succeeded(configs(broker, "describe", *entity)).splitlines() == [
        "Dynamic configs for group cli-group are:",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}",
    ]
    refused = failed_cleanly(configs(broker, "alter", *entity, "--add-config", "consumer.session.timeout.ms=1"))
    assert refused == ("logbus: group 'cli-group': consumer.session.timeout.ms must be greater than or equal to "
                       "group.consumer.min.session.timeout.ms\n")
    unnamed = configs(broker, "describe", "--entity-type", "groups")
    assert (unnamed.returncode, unnamed.stderr) == (2, "logbus: --entity-name is required for groups\n")


def test_configs_alter_and_describe_round_trip_as_kafka_configs_prints_them(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    entity = ("--entity-type", "topics", "--entity-name", topic)
    assert succeeded(configs(broker, "alter", *entity, "--add-config", "retention.ms=123456,cleanup.policy=[compact,"
                             "delete]")) == f"Completed updating config for topic {topic}.\n"
    assert succeeded(configs(broker, "describe", *entity)).splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,"
        "delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=123456 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=123456}",
    ]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    assert admin.describe_configs([resource])[resource].result(15)["retention.ms"].value == "123456"

    succeeded(configs(broker, "alter", *entity, "--delete-config", "retention.ms"))
    assert admin.describe_configs([resource])[resource].result(15)["retention.ms"].value == "604800000"
    every = succeeded(configs(broker, "describe", *entity, "--all")).splitlines()
    assert every[0] == f"All configs for topic {topic} are:"
    assert "  retention.ms=604800000 sensitive=false synonyms={}" in every  # Kafka drops the hours synonym
    assert every[1:] == sorted(every[1:]) and len(every) > 30

    broker_lines = succeeded(configs(broker, "describe", "--entity-type", "brokers", "--entity-name", "0", "--all"))
    assert "  group.initial.rebalance.delay.ms=0 sensitive=false synonyms={" in broker_lines
    assert succeeded(configs(broker, "describe", "--entity-type", "brokers", "--entity-default")) == (
        "Default configs for brokers in the cluster are:\n")
    every_broker = logbus("configs", "describe", "--entity-type", "brokers", "--bootstrap-server", broker.bootstrap)
    assert succeeded(every_broker) == "Dynamic configs for broker 0 are:\n"  # static configs only
    refused = failed_cleanly(configs(broker, "alter", "--entity-type", "brokers", "--entity-default",
                                     "--add-config", "log.retention.hours=5"))
    assert refused.startswith("logbus: the broker default: Cannot update") and refused.count("\n") == 1
    succeeded(configs(broker, "alter", "--entity-type", "brokers", "--entity-default",
                      "--add-config", "log.cleaner.backoff.ms=20000"))
    assert succeeded(configs(broker, "describe", "--entity-type", "brokers", "--entity-default")) == (
        "Default configs for brokers in the cluster are:\n  log.cleaner.backoff.ms=20000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=20000}\n")
    succeeded(configs(broker, "alter", "--entity-type", "brokers", "--entity-default",
                      "--delete-config", "log.cleaner.backoff.ms"))
    assert "does not exist" in failed_cleanly(configs(broker, "describe", "--entity-type", "topics",
                                                      "--entity-name", "no-such-topic"))


def test_log_dirs_json_parses_and_sizes_match_the_files(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
    for i in range(20):
        producer.produce(topic, value=b"x" * 100, partition=i % 2)
    assert producer.flush(15) == 0
    lines = succeeded(logbus("log-dirs", "describe", "--bootstrap-server", broker.bootstrap, "--topic-list", topic,
                             "--broker-list", "0")).splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 0"]
    document = json.loads(lines[2])
    assert document["version"] == 1 and [b["broker"] for b in document["brokers"]] == [0]
    (log_dir,) = document["brokers"][0]["logDirs"]
    assert log_dir["logDir"] == os.path.abspath(broker.data_dir) and log_dir["error"] is None
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert sizes == {f"{topic}-{p}": sum(os.path.getsize(f) for f in glob.glob(
        os.path.join(broker.data_dir, f"{topic}-{p}", "*.log"))) for p in (0, 1)}
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in log_dir["partitions"])
    assert "do not exist from --broker-list: 7" in failed_cleanly(
        logbus("log-dirs", "describe", "--bootstrap-server", broker.bootstrap, "--broker-list", "7"))


# ---------------------------------------------------------------- perf tools

PRODUCER_TOTAL = re.compile(
    r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, "
    r"\d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$"
)
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"


def test_producer_perf_and_consumer_perf_print_kafkas_lines(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    sent = succeeded(logbus("producer-perf", "--topic", topic, "--num-records", "300", "--record-size", "50",
                            "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}",
                            "acks=all", "linger.ms=5"))
    match = PRODUCER_TOTAL.match(sent.splitlines()[-1])
    assert match and match.group(1) == "300", sent
    consumed = succeeded(logbus("consumer-perf", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                                "--messages", "300", "--group", f"perf-{topic}", "--timeout", "15000"))
    header, row = consumed.splitlines()
    assert header == CONSUMER_HEADER
    cells = row.split(", ")
    assert re.fullmatch(DATE, cells[0]) and re.fullmatch(DATE, cells[1]) and len(cells) == 10
    assert cells[2] == f"{300 * 50 / 1024 / 1024:.4f}" and cells[4] == "300"
    assert int(cells[6]) >= 0 and int(cells[7]) >= 0

    throttled = succeeded(logbus("producer-perf", "--topic", topic, "--num-records", "40", "--record-size", "10",
                                 "--throughput", "100", "--bootstrap-server", broker.bootstrap))
    rate = float(throttled.split(" records/sec")[0].split()[-1])
    assert rate <= 110, "--throughput bounds the rate"
    short = logbus("consumer-perf", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--messages", "400",
                   "--timeout", "1000", "--hide-header")
    assert short.returncode == 0 and "WARNING: Exiting before consuming the expected number of messages" in short.stderr
    assert short.stdout.split(", ")[4] == "340"
    transactional = new_topic(broker.bootstrap)
    sent = succeeded(logbus("producer-perf", "--topic", transactional, "--num-records", "200", "--record-size", "10",
                            "--throughput", "1000", "--bootstrap-server", broker.bootstrap,
                            "--transactional-id", f"perf-{transactional}", "--transaction-duration-ms", "50"))
    assert PRODUCER_TOTAL.match(sent.splitlines()[-1])
    batches = parse_dump(succeeded(logbus("dump-log", segment(broker, transactional), "--deep-iteration")))
    commits = [records[0]["marker"] for fields, records in batches if fields["isControl"] == "true"]
    assert len(commits) >= 2 and set(commits) == {"COMMIT"}, "a transaction per 50 ms, each committed"
    data = [fields for fields, _ in batches if fields["isControl"] == "false"]
    assert sum(int(fields["count"]) for fields in data) == 200
    assert all(fields["isTransactional"] == "true" for fields in data)
    missing = logbus("consumer-perf", "--bootstrap-server", broker.bootstrap, "--topic", "no-such-topic",
                     "--messages", "1")
    assert failed_cleanly(missing) == "logbus: topic 'no-such-topic' does not exist\n"


# ---------------------------------------------------------------- serve's log lines


def bad_connection_closed(broker: BrokerProcess) -> None:
    """A frame with a negative size: the broker closes the connection (after logging it)."""
    with RawConnection(broker.bootstrap) as connection:
        connection.sock.sendall(struct.pack(">i", -5))
        assert connection.closed_by_broker()


def test_json_log_lines_and_per_component_levels() -> None:
    config = {"log.format": "json", "log.level": "error", "log.level.broker": "debug",
              "connections.max.idle.ms": "1000"}
    with running_broker(config) as broker:
        with RawConnection(broker.bootstrap) as idle:
            assert idle.closed_by_broker(), "closed as idle"
        bad_connection_closed(broker)
        lines = [json.loads(line) for line in broker.read_log().splitlines()]  # every line is one JSON object
    assert all(set(line) >= {"time", "level", "logger", "message"} for line in lines)
    idle_lines = [line for line in lines if "idle over connections.max.idle.ms" in line["message"]]
    assert idle_lines and idle_lines[0]["level"] == "DEBUG" and idle_lines[0]["logger"] == "logbus.broker.server"
    refused = [line for line in lines if line["level"] == "WARNING"]
    assert len(refused) == 1 and refused[0]["message"].startswith("closing connection from 127.0.0.1")
    assert "exception" not in refused[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", refused[0]["time"])

    with running_broker({"log.level.broker": "error"}) as quiet:
        bad_connection_closed(quiet)
        assert "closing connection" not in quiet.read_log()


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """Logging as it was before the test (configure_logging changes the process's root logger)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    components = {name: logging.getLogger(f"logbus.{name}").level for name in COMPONENTS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, component_level in components.items():
        logging.getLogger(f"logbus.{name}").setLevel(component_level)


@pytest.mark.parametrize("component", COMPONENTS)
def test_each_component_level_key_sets_its_loggers(component: str, restored_logging: None) -> None:
    config = BrokerConfig({"log.level": "WARN", f"log.level.{component}": "debug"})
    configure_logging("text", serve_log_levels(config))
    assert logging.getLogger(f"logbus.{component}.some_module").isEnabledFor(logging.DEBUG)
    others = [name for name in COMPONENTS if name != component]
    assert not logging.getLogger(f"logbus.{others[0]}.some_module").isEnabledFor(logging.INFO)
    assert logging.getLogger("logbus").isEnabledFor(logging.WARNING)
    with pytest.raises(ConfigError, match="not a log level"):
        BrokerConfig({f"log.level.{component}": "loud"})


def test_a_failed_tls_handshake_is_one_json_line(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "logbus", "certs", "--out", str(tmp_path)], check=True,
                   capture_output=True, timeout=60)
    with running_broker(tls_config(tmp_path, **{"log.format": "json"})) as broker:
        with RawConnection(f"127.0.0.1:{broker.ports['SSL']}") as garbage:
            garbage.sock.sendall(b"\x00\x00\x00\x10 not a TLS record at all")
            assert garbage.closed_by_broker()
        wait_until(lambda: "closing a new SSL connection" in broker.read_log(), message="the handshake's line")
        lines = [json.loads(line) for line in broker.read_log().splitlines()]
    failures = [line for line in lines if "closing" in line["message"]]
    assert len(failures) == 1 and "exception" not in failures[0], failures
    assert all("Traceback" not in line["message"] for line in lines)


def test_perf_windows_and_percentiles_are_kafkas() -> None:
    stats = ProducerStats(num_records=4, start=100.0, window_start=100.0)
    for iteration, latency in enumerate((4, 1, 3, 2)):
        stats.record(iteration, latency, 1024 * 1024, now=101.0)
    assert stats.window_line(102.0) == (
        "4 records sent, 2.0 records/sec (2.00 MB/sec), 2.5 ms avg latency, 4.0 ms max latency.")
    assert stats.total_line(102.0) == (
        "4 records sent, 2.000000 records/sec (2.00 MB/sec), 2.50 ms avg latency, 4.00 ms max latency, "
        "3 ms 50th, 4 ms 95th, 4 ms 99th, 4 ms 99.9th.")
    assert percentiles([], (0.5,)) == [0]


def test_recurring_library_lines_pass_once_per_interval_and_count_the_rest() -> None:
    now = [0.0]
    quiet = RecurringRecordFilter(prefix="kazoo", interval_s=10.0, clock=lambda: now[0])

    def record(name: str, msg: str) -> logging.LogRecord:
        return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, ("x",), None)

    passed = [quiet.filter(record("kazoo.client", "Connection dropped: %s")) for _ in range(5)]
    assert passed == [True, False, False, False, False]
    assert quiet.filter(record("kazoo.client", "Connecting to %s")), "another template has its own interval"
    assert quiet.filter(record("logbus.cluster", "Connection dropped: %s")), "other loggers are left alone"
    now[0] = 10.0
    later = record("kazoo.client", "Connection dropped: %s")
    assert quiet.filter(later)
    assert later.getMessage() == "Connection dropped: x (4 more like it left out)"
