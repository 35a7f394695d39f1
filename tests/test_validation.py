"""Produce validation against a real broker: every rule of Kafka's LogValidator that logbus
applies answers its error code (with per-record `record_errors` where Kafka gives them), takes no
offset, and leaves the partition serving the next good batch."""

from __future__ import annotations

import datetime
import itertools
import os
import random
import string
import struct
import time
from collections.abc import Iterator
from typing import Any

import cramjam
import crc32c
import pytest
from confluent_kafka import Producer
from helpers import (
    CREATE_TOPICS,
    FETCH,
    LIST_OFFSETS,
    PRODUCE,
    QUIET,
    RawConnection,
    consume_partition,
    raw_request,
    wait_until,
)
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions_v3
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.produce.v6 import request as produce_v6
from kio.schema.produce.v9 import request as produce_v9

from logbus.protocol import codec
from logbus.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
    CONTROL_BIT,
    HEADER_SIZE,
    TRANSACTIONAL_BIT,
    build_batch,
    compress,
    iter_headers,
)
from logbus.testing import BrokerProcess, running_broker

NONE, CORRUPT_MESSAGE, INVALID_TOPIC_EXCEPTION, INVALID_TIMESTAMP = 0, 2, 17, 32
INVALID_TXN_STATE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, UNSUPPORTED_COMPRESSION_TYPE = 48, 53, 76
INVALID_RECORD, MESSAGE_TOO_LARGE = 87, 10
FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN = 10, 22, 24
HOUR_MS = 3_600_000
_HEADER = struct.Struct(">qiibIhiqqqhii")
_FIELDS = ("base_offset", "batch_length", "leader_epoch", "magic", "crc", "attributes", "last_offset_delta",
           "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count")
_topic_numbers = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config={"auto.create.topics.enable": "false"}) as started:
        yield started


def now_ms() -> int:
    return int(time.time() * 1000)


def new_topic(bootstrap: str, **configs: str) -> str:
    name = f"valid-{next(_topic_numbers)}-{os.getpid()}"
    topic = create_topics_v7.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=(),
        configs=tuple(create_topics_v7.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
    )
    response = raw_request(bootstrap, CREATE_TOPICS, 7, topics=(topic,),
                           timeout=datetime.timedelta(seconds=10), validate_only=False)
    assert response.topics[0].error_code == NONE, response.topics[0].error_message
    return name


def batch(*values: bytes, keys: tuple[bytes | None, ...] | None = None, timestamp: int | None = None) -> bytes:
    pairs = list(zip(keys or (None,) * len(values), values, strict=True))
    return build_batch(pairs, now_ms() if timestamp is None else timestamp)


def patched(data: bytes, **fields: int) -> bytes:
    """`data` (one batch) with header fields replaced and the CRC made valid again."""
    values = dict(zip(_FIELDS, _HEADER.unpack_from(data), strict=True))
    values.update(fields)
    out = bytearray(data)
    _HEADER.pack_into(out, 0, *(values[name] for name in _FIELDS))
    if "crc" not in fields:
        struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def compressed(data: bytes, codec: int, body: bytes | None = None) -> bytes:
    """`data` (one uncompressed batch) with its records section compressed (or replaced by `body`)."""
    records = compress(codec, data[HEADER_SIZE:]) if body is None else body
    out = data[:HEADER_SIZE] + records
    attributes = _HEADER.unpack_from(data)[5] | codec
    return patched(out, batch_length=len(out) - 12, attributes=attributes)


def produce(bootstrap: str, topic: str, records: bytes, transactional_id: str | None = None,
            version: int = 9) -> Any:
    """One Produce (acks=-1) of `records`; the partition's response."""
    schema = {9: produce_v9, 6: produce_v6}[version]
    request = schema.ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=10),
        topic_data=(schema.TopicProduceData(
            name=topic, partition_data=(schema.PartitionProduceData(index=0, records=records),)),),
    )
    with RawConnection(bootstrap) as connection:
        response = connection.call_body(PRODUCE, version, b"".join(codec.encode(request)))
    return response.responses[0].partition_responses[0]


