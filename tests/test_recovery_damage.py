"""Damage a data dir can hold (a bad batch an older version accepted, bytes written while the
broker was stopped) never keeps the broker from starting, and never hides the data written
after it: it is cut off at open, logged, and the rest is served."""

from __future__ import annotations

import datetime
import glob
import os
import struct
import time
from collections.abc import Iterator

import crc32c
import pytest
from helpers import CREATE_TOPICS, RawConnection, consume_partition, produce_all, raw_produce, raw_request
from kio.schema.create_topics.v7 import request as create_topics_v7

from logbus.config import BrokerConfig, log_config
from logbus.protocol.records import build_batch, iter_headers, validate_batches, whole_batches_length
from logbus.storage.log import PartitionLog
from logbus.storage.segment import LogSegment
from logbus.testing import BrokerProcess, running_broker

NONE, INVALID_RECORD = 0, 87
INT32_MAX = (1 << 31) - 1
FIRST_SEGMENT = f"{0:020d}.log"


@pytest.fixture
def broker() -> Iterator[BrokerProcess]:
    with running_broker() as started:
        yield started


def create_topic(bootstrap: str, name: str) -> None:
    topic = create_topics_v7.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(),
                                            configs=())
    response = raw_request(bootstrap, CREATE_TOPICS, 7, topics=(topic,),
                           timeout=datetime.timedelta(seconds=10), validate_only=False)
    assert response.topics[0].error_code == NONE


def lying_batch(base_offset: int) -> bytes:
    """One record claiming 2^31 offsets, with a valid CRC: what issue 11's fuzzer got acknowledged."""
    batch = bytearray(build_batch([(None, b"lie")], int(time.time() * 1000), base_offset=base_offset))
    struct.pack_into(">i", batch, 23, INT32_MAX)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def segment_path(broker: BrokerProcess, topic: str) -> str:
    return os.path.join(broker.data_dir, f"{topic}-0", FIRST_SEGMENT)


def values_read(broker: BrokerProcess, topic: str, count: int) -> list[bytes]:
    return [message.value() for message in consume_partition(broker.bootstrap, topic, 0, count)]


def test_two_lying_batches_then_a_crash_leave_a_startable_data_dir(broker: BrokerProcess) -> None:
    """The exact reproduction of issue 11 item 2, through the API: refused now, so nothing to recover."""
    create_topic(broker.bootstrap, "repro")
    produce_all(broker.bootstrap, "repro", [(None, b"good-0"), (None, b"good-1")])
    with RawConnection(broker.bootstrap) as connection:
        assert raw_produce(connection, "repro", lying_batch(0))[0] == INVALID_RECORD
        assert raw_produce(connection, "repro", lying_batch(0))[0] == INVALID_RECORD
        assert raw_produce(connection, "repro", build_batch([(None, b"good-2")], int(time.time() * 1000))) == (NONE, 2)
    broker.kill()
    broker.restart()
    assert values_read(broker, "repro", 3) == [b"good-0", b"good-1", b"good-2"]


@pytest.mark.parametrize("crash", [True, False], ids=["after-a-crash", "after-a-clean-stop"])
def test_stored_lying_batches_are_cut_at_open_and_the_rest_served(broker: BrokerProcess, crash: bool) -> None:
    """A data dir an older version wrote, with the two lying batches in it: the broker starts."""
    create_topic(broker.bootstrap, "stored")
    produce_all(broker.bootstrap, "stored", [(None, b"good-%d" % i) for i in range(3)])
    if crash:
        broker.kill()
    else:
        assert broker.stop() == 0
    with open(segment_path(broker, "stored"), "ab") as handle:
        handle.write(lying_batch(3) + lying_batch(3 + INT32_MAX + 1))
    broker.restart()
    assert values_read(broker, "stored", 3) == [b"good-0", b"good-1", b"good-2"]
    produce_all(broker.bootstrap, "stored", [(None, b"after")])
    assert values_read(broker, "stored", 4)[3] == b"after"
    assert "truncated" in broker.read_log()


def _garbage(_batch: bytes) -> bytes:
    return b"\xde\xad\xbe\xef" * 40


def _flipped_magic(batch: bytes) -> bytes:
    damaged = bytearray(batch)
    damaged[16] ^= 0x01  # magic 2 -> 3: an impossible header
    return bytes(damaged)


def _flipped_timestamp(batch: bytes) -> bytes:
    damaged = bytearray(batch)
    damaged[40] ^= 0x10  # a byte of maxTimestamp: the CRC no longer matches
    return bytes(damaged)


@pytest.mark.parametrize("damage", [_garbage, _flipped_magic, _flipped_timestamp],
                         ids=["garbage-appended", "flipped-magic", "flipped-header-byte"])
