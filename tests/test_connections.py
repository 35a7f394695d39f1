"""Connection limits and memory against a real broker (issue 11 items 4 and 5): max.connections,
max.connections.per.ip, connections.max.idle.ms, queued.max.request.bytes, memory that follows the
bytes received, and accepting on when file descriptors run out."""

from __future__ import annotations

import socket
import struct
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from helpers import METADATA, RawConnection, wait_until

from logbus.testing import BrokerProcess, running_broker

METADATA_VERSION = 12


def served(connection: RawConnection) -> bool:
    """The connection gets an answer to a Metadata request."""
    response = connection.call(METADATA, METADATA_VERSION, topics=(), allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)
    return response.brokers[0].port > 0


def connect(broker: BrokerProcess, source: str = "127.0.0.1", timeout: float = 15.0) -> RawConnection:
    connection = RawConnection.__new__(RawConnection)
    connection.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=timeout,
                                               source_address=(source, 0))
    connection.correlation = 0
    return connection


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_max_connections_closes_new_connections_over_the_limit() -> None:
    with running_broker(config={"max.connections": "3"}) as broker, ExitStack() as stack:
        kept = [stack.enter_context(connect(broker)) for _ in range(3)]
        assert all(served(connection) for connection in kept)
        with connect(broker) as refused:
            assert refused.closed_by_broker(), "a fourth connection was kept"
        kept.pop().sock.close()
        wait_until(lambda: _served_fresh(broker), message="a new connection served once one closed")
        assert all(served(connection) for connection in kept)


def _served_fresh(broker: BrokerProcess) -> bool:
    with connect(broker) as fresh:
        try:
            return served(fresh)
        except (AssertionError, OSError):
            return False


def test_max_connections_per_ip_counts_each_address_apart() -> None:
    with running_broker(config={"max.connections.per.ip": "2"}) as broker, ExitStack() as stack:
        first = [stack.enter_context(connect(broker, "127.0.0.1")) for _ in range(2)]
        assert all(served(connection) for connection in first)
        with connect(broker, "127.0.0.1") as refused:
            assert refused.closed_by_broker(), "a third connection from one address was kept"
        other = [stack.enter_context(connect(broker, "127.0.0.2")) for _ in range(2)]
        assert all(served(connection) for connection in other)


def test_idle_connections_are_closed_after_connections_max_idle_ms() -> None:
    with running_broker(config={"connections.max.idle.ms": "400"}) as broker, connect(broker) as idle, \
            connect(broker) as busy:
        began = time.monotonic()
        while time.monotonic() - began < 1.5:  # requests every 100 ms keep `busy` open
            assert served(busy)
            time.sleep(0.1)  # the client's pace, not synchronisation
        assert idle.closed_by_broker(timeout=5), "an idle connection was kept"
        assert served(busy)


def test_idle_connections_stay_with_the_default() -> None:
    with running_broker() as broker, connect(broker) as idle:
        assert not idle.closed_by_broker(timeout=1.5)
        assert served(idle)


def test_a_size_prefix_reserves_no_memory() -> None:
    """Each connection that announced 100 MB and sent a trickle cost ~32 MB before (issue 11 item 4)."""
    with running_broker() as broker, ExitStack() as stack:
        pid = broker.process.pid
        assert served(stack.enter_context(connect(broker)))
        before = rss_bytes(pid)
        slow = [stack.enter_context(connect(broker)) for _ in range(100)]
        for connection in slow:
            connection.sock.sendall(struct.pack(">i", 100 << 20) + b"\x00\x03" + b"x" * 100)
        with connect(broker) as probe:  # everything sent before is read by now
            assert served(probe)
        assert rss_bytes(pid) - before < 40 << 20, "the announced sizes were reserved"


@contextmanager
def partial_frame(broker: BrokerProcess, received: int) -> Iterator[RawConnection]:
    """A connection that sent `received` bytes of a larger frame; finishing it with garbage gets it closed."""
    with connect(broker) as connection:
        connection.sock.sendall(struct.pack(">i", received + 1000) + struct.pack(">hhi", METADATA, 12, 1)
                                + b"\xff" * (received - 8))
        yield connection
        connection.sock.sendall(b"\xff" * 1000)
        assert connection.closed_by_broker()


def test_queued_max_request_bytes_stops_reading_until_the_bytes_drain() -> None:
    with running_broker(config={"queued.max.request.bytes": str(64 << 10)}) as broker, \
            connect(broker, timeout=1.5) as other:
        with partial_frame(broker, 512 << 10):
            answered = 0
            for _ in range(10):
                try:
                    served(other)
                except TimeoutError:
                    break
                answered += 1
            assert answered < 10, "reading went on over queued.max.request.bytes"
        other.sock.settimeout(15)
        frame = other.read_frame()  # the request left waiting is answered once the held bytes are gone
        assert struct.unpack_from(">i", frame)[0] == other.correlation
        assert served(other)


def test_without_queued_max_request_bytes_reading_goes_on() -> None:
    with running_broker() as broker, connect(broker, timeout=5) as other, partial_frame(broker, 512 << 10):
        assert all(served(other) for _ in range(10))


if sys.platform != "linux":  # pragma: no cover
    pytest.skip("uses /proc", allow_module_level=True)
