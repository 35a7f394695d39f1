"""Admin APIs against a real broker: topics, partitions, configs, records, cluster, with real clients."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator

import pytest
from kio.serial import entity_reader

from logbus.protocol import codec
from logbus.testing import BrokerProcess, running_broker

API_VERSIONS, METADATA = 18, 3


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    """One broker for the module; each test uses its own topics."""
    with running_broker(config={"num.partitions": "1"}) as started:
        yield started


# ---------------------------------------------------------------------------- raw protocol


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _unknown_tags(*tags: tuple[int, bytes]) -> bytes:
    """A tagged-field section holding tags no schema knows."""
    body = b"".join(_uvarint(tag) + _uvarint(len(value)) + value for tag, value in tags)
    return _uvarint(len(tags)) + body


def _exchange(bootstrap: str, api_key: int, version: int, body: bytes, response_header_tags: bool) -> object:
    """Send one flexible request (header v2) on a fresh socket; decode the response with kio."""
    host, port = bootstrap.rsplit(":", 1)
    client_id = b"raw-test"
    header = struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id + _unknown_tags((9, b"hdr"))
    frame = header + body
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        response = _recv_exactly(sock, size)
    assert struct.unpack_from(">i", response)[0] == 7
    offset = 4 + (1 if response_header_tags else 0)  # flexible response header: empty tag section
    value, used = entity_reader(codec.response_class(api_key, version))(response, offset)
    assert offset + used == len(response)
    return value


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "broker closed the connection"
        data += chunk
    return data


def _with_trailing_tags(body: bytes, *tags: tuple[int, bytes]) -> bytes:
    """Replace the (empty) top-level tag section that ends a flexible body."""
    assert body.endswith(b"\x00")
    return body[:-1] + _unknown_tags(*tags)


def test_api_versions_v3_with_unknown_tagged_field(broker: BrokerProcess) -> None:
    request = codec.request_class(API_VERSIONS, 3)(client_software_name="raw", client_software_version="1")
    body = _with_trailing_tags(b"".join(codec.encode(request)), (5, b"\xaa\xbb"), (300, b"x" * 200))
    response = _exchange(broker.bootstrap, API_VERSIONS, 3, body, response_header_tags=False)
    assert response.error_code == 0
    assert {api.api_key for api in response.api_keys} >= {API_VERSIONS, METADATA}


def test_metadata_v12_with_unknown_tags_at_every_level(broker: BrokerProcess) -> None:
    from kio.schema.metadata.v12.request import MetadataRequestTopic

    request = codec.request_class(METADATA, 12)(
        topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="tagged-topic"),),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False,
    )
    body = b"".join(codec.encode(request))
    name_end = body.index(b"tagged-topic") + len(b"tagged-topic")
    assert body[name_end] == 0  # the topic entity's empty tag section
    body = body[:name_end] + _unknown_tags((42, b"\x01\x02\x03")) + body[name_end + 1:]
    body = _with_trailing_tags(body, (77, b""))
    response = _exchange(broker.bootstrap, METADATA, 12, body, response_header_tags=True)
    assert [t.name for t in response.topics] == ["tagged-topic"]
    assert response.topics[0].error_code == 0
    assert len(response.topics[0].partitions) == 1


def test_unknown_tag_running_past_the_frame_closes_only_that_connection(broker: BrokerProcess) -> None:
    request = codec.request_class(API_VERSIONS, 3)(client_software_name="raw", client_software_version="1")
    body = b"".join(codec.encode(request))[:-1] + _uvarint(1) + _uvarint(5) + _uvarint(50) + b"short"
    with pytest.raises(AssertionError, match="closed the connection"):
        _exchange(broker.bootstrap, API_VERSIONS, 3, body, response_header_tags=False)
    healthy = codec.request_class(API_VERSIONS, 3)(client_software_name="raw", client_software_version="1")
    response = _exchange(broker.bootstrap, API_VERSIONS, 3, b"".join(codec.encode(healthy)), False)
    assert response.error_code == 0