def test_damage_written_while_stopped_is_cut_and_new_records_readable(broker: BrokerProcess, damage) -> None:
    """Issue 11 item 6: after a clean stop the tail is checked at open, so the damage is cut off
    and what is produced next is readable by a real consumer right after the old data."""
    create_topic(broker.bootstrap, "damaged")
    produce_all(broker.bootstrap, "damaged", [(None, b"old-%d" % i) for i in range(5)])
    produce_all(broker.bootstrap, "damaged", [(None, b"last")])
    assert broker.stop() == 0
    path = segment_path(broker, "damaged")
    with open(path, "rb") as handle:
        data = handle.read()
    last_start = sum(header.size for header in validate_batches(data)[:-1])
    if damage is _garbage:
        damaged, survivors = data + damage(b""), [b"old-%d" % i for i in range(5)] + [b"last"]
    else:
        damaged, survivors = data[:last_start] + damage(data[last_start:]), [b"old-%d" % i for i in range(5)]
    with open(path, "wb") as handle:
        handle.write(damaged)
    broker.restart()
    produce_all(broker.bootstrap, "damaged", [(None, b"new")])
    assert values_read(broker, "damaged", len(survivors) + 1) == [*survivors, b"new"]


def test_log_rolls_before_a_relative_offset_could_overflow(tmp_path) -> None:
    """Kafka's canConvertToRelativeOffset, in process: appends whose offsets the active segment's
    indexes cannot hold go to a new segment, and the log reopens (after a crash) as it was."""
    config = log_config(BrokerConfig())
    directory = str(tmp_path / "t-0")
    log = PartitionLog(directory, "t", 0, config)
    log.load(0, 0, clean_shutdown=False)
    for _ in range(3):
        data = bytearray(lying_batch(0))
        log.append(data, list(iter_headers(data)), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, INT32_MAX + 1, 2 * (INT32_MAX + 1)]
    end = log.log_end_offset
    for segment in log.segments:
        segment.close()
    reopened = PartitionLog(directory, "t", 0, config)
    assert reopened.load(0, 0, clean_shutdown=False) == 0, "nothing to cut"
    assert reopened.log_end_offset == end
    assert len(glob.glob(os.path.join(directory, "*.log"))) == 3


@pytest.mark.parametrize("damage", ["snapshot", "stray-log-file"])
def test_a_partition_whose_load_fails_is_recovered_not_fatal(broker: BrokerProcess, damage: str) -> None:
    """A producer-state snapshot of the wrong shape, or a `.log` file that is no segment, used to
    make the load raise and the broker exit; now the partition is recovered and served."""
    create_topic(broker.bootstrap, "odd")
    produce_all(broker.bootstrap, "odd", [(None, b"kept-%d" % i) for i in range(3)])
    assert broker.stop() == 0
    directory = os.path.join(broker.data_dir, "odd-0")
    if damage == "snapshot":  # at the log end: the one a load takes (a log this small gets none at close)
        with open(os.path.join(directory, f"{3:020d}.snapshot"), "w", encoding="utf-8") as handle:
            handle.write('{"5": []}')
    else:
        with open(os.path.join(directory, "notes.log"), "w", encoding="utf-8") as handle:
            handle.write("an operator's notes\n")
    broker.restart()
    produce_all(broker.bootstrap, "odd", [(None, b"after")])
    assert values_read(broker, "odd", 4) == [b"kept-0", b"kept-1", b"kept-2", b"after"]


def test_fetch_never_serves_a_batch_with_an_impossible_header() -> None:
    """The cut every fetched range goes through stops before a batch whose magic is not 2."""
    first = build_batch([(None, b"a")], 0)
    second = bytearray(build_batch([(None, b"b")], 0, base_offset=1))
    assert whole_batches_length(first + bytes(second)) == len(first) + len(second)
    second[16] = 3
    assert whole_batches_length(first + bytes(second)) == len(first)
    assert [h.base_offset for h in iter_headers(first + bytes(second))] == [0]


def test_an_append_that_fails_after_its_write_is_cut_back(tmp_path) -> None:
    """Below the log's roll guard: a segment asked to index an offset it cannot hold fails after
    the bytes are written, and leaves file, indexes and counters as they were."""
    segment = LogSegment(str(tmp_path), 0, index_interval_bytes=0)
    good = bytearray(build_batch([(None, b"a")], 1_000))
    segment.append(good, list(iter_headers(good)))
    state = (segment.size, segment.next_offset, segment.max_timestamp, len(segment.offset_index))
    unindexable = bytearray(build_batch([(None, b"b")], 2_000, base_offset=1 << 33))
    with pytest.raises(struct.error):
        segment.append(unindexable, list(iter_headers(unindexable)))
    assert (segment.size, segment.next_offset, segment.max_timestamp, len(segment.offset_index)) == state
    assert os.path.getsize(segment.path) == len(good)
    segment.close()
