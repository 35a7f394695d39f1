"""logbus.testing itself: what lets tests run in parallel (pytest-xdist workers)."""

from __future__ import annotations

import socket

import pytest

from logbus import testing


def test_every_xdist_worker_picks_ports_from_a_share_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    shares = []
    for worker in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
        shares.append(testing.worker_test_ports())
        low, high = shares[-1]
        assert all(low <= testing.free_test_port(4) <= high - 3 for _ in range(20))
    assert shares[0][0] == testing.TEST_PORTS[0] and shares[-1][1] <= testing.TEST_PORTS[1]
    assert all(shares[i][1] < shares[i + 1][0] for i in range(2)), shares
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert testing.worker_test_ports() == testing.TEST_PORTS


def test_a_broker_whose_port_was_taken_meanwhile_starts_on_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """The port is probed free, then taken before the broker binds it (another test process)."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", testing.free_test_port()))
        squatter.listen()
        taken = squatter.getsockname()[1]
        picks = iter([taken])
        free_test_port = testing.free_test_port
        monkeypatch.setattr(testing, "free_test_port", lambda count=1: next(picks, None) or free_test_port(count))
        with testing.running_broker() as broker:
            assert broker.running and broker.port != taken