def assert_refused(bootstrap: str, topic: str, records: bytes, code: int, **kw: Any) -> Any:
    """`records` is refused with `code`, and a good batch afterwards still gets offset 0."""
    result = produce(bootstrap, topic, records, **kw)
    assert (result.error_code, result.base_offset) == (code, -1), result.error_message
    good = produce(bootstrap, topic, batch(b"good"))
    assert (good.error_code, good.base_offset) == (NONE, 0), "the refused batch took no offset"
    return result


# ------------------------------------------------------------------------ the batch header


def test_record_count_not_matching_the_offset_range_is_invalid_record(broker: BrokerProcess) -> None:
    """The fuzz find of issue 11: last_offset_delta 2^31-1 with one record overflowed the index."""
    topic = new_topic(broker.bootstrap)
    lying = patched(batch(b"x"), last_offset_delta=(1 << 31) - 1)
    result = assert_refused(broker.bootstrap, topic, lying, INVALID_RECORD)
    assert "record count" in result.error_message
    for fields in ({"record_count": 0, "last_offset_delta": -1}, {"record_count": 2}, {"last_offset_delta": -5}):
        assert produce(broker.bootstrap, topic, patched(batch(b"y"), **fields)).error_code == INVALID_RECORD


def test_old_magic_is_invalid_record(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    assert_refused(broker.bootstrap, topic, patched(batch(b"x"), magic=1), INVALID_RECORD)


def test_two_batches_in_one_partition_are_invalid_record(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    assert_refused(broker.bootstrap, topic, batch(b"a") + batch(b"b"), INVALID_RECORD)


def test_control_batch_from_a_client_is_invalid_record(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    control = patched(batch(b"x"), attributes=CONTROL_BIT, producer_id=7, producer_epoch=0, base_sequence=0)
    result = assert_refused(broker.bootstrap, topic, control, INVALID_RECORD)
    assert "control" in result.error_message


@pytest.mark.parametrize("fields", [
    {"producer_id": 5, "producer_epoch": 0, "base_sequence": -1},
    {"producer_id": -7},
], ids=["producer-id-without-sequence", "negative-producer-id"])
def test_inconsistent_producer_fields_are_invalid_record(broker: BrokerProcess, fields: dict[str, int]) -> None:
    topic = new_topic(broker.bootstrap)
    assert_refused(broker.bootstrap, topic, patched(batch(b"x"), **fields), INVALID_RECORD)


def test_a_transactional_batch_needs_its_partition_in_the_open_transaction(broker: BrokerProcess) -> None:
    """KIP-890's verification (transaction.partition.verification.enable, on by default)."""
    topic = new_topic(broker.bootstrap)
    producer_id, epoch = init_transactional_producer(broker.bootstrap, "validated")
    transactional = patched(batch(b"x"), attributes=TRANSACTIONAL_BIT, producer_id=producer_id,
                            producer_epoch=epoch, base_sequence=0)
    assert_refused(broker.bootstrap, topic, transactional, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    result = produce(broker.bootstrap, topic, transactional, transactional_id="validated")
    assert (result.error_code, result.base_offset) == (INVALID_TXN_STATE, -1)
    added = raw_request(broker.bootstrap, ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="validated",
                        v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
                        v3_and_below_topics=(add_partitions_v3.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),))
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == NONE
    result = produce(broker.bootstrap, topic, transactional, transactional_id="validated")
    assert (result.error_code, result.base_offset) == (NONE, 1)


def test_without_verification_a_transactional_batch_opens_its_transaction() -> None:
    with running_broker(config={"transaction.partition.verification.enable": "false"}) as unverified:
        topic = new_topic(unverified.bootstrap)
        producer_id, epoch = init_transactional_producer(unverified.bootstrap, "unverified")
        transactional = patched(batch(b"x"), attributes=TRANSACTIONAL_BIT, producer_id=producer_id,
                                producer_epoch=epoch, base_sequence=0)
        result = produce(unverified.bootstrap, topic, transactional, transactional_id="unverified")
        assert (result.error_code, result.base_offset) == (NONE, 0)


def init_transactional_producer(bootstrap: str, transactional_id: str) -> tuple[int, int]:
    """FindCoordinator (which creates __transaction_state), then InitProducerId, by hand."""
    raw_request(bootstrap, FIND_COORDINATOR, 3, key=transactional_id, key_type=1)

    def init() -> tuple[int, int] | None:
        response = raw_request(bootstrap, INIT_PRODUCER_ID, 4, transactional_id=transactional_id,
                               transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1)
        return (response.producer_id, response.producer_epoch) if response.error_code == NONE else None

    return wait_until(init, message="a transactional producer id")


def test_internal_topics_refuse_produce(broker: BrokerProcess) -> None:
    for internal in ("__consumer_offsets", "__transaction_state"):
        result = produce(broker.bootstrap, internal, batch(b"x"))
        assert result.error_code == INVALID_TOPIC_EXCEPTION
        assert result.error_message == f"Cannot append to internal topic {internal}"


# ------------------------------------------------------------------------ records


def test_compacted_topic_names_the_keyless_records(broker: BrokerProcess) -> None:
    """librdkafka's test 0011: the batch is INVALID_RECORD and record_errors names each keyless one."""
    topic = new_topic(broker.bootstrap, **{"cleanup.policy": "compact"})
    mixed = batch(b"a", b"b", b"c", b"d", keys=(b"k", None, b"k", None))
    result = produce(broker.bootstrap, topic, mixed)
    assert (result.error_code, result.base_offset) == (INVALID_RECORD, -1)
    assert [e.batch_index for e in result.record_errors] == [1, 3]
    assert all("without key" in e.batch_index_error_message for e in result.record_errors)
    assert result.error_message.startswith("One or more records have been rejected due to 2 record errors")
    assert produce(broker.bootstrap, topic, batch(b"a", keys=(b"k",))).base_offset == 0


def test_future_timestamps_beyond_the_default_hour_are_invalid_timestamp(broker: BrokerProcess) -> None:
    """message.timestamp.after.max.ms defaults to one hour (Kafka 4): each late record is named."""
    topic = new_topic(broker.bootstrap)
    future = batch(b"a", b"b", timestamp=now_ms() + 2 * HOUR_MS)
    result = assert_refused(broker.bootstrap, topic, future, INVALID_TIMESTAMP)
    assert [e.batch_index for e in result.record_errors] == [0, 1]
    assert "out of range" in result.record_errors[0].batch_index_error_message
    assert produce(broker.bootstrap, topic, batch(b"c", timestamp=now_ms() + 60_000)).error_code == NONE


def test_topic_timestamp_bounds_take_effect(broker: BrokerProcess) -> None:
    """message.timestamp.before.max.ms and .after.max.ms on a topic (their effect test)."""
    topic = new_topic(broker.bootstrap, **{"message.timestamp.before.max.ms": "60000",
                                           "message.timestamp.after.max.ms": "60000"})
    assert_refused(broker.bootstrap, topic, batch(b"old", timestamp=now_ms() - HOUR_MS), INVALID_TIMESTAMP)
    assert produce(broker.bootstrap, topic, batch(b"soon", timestamp=now_ms() + 10 * 60_000)).error_code \
        == INVALID_TIMESTAMP
    ancient_ok = new_topic(broker.bootstrap)  # before.max.ms defaults to Long.MAX: any past is fine
    assert produce(broker.bootstrap, ancient_ok, batch(b"old", timestamp=1)).error_code == NONE
    log_append = new_topic(broker.bootstrap, **{"message.timestamp.type": "LogAppendTime",
                                                "message.timestamp.after.max.ms": "0"})
    assert produce(broker.bootstrap, log_append, batch(b"f", timestamp=now_ms() + 5 * HOUR_MS)).error_code == NONE


@pytest.mark.parametrize("codec", [COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_ZSTD], ids=["gzip", "lz4", "zstd"])
def test_undecodable_compressed_batch_is_corrupt_message_and_readers_go_on(broker: BrokerProcess, codec: int) -> None:
    """Issue 11 item 3: garbage under a valid CRC used to be acknowledged and block every reader."""
    topic = new_topic(broker.bootstrap)
    garbage = compressed(batch(b"x", b"y"), codec, body=os.urandom(200))
    assert_refused(broker.bootstrap, topic, garbage, CORRUPT_MESSAGE)
    assert produce(broker.bootstrap, topic, compressed(batch(b"z"), codec)).base_offset == 1
    assert [m.value() for m in consume_partition(broker.bootstrap, topic, 0, 2)] == [b"good", b"z"]


def test_compressed_records_that_do_not_tile_the_body_are_invalid_record(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    two = batch(b"x", b"y")
    short = compressed(two, COMPRESSION_LZ4, body=compress(COMPRESSION_LZ4, two[HEADER_SIZE:-3]))
    assert_refused(broker.bootstrap, topic, short, INVALID_RECORD)


def test_decompression_bomb_is_refused_within_bounded_memory(broker: BrokerProcess) -> None:
    """A 1 GiB zstd bomb (32 KB on the wire) costs the broker at most the decompression limit."""
    topic = new_topic(broker.bootstrap)
    bomb = compressed(batch(b"x"), COMPRESSION_ZSTD, body=bytes(cramjam.zstd.compress(bytes(1 << 30))))
    assert broker.process is not None
    before = peak_rss_mib(broker.process.pid)
    assert_refused(broker.bootstrap, topic, bomb, CORRUPT_MESSAGE)
    assert peak_rss_mib(broker.process.pid) - before < 200


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        return next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmHWM:"))


def test_zstd_before_produce_v7_is_unsupported_compression_type(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    zstd = compressed(batch(b"x"), COMPRESSION_ZSTD)
    result = produce(broker.bootstrap, topic, zstd, version=6)
    assert (result.error_code, result.base_offset) == (UNSUPPORTED_COMPRESSION_TYPE, -1)
    assert produce(broker.bootstrap, topic, zstd).base_offset == 0


# ------------------------------------------------------------------------ compression.type


def fetched_codecs(bootstrap: str, topic: str) -> list[int]:
    """The codec bits of every batch a Fetch returns from offset 0."""
    return [header.compression for header in iter_headers(fetched_records(bootstrap, topic))]


def fetched_records(bootstrap: str, topic: str) -> bytes:
    """The stored batches of partition 0 as a Fetch from offset 0 returns them (up to 1 MB)."""
    schema = fetch_v12
    partition = schema.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                      log_start_offset=-1, partition_max_bytes=1 << 20)
    response = raw_request(
        bootstrap, FETCH, 12, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(schema.FetchTopic(topic=topic, partitions=(partition,)),), forgotten_topics_data=(), rack_id="",
    )
    return response.responses[0].partitions[0].records or b""


def produce_with_confluent(bootstrap: str, topic: str, values: list[bytes], codec: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.codec": codec, "linger.ms": 50, **QUIET})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


@pytest.mark.parametrize(("topic_codec", "client_codec", "stored"), [
    ("zstd", "none", COMPRESSION_ZSTD),
    ("uncompressed", "lz4", 0),
    ("gzip", "snappy", COMPRESSION_GZIP),
    ("producer", "lz4", COMPRESSION_LZ4),
])
def test_topic_compression_type_recompresses(broker: BrokerProcess, topic_codec: str, client_codec: str,
                                            stored: int) -> None:
    """compression.type (topic): a codec recompresses what a real client sent; `producer` keeps it."""
    topic = new_topic(broker.bootstrap, **{"compression.type": topic_codec})
    values = [b"value-%d" % i * 20 for i in range(50)]
    produce_with_confluent(broker.bootstrap, topic, values, client_codec)
    assert set(fetched_codecs(broker.bootstrap, topic)) == {stored}
    assert [m.value() for m in consume_partition(broker.bootstrap, topic, 0, len(values))] == values


def text_like_values(count: int) -> list[bytes]:
    """Values of words from a small vocabulary: compressible, and more so at higher levels."""
    rng = random.Random(7)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(300)]
    return [" ".join(rng.choices(words, k=40)).encode() for _ in range(count)]


@pytest.mark.parametrize(("codec", "low", "high"), [("gzip", "1", "9"), ("lz4", "1", "17"), ("zstd", "-5", "19")])
def test_topic_compression_level_is_the_level_the_broker_recompresses_at(
    broker: BrokerProcess, codec: str, low: str, high: str
) -> None:
    """compression.<codec>.level (KIP-390): the same uncompressed batch is stored smaller on a
    topic with the higher level, and reads back the same from either topic."""
    values = text_like_values(500)
    stored_bytes = {}
    for level in (low, high):
        topic = new_topic(broker.bootstrap, **{"compression.type": codec, f"compression.{codec}.level": level})
        assert produce(broker.bootstrap, topic, batch(*values)).error_code == NONE
        stored_bytes[level] = len(fetched_records(broker.bootstrap, topic))
        assert [m.value() for m in consume_partition(broker.bootstrap, topic, 0, len(values))] == values
    assert stored_bytes[high] < 0.95 * stored_bytes[low], stored_bytes


def test_broker_defaults_take_effect() -> None:
    """compression.type, log.message.timestamp.before.max.ms and .after.max.ms on the broker."""
    config = {"compression.type": "lz4", "log.message.timestamp.before.max.ms": "60000",
              "log.message.timestamp.after.max.ms": "0"}
    with running_broker(config=config) as started:
        topic = new_topic(started.bootstrap)
        assert produce(started.bootstrap, topic, batch(b"x", timestamp=now_ms() - 1000)).error_code == NONE
        assert fetched_codecs(started.bootstrap, topic) == [COMPRESSION_LZ4]
        assert produce(started.bootstrap, topic, batch(b"old", timestamp=now_ms() - HOUR_MS)).error_code \
            == INVALID_TIMESTAMP
        assert produce(started.bootstrap, topic, batch(b"new", timestamp=now_ms() + 60_000)).error_code \
            == INVALID_TIMESTAMP


def test_recompressed_batch_over_max_message_bytes_is_message_too_large(broker: BrokerProcess) -> None:
    """Kafka checks max.message.bytes on the batch it stores, after compression.type."""
    topic = new_topic(broker.bootstrap, **{"compression.type": "uncompressed", "max.message.bytes": "2000"})
    small_on_the_wire = compressed(batch(b"a" * 10_000), COMPRESSION_ZSTD)
    assert len(small_on_the_wire) < 2000
    assert_refused(broker.bootstrap, topic, small_on_the_wire, MESSAGE_TOO_LARGE)


def test_large_batches_are_checked_off_the_event_loop_with_the_same_answers(broker: BrokerProcess) -> None:
    """Batches of 4,096+ records that are opened (compressed, or on a compacted topic) are checked
    in a thread; the answers are the same: record_errors for keyless records, offsets for good ones."""
    compacted = new_topic(broker.bootstrap, **{"cleanup.policy": "compact"})
    keys = tuple(None if i in (7, 4500) else b"k%d" % i for i in range(5000))
    big = compressed(batch(*[b"v"] * 5000, keys=keys), COMPRESSION_LZ4)
    result = produce(broker.bootstrap, compacted, big)
    assert (result.error_code, [e.batch_index for e in result.record_errors]) == (INVALID_RECORD, [7, 4500])
    plain = new_topic(broker.bootstrap)
    assert produce(broker.bootstrap, plain, compressed(batch(*[b"v"] * 5000), COMPRESSION_ZSTD)).base_offset == 0
    garbage = compressed(patched(batch(b"x"), record_count=5000, last_offset_delta=4999), COMPRESSION_GZIP,
                         body=os.urandom(300))
    assert produce(broker.bootstrap, plain, garbage).error_code == CORRUPT_MESSAGE


def test_a_stored_batch_whose_records_do_not_decode_leaves_list_offsets_answering(broker: BrokerProcess) -> None:
    """An uncompressed batch is trusted past its CRC and header (docs/architecture.md, "Produce
    validation"), so garbage records can reach the log; lookups by time must still answer."""
    topic = new_topic(broker.bootstrap)
    good = batch(b"a" * 50, b"b" * 50)
    garbage = patched(good[:HEADER_SIZE] + b"\xff" * (len(good) - HEADER_SIZE))
    assert produce(broker.bootstrap, topic, garbage).error_code in (NONE, INVALID_RECORD)
    for timestamp in (0, -3):  # the first record at or after time 0; MAX_TIMESTAMP
        request_topic = list_offsets_v7.ListOffsetsTopic(name=topic, partitions=(
            list_offsets_v7.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=timestamp),))
        response = raw_request(broker.bootstrap, LIST_OFFSETS, 7, replica_id=-1, isolation_level=0,
                               topics=(request_topic,))
        answer = response.topics[0].partitions[0]
        assert answer.error_code == NONE
        assert answer.offset in (-1, 0, 1), "an offset of that batch, or none when it was refused"
    assert produce(broker.bootstrap, topic, batch(b"after")).error_code == NONE
