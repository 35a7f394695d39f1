"""Connection creation rates (KIP-612) on real brokers: connections opened in a bounded loop from
127.0.0.1 are accepted at the broker's max.connection.creation.rate (delayed, never refused); an
ip quota (connection_creation_rate, set through AlterClientQuotas) closes the connections over it
unserved while other addresses (127.0.0.2: any 127.x address is loopback) are served as before.

Windows: quota.window.num=2 of 1 s, so that a rate is measured over at least 1 s and a client's
first burst is one second's worth of its quota.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode
from test_quotas import alter_quotas, described

from logbus.testing import BrokerProcess, running_broker

WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 3) + b"raw"  # the header is the whole request
OTHER_ADDRESS = "127.0.0.2"


def answered(bootstrap: str, source: str = "127.0.0.1", timeout: float = 10.0) -> bool:
    """Open a connection from `source` and ask ApiVersions: True when answered, False when the
    broker closes it unanswered."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout, source_address=(source, 0)) as sock:
        sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
        try:
            return len(sock.recv(4)) == 4
        except ConnectionResetError:
            return False


def count_answered(bootstrap: str, seconds: float, source: str = "127.0.0.1") -> tuple[int, int, float]:
    """Open connections one after another for `seconds`: (answered, closed unanswered, time taken)."""
    started = time.monotonic()
    served = refused = 0
    while time.monotonic() - started < seconds:
        if answered(bootstrap, source):
            served += 1
        else:
            refused += 1
    return served, refused, time.monotonic() - started


@pytest.fixture(scope="module")
def rate_limited() -> Iterator[BrokerProcess]:
    with running_broker({**WINDOWS, "max.connection.creation.rate": "10"}) as started:
        yield started


def test_the_broker_rate_delays_connections_and_refuses_none(rate_limited: BrokerProcess) -> None:
    served, refused, took = count_answered(rate_limited.bootstrap, 3.0)
    assert refused == 0
    # at most the first second's burst (10) plus 10 a second; without the limit this loop opens hundreds
    assert served <= 10 + 10 * took * 1.2, (served, took)
    assert served >= 10 * took * 0.6, (served, took)


@pytest.fixture(scope="module")
def ip_limited() -> Iterator[BrokerProcess]:
    with running_broker(WINDOWS) as started:
        yield started


def test_an_ip_over_its_connection_rate_is_closed_and_other_addresses_are_not(ip_limited: BrokerProcess) -> None:
    bootstrap = ip_limited.bootstrap
    assert alter_quotas(bootstrap, {"ip": "127.0.0.1"}, connection_creation_rate=5) == (ErrorCode.none, None)
    assert described(bootstrap) == {(("ip", "127.0.0.1"),): {"connection_creation_rate": 5.0}}
    served, refused, took = count_answered(bootstrap, 3.0)
    assert refused > 0
    assert served <= 5 + 5 * took * 1.2, (served, took)
    assert served >= 5 * took * 0.6, (served, took)
    assert all(answered(bootstrap, OTHER_ADDRESS) for _ in range(20))
    assert alter_quotas(bootstrap, {"ip": "127.0.0.1"}, source=OTHER_ADDRESS, connection_creation_rate=None) == \
        (ErrorCode.none, None)
    assert all(answered(bootstrap) for _ in range(20))
