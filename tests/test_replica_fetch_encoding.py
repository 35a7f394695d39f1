"""A follower's Fetch v12 request and its leader's answer, written and read by hand
(protocol/replica_fetch.py): byte for byte what kio's writers make of the same fields, read as
kio reads them, and any cut or bent answer refused as malformed (it is network input)."""

from __future__ import annotations

import contextlib
import datetime
import random
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from logbus.protocol.codec import ChunkSink, encode, make, response_module
from logbus.protocol.frames import parse_request_header
from logbus.protocol.replica_fetch import (
    FETCH_KEY,
    FETCH_VERSION,
    FetchPosition,
    MalformedAnswer,
    ReplicaFetch,
    decode_replica_fetch_response,
    encode_replica_fetch,
    encode_replica_fetch_response,
)

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


_RESPONSE = response_module(FETCH_KEY, FETCH_VERSION)


def partition_answer(index: int, records: bytes | memoryview | None = b"", **fields: Any) -> Any:
    return make(_RESPONSE.PartitionData, partition_index=index, error_code=fields.pop("error_code", ErrorCode.none),
                high_watermark=fields.pop("high_watermark", 10), last_stable_offset=9, log_start_offset=2,
                aborted_transactions=fields.pop("aborted", None), preferred_read_replica=-1, records=records,
                **fields)


ANSWERS = {
    "empty": (),
    "records": (("t", (partition_answer(0, memoryview(b"r" * 3000)),)),),
    "many partitions": (("topic-" + "y" * 300, tuple(partition_answer(i, b"") for i in range(140))),),
    "errors, diverging, aborted, tags": (
        ("ü", (partition_answer(1, None, error_code=ErrorCode.not_leader_or_follower, high_watermark=-1),
               partition_answer(2, b"", diverging_epoch=_RESPONSE.EpochEndOffset(epoch=4, end_offset=77)),
               partition_answer(3, b"abc", aborted=(_RESPONSE.AbortedTransaction(producer_id=5, first_offset=6),)),
               partition_answer(4, b"", aborted=()),
               partition_answer(5, b"", current_leader=_RESPONSE.LeaderIdAndEpoch(leader_id=2, leader_epoch=3),
                                snapshot_id=_RESPONSE.SnapshotId(end_offset=8, epoch=1)))),
    ),
}


@pytest.mark.parametrize("name", ANSWERS)
def test_hand_written_fetch_answer_is_kios(name: str) -> None:
    topics = tuple(make(_RESPONSE.FetchableTopicResponse, topic=topic, partitions=answers)
                   for topic, answers in ANSWERS[name])
    response = make(_RESPONSE.FetchResponse, error_code=ErrorCode.none, session_id=77, responses=topics)
    chunks = encode_replica_fetch_response(response)
    assert b"".join(bytes(chunk) for chunk in chunks) == b"".join(bytes(chunk) for chunk in encode(response))
    assert all(isinstance(chunk, bytes) for chunk in chunks[::2]), "record sets are chunks of their own"


def answer_frame(name: str, correlation_id: int = 5) -> bytes:
    topics = tuple(make(_RESPONSE.FetchableTopicResponse, topic=topic, partitions=answers)
                   for topic, answers in ANSWERS[name])
    response = make(_RESPONSE.FetchResponse, error_code=ErrorCode.none, session_id=77, responses=topics)
    return correlation_id.to_bytes(4, "big") + b"\x00" + b"".join(bytes(chunk) for chunk in encode(response))


@pytest.mark.parametrize("name", ANSWERS)
def test_a_follower_reads_the_answer_as_kio_does(name: str) -> None:
    answer = decode_replica_fetch_response(answer_frame(name, 123))
    assert (answer.correlation_id, answer.error_code, answer.session_id) == (123, ErrorCode.none, 77)
    expected = ANSWERS[name]
    assert [t.topic for t in answer.responses] == [topic for topic, _ in expected]
    for topic, (_, partitions) in zip(answer.responses, expected, strict=True):
        for got, sent in zip(topic.partitions, partitions, strict=True):
            assert (got.partition_index, got.error_code, got.high_watermark, got.last_stable_offset,
                    got.log_start_offset) == (sent.partition_index, sent.error_code, sent.high_watermark,
                                              sent.last_stable_offset, sent.log_start_offset)
            assert (got.diverging_epoch.epoch, got.diverging_epoch.end_offset) == \
                (sent.diverging_epoch.epoch, sent.diverging_epoch.end_offset)
            assert (None if got.records is None else bytes(got.records)) == \
                (None if sent.records is None else bytes(sent.records))


def test_a_cut_or_bent_answer_is_refused_as_malformed() -> None:
    frame = answer_frame("errors, diverging, aborted, tags")
    for end in range(len(frame) - 1):  # every cut (the last byte: the answer's empty tagged fields)
        with pytest.raises(MalformedAnswer):
            decode_replica_fetch_response(frame[:end])
    randomly = random.Random(25)
    for _ in range(500):  # bytes bent anywhere: an answer or MalformedAnswer, nothing else
        bent = bytearray(frame)
        for _ in range(randomly.randint(1, 4)):
            bent[randomly.randrange(len(bent))] = randomly.randrange(256)
        with contextlib.suppress(MalformedAnswer):
            decode_replica_fetch_response(bytes(bent))
    with pytest.raises(MalformedAnswer):  # a record set claiming more than there is
        decode_replica_fetch_response(answer_frame("records")[:-10] + b"\x00" * 5)
