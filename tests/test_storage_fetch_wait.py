"""Fetch paths changed to keep disk waits and needless reads off the event loop, against a real
broker process: a fetch waiting for `min_bytes` (Kafka's DelayedFetch) is woken on every append
but reads again only once the bytes appended since could make up `min_bytes`; ranges not in the
page cache are read by a worker thread. These tests pin the answers that must not change.
"""

from __future__ import annotations

import datetime
import os
import select
import time

import pytest
from helpers import RawConnection
from kio.schema.fetch.v12 import request as fetch_v12
from kio.serial import entity_reader
from test_storage import FAST_UPKEEP, FIRST_SEGMENT, create_topic, partition_dir, produce, read_segment

from logbus.protocol import codec
from logbus.testing import running_broker

FETCH_KEY = 1


def _fetch_frame(connection: RawConnection, topic: str, min_bytes: int, max_wait_ms: int,
                 partition_max_bytes: int = 1_000_000) -> bytes:
    partition = codec.make(fetch_v12.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0,
                           last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=partition_max_bytes)
    request = codec.make(codec.request_class(FETCH_KEY, 12), cluster_id=None, replica_id=-1,
                         max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
                         max_bytes=50_000_000, isolation_level=0, session_id=0, session_epoch=-1,
                         topics=(codec.make(fetch_v12.FetchTopic, topic=topic, partitions=(partition,)),),
                         forgotten_topics_data=(), rack_id="")
    return connection.header(FETCH_KEY, 12) + b"".join(codec.encode(request))


def _records(connection: RawConnection) -> bytes:
    frame = connection.read_frame()
    response, _ = entity_reader(codec.response_class(FETCH_KEY, 12))(frame, 5)
    answer = response.responses[0].partitions[0]
    assert answer.error_code == 0
    return bytes(answer.records or b"")


def _answered(connection: RawConnection) -> bool:
    return bool(select.select([connection.sock], [], [], 0)[0])


def test_a_waiting_fetch_answers_once_min_bytes_arrived_and_not_before() -> None:
    with running_broker(config=FAST_UPKEEP) as broker:
        create_topic(broker, "waiting")
        with RawConnection(broker.bootstrap) as connection:
            began = time.monotonic()
            connection.send_frame(_fetch_frame(connection, "waiting", 20_000, 20_000))
            produce(broker, "waiting", [b"a" * 1000] * 5)  # ~5.4 KB: not enough
            assert not _answered(connection), "answered before min_bytes were there"
            produce(broker, "waiting", [b"b" * 1000] * 20)  # ~27 KB in all
            records = _records(connection)
            assert len(records) >= 20_000 and time.monotonic() - began < 15, "answered once enough arrived"


def test_a_waiting_fetch_answers_what_there_is_at_max_wait() -> None:
    with running_broker(config=FAST_UPKEEP) as broker:
        create_topic(broker, "short")
        with RawConnection(broker.bootstrap) as connection:
            began = time.monotonic()
            connection.send_frame(_fetch_frame(connection, "short", 1_000_000, 1500))
            produce(broker, "short", [b"c" * 1000] * 3)
            records = _records(connection)
            assert time.monotonic() - began >= 1.4, "waited for max_wait"
            assert b"c" * 1000 in records and records.count(b"c" * 1000) == 3, "the records that arrived"


def _cached(fd: int, position: int) -> bool:
    try:
        os.preadv(fd, [bytearray(1)], position, os.RWF_NOWAIT)
    except BlockingIOError:
        return False
    return True


def _cache_only_the_head(path: str, head: int) -> bool:
    """Leave only the first `head` bytes of `path` in the page cache; False when that did not work."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.pread(fd, head, 0)  # readahead may load more: dropped next
        os.posix_fadvise(fd, head, 0, os.POSIX_FADV_DONTNEED)
        return _cached(fd, 0) and not _cached(fd, head + 100_000)
    finally:
        os.close(fd)


@pytest.mark.parametrize("sendfile", ["remote", "always"])
def test_a_cold_backlog_is_served_byte_for_byte(sendfile: str) -> None:
    """Ranges not in the page cache are read by a worker thread: the same whole batches as stored."""
    with running_broker(config={**FAST_UPKEEP, "socket.sendfile": sendfile}) as broker:
        create_topic(broker, "cold")
        produce(broker, "cold", [bytes([i % 256]) * 10_000 for i in range(200)])  # ~2 MB
        segment = os.path.join(partition_dir(broker, "cold"), FIRST_SEGMENT + ".log")
        stored = read_segment(segment)
        with open(segment, "rb") as handle:
            expected = handle.read(max(b.position + b.size for b in stored if b.position + b.size <= 500_000))
        if not _cache_only_the_head(segment, 128 * 1024):  # where the read starts is cached, the rest is not
            pytest.skip("the page cache keeps the file here (no POSIX_FADV_DONTNEED effect)")
        with RawConnection(broker.bootstrap) as connection:
            connection.send_frame(_fetch_frame(connection, "cold", 1, 100, partition_max_bytes=500_000))
            records = _records(connection)
        assert records == expected
