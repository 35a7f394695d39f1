"""The Spark executors' blocking client reads what brokers answer as hostile bytes: a response
size is checked before anything is allocated for it, and the buffer grows only with what
arrives, so a peer that announces a huge answer and sends little costs little."""

from __future__ import annotations

import socket
import struct
import threading
import tracemalloc

import pytest

from logbus.client.connection import MAX_RESPONSE_BYTES, Connection
from logbus.client.errors import KafkaError
from logbus.protocol.codec import make, request_class

API_VERSIONS = 18


def lying_peer(announced: int, sent: bytes) -> tuple[str, int]:
    """A one-shot peer that reads one request, announces `announced` bytes, sends `sent`, closes."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        connection, _ = server.accept()
        with connection, server:
            (size,) = struct.unpack(">i", connection.recv(4, socket.MSG_WAITALL))
            connection.recv(size, socket.MSG_WAITALL)
            connection.sendall(struct.pack(">i", announced) + sent)

    threading.Thread(target=answer, daemon=True).start()
    return server.getsockname()[:2]


def api_versions() -> object:
    return make(request_class(API_VERSIONS, 3), client_software_name="t", client_software_version="1")


def test_a_response_announcing_more_than_it_sends_costs_only_what_arrived() -> None:
    connection = Connection(*lying_peer(MAX_RESPONSE_BYTES, b"x" * 1000), timeout=10)
    tracemalloc.start()
    try:
        with pytest.raises(KafkaError, match="closed"):
            connection.call(API_VERSIONS, api_versions(), version=3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        connection.close()
    assert peak < 4 << 20, f"{peak} bytes allocated for 1,000 received"


@pytest.mark.parametrize("announced", [-1, MAX_RESPONSE_BYTES + 1])
def test_a_negative_or_oversized_response_size_is_refused(announced: int) -> None:
    connection = Connection(*lying_peer(announced, b""), timeout=10)
    try:
        with pytest.raises(KafkaError, match="announced a response of"):
            connection.call(API_VERSIONS, api_versions(), version=3)
    finally:
        connection.close()
