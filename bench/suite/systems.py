"""The systems under test as processes: start on a free loopback port with a fresh data dir, stop by pid group.

Every server runs in its own session (process group) so a wrapper and its children (noida-db starts its
server as a child) stop together; nothing here ever signals a process it did not start.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench.suite.install import CACHE_DIR, Tools
from bench.suite.procmon import free_port, wait_for_port

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
KAFKA_SYSTEMS = ("logbus", "tansu", "noida")


class Server:
    """One server process; `family` says which client drives it: kafka, redis or nats."""

    family = "kafka"

    def __init__(self, name: str, tools: Tools, durable: bool = True) -> None:
        self.name = name
        self.tools = tools
        self.durable = durable
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.workdir = ""

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def data_dir(self) -> str:
        return os.path.join(self.workdir, "data")

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> Server:
        runs = os.path.join(CACHE_DIR, "runs")
        os.makedirs(runs, exist_ok=True)
        self.workdir = tempfile.mkdtemp(prefix=f"{self.name}-", dir=runs)
        os.makedirs(self.data_dir)
        self.port = free_port()
        with open(os.path.join(self.workdir, "server.log"), "wb") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for_port(self.port, READY_TIMEOUT_S, lambda: self.process.poll() is None)
        except RuntimeError as error:
            log_tail = self.read_log()[-1500:]
            self.stop()
            raise RuntimeError(f"{self.name}: {error}\n{log_tail}") from error
        return self

    def read_log(self) -> str:
        try:
            with open(os.path.join(self.workdir, "server.log"), encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL whatever of it lingers, then delete the data.

        The whole group, not just our child, must be gone: noida-db's wrapper exits at once while its
        server child keeps running (and holding gigabytes) unless the group is checked.
        """
        if self.process is not None:
            group = self.process.pid
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(group, sig)
                except ProcessLookupError:
                    break
                if _group_gone(group, self.process, STOP_TIMEOUT_S):
                    break
            self.process.wait()
            self.process = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _group_gone(group: int, leader: subprocess.Popen, timeout_s: float) -> bool:
    """Poll until no process of `group` is left (reaping our own child on the way)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader.poll()
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


class Logbus(Server):
    def command(self) -> list[str]:
        return [sys.executable, "-m", "logbus", "serve", "--data-dir", self.data_dir,
                "--host", "127.0.0.1", "--port", str(self.port)]


class Tansu(Server):
    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [self.tools.tansu, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]


class Noida(Server):
    def command(self) -> list[str]:
        return [self.tools.noida, "start", "--data-dir", self.data_dir, "--host", "127.0.0.1",
                "--only", "kafka", "--kafka-port", str(self.port)]


class Redis(Server):
    """Redis 7; `durable` turns on appendonly with fsync every second (else no persistence at all)."""

    family = "redis"

    def command(self) -> list[str]:
        return ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.data_dir,
                "--save", "", "--appendonly", "yes" if self.durable else "no", "--appendfsync", "everysec",
                "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning"]


class Nats(Server):
    """NATS JetStream with file storage in the run's data dir."""

    family = "nats"

    def command(self) -> list[str]:
        return ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", self.data_dir]


SERVER_CLASSES: dict[str, type[Server]] = {
    "logbus": Logbus, "tansu": Tansu, "noida": Noida, "redis": Redis, "nats": Nats,
}


def make_server(name: str, tools: Tools, durable: bool = True) -> Server:
    return SERVER_CLASSES[name](name, tools, durable)
