"""File descriptors (issue 11 item 5): the broker raises its soft RLIMIT_NOFILE to the hard limit at
start, and when descriptors run out it goes on accepting: connections over the limit are closed, and
once some close, new ones are served."""

from __future__ import annotations

import resource
import socket
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from helpers import METADATA, RawConnection, wait_until

from logbus.testing import BrokerProcess

_SET_LIMIT = (
    "import os, resource, sys\n"
    "soft, hard = int(sys.argv[1]), int(sys.argv[2])\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[3:]])\n"
)


class LimitedBroker(BrokerProcess):
    """A broker started under RLIMIT_NOFILE (soft, hard), as `prlimit` would."""

    def __init__(self, data_dir: str, soft: int, hard: int) -> None:
        super().__init__(data_dir)
        self.soft, self.hard = soft, hard

    def command(self) -> list[str]:
        return [sys.executable, "-c", _SET_LIMIT, str(self.soft), str(self.hard), *super().command()[1:]]


@contextmanager
def limited_broker(tmp_path, soft: int, hard: int) -> Iterator[LimitedBroker]:
    broker = LimitedBroker(str(tmp_path / "data"), soft, hard)
    broker.log_path = str(tmp_path / "broker.log")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def soft_nofile(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as limits:
        for line in limits:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no open-files limit")


def served(connection: RawConnection) -> bool:
    response = connection.call(METADATA, 12, topics=(), allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)
    return bool(response.brokers)


def try_served(broker: BrokerProcess) -> bool:
    try:
        with RawConnection(broker.bootstrap, timeout=3) as connection:
            return served(connection)
    except (AssertionError, OSError):
        return False


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one(tmp_path) -> None:
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)
    with limited_broker(tmp_path, 64, hard) as broker:
        assert soft_nofile(broker.process.pid) == hard


def test_accepting_goes_on_when_descriptors_run_out(tmp_path) -> None:
    with limited_broker(tmp_path, 128, 128) as broker, ExitStack() as stack:
        held: list[socket.socket] = []
        for _ in range(200):  # more connections than the broker has descriptors
            held.append(stack.enter_context(socket.create_connection(("127.0.0.1", broker.port), timeout=5)))
        for sock in held[:40]:
            sock.close()
        wait_until(lambda: try_served(broker), timeout=20, message="a new connection served after some closed")
        assert broker.running
        log = broker.read_log()
        assert "out of file descriptors" in log, "the descriptors never ran out: the test proves nothing"
        assert "Traceback" not in log
