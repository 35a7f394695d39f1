"""A follower's Fetch v12 request, written by hand (protocol/replica_fetch.py), is byte for byte
what kio's writers make of the same fields, and decodes back to them."""

from __future__ import annotations

import datetime

import pytest
from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from logbus.protocol.codec import ChunkSink, make
from logbus.protocol.frames import parse_request_header
from logbus.protocol.replica_fetch import FETCH_KEY, FETCH_VERSION, FetchPosition, ReplicaFetch, encode_replica_fetch

_REQUEST = load_payload_module(FETCH_KEY, FETCH_VERSION, EntityType.request)


def kio_frame(correlation_id: int, client_id: str, fetch: ReplicaFetch) -> bytes:
    sink = ChunkSink()
    entity_writer(_REQUEST.RequestHeader)(sink, _REQUEST.RequestHeader(
        request_api_key=FETCH_KEY, request_api_version=FETCH_VERSION, correlation_id=correlation_id,
        client_id=client_id))
    topics = tuple(make(_REQUEST.FetchTopic, topic=topic, partitions=tuple(make(
        _REQUEST.FetchPartition, partition=p.partition, current_leader_epoch=p.current_leader_epoch,
        fetch_offset=p.fetch_offset, last_fetched_epoch=p.last_fetched_epoch, log_start_offset=p.log_start_offset,
        partition_max_bytes=p.max_bytes) for p in positions)) for topic, positions in fetch.topics)
    forgotten = tuple(make(_REQUEST.ForgottenTopic, topic=topic, partitions=tuple(indexes))
                      for topic, indexes in fetch.forgotten)
    entity_writer(_REQUEST.FetchRequest)(sink, make(
        _REQUEST.FetchRequest, replica_id=fetch.replica_id, max_wait=datetime.timedelta(milliseconds=fetch.max_wait_ms),
        min_bytes=fetch.min_bytes, max_bytes=fetch.max_bytes, isolation_level=0, session_id=fetch.session_id,
        session_epoch=fetch.session_epoch, topics=topics, forgotten_topics_data=forgotten, rack_id=""))
    payload = b"".join(sink)
    return len(payload).to_bytes(4, "big") + payload


def position(index: int, offset: int) -> FetchPosition:
    return FetchPosition(index, 7, offset, 6, offset // 2, 1 << 20)


CASES = {
    "empty incremental": ReplicaFetch(2, 500, 1, 10 << 20, 123, 45, []),
    "one partition": ReplicaFetch(3, 500, 1, 10 << 20, 0, 0, [("t", [position(0, 12345678901)])]),
    "many topics, forgotten": ReplicaFetch(
        1, 0, 1 << 20, 2**31 - 1, 2**31 - 1, 2**31 - 1,
        [("topic-" + "x" * 200, [position(i, i * 1000) for i in range(130)]), ("ü", [position(2, -1)])],
        [("gone", [0, 1, 2]), ("also-gone", list(range(200)))]),
}


@pytest.mark.parametrize("name", CASES)
def test_hand_written_fetch_is_kios(name: str) -> None:
    fetch = CASES[name]
    frame = encode_replica_fetch(99, "logbus-replica-fetcher-3", fetch)
    assert frame == kio_frame(99, "logbus-replica-fetcher-3", fetch)
    header = parse_request_header(frame[4:], flexible=True)
    body, _ = entity_reader(_REQUEST.FetchRequest)(frame[4:], header.body_offset)
    assert [(t.topic, [p.fetch_offset for p in t.partitions]) for t in body.topics] == \
        [(t, [p.fetch_offset for p in ps]) for t, ps in fetch.topics]
