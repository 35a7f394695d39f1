"""One error taxonomy (errors.py): a request whose handler fails is answered, not dropped.

The server answers a handler's exception with its code in every error code field of the
response (protocol/error_response.py): a refusal (KafkaApiError) with its own code, a bug with
UNKNOWN_SERVER_ERROR and one traceback in the log. The connection stays open; only Produce with
acks=0, which has no response to carry the error, closes it, as in Kafka.

No request makes a logbus handler fail on purpose, so the dispatch tests run a broker in this
process, on a real socket, with one API's handler swapped for one that raises (the rest of the
broker is the real one).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import PRODUCE, RawConnection, produce_body
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsTopic

from bench.fuzz.samples import sample_entity, served_versions
from logbus.broker.apis import registry
from logbus.broker.broker import Broker
from logbus.config import BrokerConfig
from logbus.errors import KafkaApiError, NotLeaderError, error_code_for
from logbus.protocol import codec
from logbus.protocol.error_response import error_response
from logbus.protocol.kio_adapter import ENTITY, ENTITY_ARRAY, entity_schema
from logbus.security.listeners import ListenerSettings

LIST_OFFSETS, LIST_OFFSETS_VERSION = 2, 7
API_VERSIONS = 18
# DescribeLogDirs before v3: no top-level error code, and its results are log dirs, not the topics
# the request names; Kafka's error response is empty too.
NOTHING_TO_MIRROR = {(35, 1), (35, 2)}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[str]:
    """A broker running in this process on its own event loop thread; yields its bootstrap."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    instance = Broker(BrokerConfig({}), 0, ListenerSettings.plaintext("127.0.0.1", 0), str(tmp_path))
    (listener,) = asyncio.run_coroutine_threadsafe(instance.start(), loop).result(30)
    try:
        yield f"127.0.0.1:{listener.port}"
    finally:
        asyncio.run_coroutine_threadsafe(instance.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def failing_handler(monkeypatch: pytest.MonkeyPatch, api_key: int, exc: Exception) -> None:
    async def handle(_ctx: Any, _request: Any) -> Any:
        raise exc

    monkeypatch.setitem(registry(), api_key, dataclasses.replace(registry()[api_key], handle=handle))


def list_offsets(connection: RawConnection) -> Any:
    topic = codec.make(ListOffsetsTopic, name="orders", partitions=tuple(
        codec.make(ListOffsetsPartition, partition_index=index, current_leader_epoch=-1, timestamp=-1)
        for index in (0, 3)))
    return connection.call(LIST_OFFSETS, LIST_OFFSETS_VERSION, replica_id=-1, isolation_level=0, topics=(topic,))


def partition_codes(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def server_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "logbus.broker.server" and r.levelno >= logging.ERROR]


def test_a_bug_in_a_handler_answers_unknown_server_error_and_keeps_the_connection(
        broker: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    failing_handler(monkeypatch, LIST_OFFSETS, RuntimeError("a bug"))
    with caplog.at_level(logging.ERROR, logger="logbus.broker.server"), RawConnection(broker) as connection:
        answer = list_offsets(connection)
        assert partition_codes(answer) == {("orders", 0): ErrorCode.unknown_server_error,
                                           ("orders", 3): ErrorCode.unknown_server_error}
        assert all(p.offset == -1 for t in answer.topics for p in t.partitions)
        assert connection.call(API_VERSIONS, 3, client_software_name="t", client_software_version="1") \
            .error_code == ErrorCode.none  # the same connection is still served
    (logged,) = server_errors(caplog)
    assert isinstance(logged.exc_info[1], RuntimeError)


def test_a_refusal_escaping_a_handler_answers_its_code_without_a_traceback(
        broker: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    failing_handler(monkeypatch, LIST_OFFSETS, NotLeaderError("moved"))
    with caplog.at_level(logging.DEBUG, logger="logbus.broker.server"), RawConnection(broker) as connection:
        assert set(partition_codes(list_offsets(connection)).values()) == {ErrorCode.not_leader_or_follower}
        assert set(partition_codes(list_offsets(connection)).values()) == {ErrorCode.not_leader_or_follower}
    assert server_errors(caplog) == []


def test_a_failed_produce_with_acks_0_closes_its_connection(broker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """It has no response to carry the error: the client learns it from the closed connection."""
    failing_handler(monkeypatch, PRODUCE, RuntimeError("a bug"))
    with RawConnection(broker) as connection:
        connection.send_frame(connection.header(PRODUCE, 9) + produce_body("orders", b"", acks=0))
        assert connection.closed_by_broker()


def test_error_code_for_a_refusal_is_its_own_and_a_bug_is_unknown_server_error() -> None:
    assert error_code_for(NotLeaderError()) == ErrorCode.not_leader_or_follower
    assert error_code_for(KafkaApiError(ErrorCode.invalid_request, "no")) == ErrorCode.invalid_request
    assert error_code_for(ZeroDivisionError()) == ErrorCode.unknown_server_error


@pytest.mark.parametrize(("api_key", "version"), served_versions())
def test_every_served_version_has_an_error_response(api_key: int, version: int) -> None:
    """Built from a request with every field set: it encodes, and every error code in it is the one given."""
    request = dataclasses.replace(sample_entity(codec.request_class(api_key, version)), **(
        {"acks": -1} if api_key == PRODUCE else {}))
    response = error_response(api_key, codec.response_class(api_key, version), request,
                              ErrorCode.unknown_server_error, "failed")
    assert b"".join(codec.encode(response))
    codes = list(_error_codes(response))
    assert set(codes) <= {ErrorCode.unknown_server_error}
    assert codes or (api_key, version) in NOTHING_TO_MIRROR


def test_the_error_response_mirrors_the_requests_partitions() -> None:
    request = sample_entity(codec.request_class(PRODUCE, 9))
    request = dataclasses.replace(request, acks=1)
    response = error_response(PRODUCE, codec.response_class(PRODUCE, 9), request, ErrorCode.unknown_server_error, "x")
    wanted = [(t.name, p.index) for t in request.topic_data for p in t.partition_data]
    assert [(t.name, p.index) for t in response.responses for p in t.partition_responses] == wanted
    assert error_response(PRODUCE, codec.response_class(PRODUCE, 9), dataclasses.replace(request, acks=0),
                          ErrorCode.unknown_server_error, "x") is None


def _error_codes(entity: Any) -> Iterator[ErrorCode]:
    for field in entity_schema(type(entity)):
        value = getattr(entity, field.name)
        if field.kafka_type == "error_code":
            yield value
        elif field.kind == ENTITY_ARRAY:
            for item in value or ():
                yield from _error_codes(item)
        elif field.kind == ENTITY and value is not None:
            yield from _error_codes(value)
