"""Real brokers for tests: a subprocess on a free loopback port with its own data dir.

    from logbus.testing import running_broker
    with running_broker(config={"num.partitions": "3"}) as broker:
        Producer({"bootstrap.servers": broker.bootstrap})

The pytest plugin (registered as `logbus` in the pytest11 entry point) gives a test a fresh
broker as the `logbus_broker` fixture. Nothing is mocked: it is `logbus serve` in a process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from .cli.cluster import port_free

if TYPE_CHECKING:
    from .cluster.zookeeper_server import ZooKeeperServer
    from .security.listeners import ListenerEndpoint

READY_TIMEOUT_S = 60.0  # a start takes a second or two; the rest is room for a loaded machine (parallel tests)
STOP_TIMEOUT_S = 20.0
CLUSTER_READY_TIMEOUT_S = 30.0
PORT_TAKEN = "Address already in use"  # in `logbus serve`'s "cannot start" line: another port is tried
# Below Linux's ephemeral range (32768-60999): a port there is never handed to a client socket,
# so nothing takes a test broker's port while it is down for a restart.
TEST_PORTS = (20000, 32767)


def worker_test_ports() -> tuple[int, int]:
    """This test process's share of TEST_PORTS: under pytest-xdist every worker (gw0, gw1 ...) has
    a range of its own, so two workers never pick the same port between probing and binding it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count <= 1:
        return TEST_PORTS
    index = int(worker[2:]) % count
    width = (TEST_PORTS[1] - TEST_PORTS[0] + 1) // count
    first = TEST_PORTS[0] + index * width
    return first, first + width - 1


def free_test_port(count: int = 1) -> int:
    """A loopback port of this process's TEST_PORTS share that nothing is bound to right now; with
    `count`, the first of that many consecutive free ports (all within the share)."""
    low, high = worker_test_ports()
    for _ in range(200):
        first = random.randint(low, high - count + 1)
        if all(port_free(port) for port in range(first, first + count)):
            return first
    raise RuntimeError(f"no {count} free consecutive ports in {low}-{high}")


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: be killed when the test process dies, so no broker outlives a killed test run.

    Linux only (prctl); elsewhere brokers are still stopped by the fixtures as usual.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class BrokerProcess:
    """A `logbus serve` subprocess; restartable on the same data dir and port.

    Without `listeners` in `config` it listens on one PLAINTEXT port (`--host/--port`). With
    them, it binds what they say (port 0: a free one) and `ports` gives every listener's port
    by name (e.g. `ports["SSL"]`); a restart binds the same ports again. `port` is the first
    listener's. With `metrics.port` set, `metrics_url` is its endpoint as bound.
    """

    def __init__(self, data_dir: str, config: dict[str, str] | None = None, broker_id: int = 0,
                 port: int = 0) -> None:
        self.data_dir = data_dir
        self.config = dict(config or {})
        self.broker_id = broker_id
        self.port = port
        self.ports: dict[str, int] = {}
        self.metrics_url: str | None = None
        self.process: subprocess.Popen | None = None
        self.log_path = os.path.join(os.path.dirname(data_dir.rstrip("/")) or ".", "broker.log")
        self.started_in_s = 0.0  # until its logs were loaded (its partitions served)
        self.listening_in_s = 0.0
        self._unread = b""  # its output read while starting, after the last line waited for
        self._began = 0.0
        self._picks_port = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """`logbus serve` on `data_dir`, or on the config's `log.dirs` when it names them."""
        data_dir = [] if "log.dirs" in self.config else ["--data-dir", self.data_dir]
        listen = [] if self._named_listeners else ["--host", "127.0.0.1", "--port", str(self.port)]
        args = [sys.executable, "-m", "logbus", "serve", *data_dir, *listen, "--broker-id", str(self.broker_id)]
        for key, value in self.config.items():
            if key == "listeners":
                value = self._listeners_on_known_ports()
            args += ["--set", f"{key}={value}"]
        return args

    @property
    def _named_listeners(self) -> bool:
        return bool(self.config.get("listeners"))

    def _listeners_on_known_ports(self) -> str:
        """`listeners` with port 0 replaced by the port each got on the first start."""
        return ",".join(str(e.at(e.host, e.port or self.ports.get(e.name, 0))) for e in self._endpoints())

    def _endpoints(self) -> list[ListenerEndpoint]:
        from .config import BrokerConfig
        from .security.listeners import parse_endpoints, parse_protocol_map

        protocols = parse_protocol_map(str(BrokerConfig(self.config)["listener.security.protocol.map"]))
        return list(parse_endpoints("listeners", self.config["listeners"], protocols))

    @property
    def plaintext_bootstrap(self) -> str | None:
        """host:port of a listener that needs neither TLS nor SASL (None when there is none)."""
        if not self._named_listeners:
            return self.bootstrap
        port = next((self.ports.get(e.name) for e in self._endpoints() if e.security_protocol == "PLAINTEXT"), None)
        return f"127.0.0.1:{port}" if port else None

    def start(self) -> BrokerProcess:
        """Start and wait until it listens and has loaded its logs (`listening_in_s`, `started_in_s`);
        a port is chosen on the first start (retried if taken)."""
        return self.launch().await_listening()

    def launch(self) -> BrokerProcess:
        """Start the process without waiting for it (`await_listening` does): brokers launched one
        after the other, then awaited, start together. Call it from the thread that outlives the
        broker: the child is killed when the thread that forked it ends (PR_SET_PDEATHSIG)."""
        self._picks_port = not (self.port or self._named_listeners)
        if self._picks_port:
            self.port = free_test_port()
        self._spawn()
        return self

    def _spawn(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        self._began = time.monotonic()
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        log.close()
        self._unread = b""

    def await_listening(self) -> BrokerProcess:
        """Wait until the launched broker listens and has loaded its logs; on a port it chose that
        turned out taken, try (at most twice) another."""
        attempts_left = 2
        while True:
            try:
                lines = self._await_ready(self._began + READY_TIMEOUT_S)
                break
            except RuntimeError as exc:
                if not self._picks_port or not attempts_left or PORT_TAKEN not in str(exc):
                    if self._picks_port:
                        self.port = 0
                    raise
            attempts_left -= 1
            self.port = free_test_port()
            self._spawn()
        self.listening_in_s = time.monotonic() - self._began
        self._await_line(" logs loaded", self._began + READY_TIMEOUT_S)
        self.started_in_s = time.monotonic() - self._began
        self.port = int(lines[-1].rsplit(":", 1)[1])
        self.ports = dict(_listener_port(line) for line in lines[:-1] if " listener " in line)
        self.metrics_url = next((line.rsplit(" ", 1)[1] for line in lines if " metrics on " in line), None)
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _await_ready(self, deadline: float) -> list[str]:
        """The broker's lines up to `... listening on host:port`, which it prints last."""
        return self._await_line(" listening on ", deadline)

    def _await_line(self, mark: str, deadline: float) -> list[str]:
        """The broker's lines up to the next one holding `mark` (those after it stay buffered)."""
        assert self.process is not None and self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while True:
                lines = self._unread.decode(errors="replace").splitlines(keepends=True)
                ready = next((i for i, line in enumerate(lines) if mark in line and line.endswith("\n")), None)
                if ready is not None:
                    self._unread = "".join(lines[ready + 1:]).encode()
                    return [line.strip() for line in lines[:ready + 1]]
                if time.monotonic() >= deadline or not selector.select(timeout=max(deadline - time.monotonic(), 0)):
                    break
                chunk = os.read(self.process.stdout.fileno(), 4096)
                if not chunk:
                    break
                self._unread += chunk
        self.kill()
        raise RuntimeError(f"broker did not start; see {self.log_path}:\n{self.read_log()[-3000:]}")

    def _drain(self) -> None:
        stream = self.process.stdout if self.process else None
        while stream is not None and stream.read(4096):
            pass

    def read_log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except FileNotFoundError:
            return ""

    def stop(self) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        finally:
            self.process = None

    def kill(self) -> None:
        """SIGKILL: a crash, for recovery tests."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self) -> BrokerProcess:
        """Start again on the same data dir and port."""
        return self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _listener_port(line: str) -> tuple[str, int]:
    """`logbus broker 0 listener SSL on 127.0.0.1:9093` -> ("SSL", 9093)."""
    words = line.split()
    return words[words.index("listener") + 1], int(line.rsplit(":", 1)[1])


@contextmanager
def running_broker(config: dict[str, str] | None = None, data_dir: str | None = None,
                   broker_id: int = 0) -> Iterator[BrokerProcess]:
    """A started broker, stopped (and its temp dir removed) afterwards.

    With `log.dirs` in `config` the broker uses those dirs (the caller removes them) and
    `data_dir` is the first of them.
    """
    workdir = tempfile.mkdtemp(prefix="logbus-test-")
    first_log_dir = (config or {}).get("log.dirs", "").split(",")[0].strip()
    broker = BrokerProcess(data_dir or first_log_dir or os.path.join(workdir, "data"), config, broker_id)
    broker.log_path = os.path.join(workdir, "broker.log")
    try:
        yield broker.start()
    finally:
        if broker.running:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def logbus_broker() -> Iterator[BrokerProcess]:
    """A fresh broker for one test, with default config."""
    with running_broker() as broker:
        yield broker


@contextmanager
def running_zookeeper() -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper (Debian's package) on a free loopback port, removed afterwards.
    pytest skips the test when ZooKeeper is not installed (`./dev test` installs it)."""
    from .cluster.zookeeper_server import ZooKeeperNotInstalledError, ZooKeeperServer

    workdir = tempfile.mkdtemp(prefix="logbus-zk-")
    server = ZooKeeperServer(workdir, port=free_test_port(), tick_ms=250)
    try:
        server.start(timeout=READY_TIMEOUT_S)
    except ZooKeeperNotInstalledError as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class Cluster:
    """Brokers 1..n of one cluster in a ZooKeeper chroot, each a `logbus serve` process."""

    def __init__(self, zookeeper: ZooKeeperServer, workdir: str, config: dict[str, str], chroot: str) -> None:
        self.zookeeper = zookeeper
        self.workdir = workdir
        self.config = {"zookeeper.connect": f"{zookeeper.connect_string}{chroot}", **config}
        self.brokers: dict[int, BrokerProcess] = {}

    def add_broker(self, broker_id: int, config: dict[str, str] | None = None) -> BrokerProcess:
        return self._new_broker(broker_id, config).start()

    def add_brokers(self, broker_ids: Iterable[int],
                    configs: Mapping[int, dict[str, str]] | None = None) -> list[BrokerProcess]:
        """Start several brokers at once (`configs`: extra settings by broker id), as `logbus cluster
        up` does: the time of one start, not of n."""
        launched = [self._new_broker(broker_id, (configs or {}).get(broker_id)).launch() for broker_id in broker_ids]
        return [broker.await_listening() for broker in launched]

    def _new_broker(self, broker_id: int, config: dict[str, str] | None = None) -> BrokerProcess:
        directory = os.path.join(self.workdir, f"broker-{broker_id}")
        os.makedirs(directory, exist_ok=True)
        broker = BrokerProcess(os.path.join(directory, "data"), {**self.config, **(config or {})}, broker_id)
        self.brokers[broker_id] = broker
        return broker

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running)

    def wait_ready(self, topics: Iterable[str] = (), timeout: float | None = None) -> None:
        """Wait until every running broker's Metadata lists exactly the running brokers and a
        running controller and, for each of `topics`, every partition with the same running
        leader. A broker prints that it listens before it has seen the others in ZooKeeper (or
        a controller elected); tests start from a cluster that agrees.
        Brokers without a PLAINTEXT listener cannot be asked without credentials and are skipped."""
        wanted = tuple(topics)
        timeout = CLUSTER_READY_TIMEOUT_S if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while (problem := self._not_ready(wanted)) is not None:
            if time.monotonic() >= deadline:
                raise RuntimeError(f"cluster not ready after {timeout} s: {problem}")
            time.sleep(0.05)

    def _not_ready(self, topics: tuple[str, ...]) -> str | None:
        """What keeps the cluster from being ready (None: nothing)."""
        from .client.client import Client
        from .client.errors import KafkaError

        running = {broker_id for broker_id, broker in self.brokers.items() if broker.running}
        leaders: dict[tuple[str, int], int] = {}
        for broker_id in sorted(running):
            address = self.brokers[broker_id].plaintext_bootstrap
            if address is None:
                continue
            client = Client(address, timeout=5.0)
            try:
                found = client.partitions(topics)
            except (OSError, KafkaError) as exc:
                return f"broker {broker_id}: {exc}"
            finally:
                client.close()
            if set(client.brokers) != running:
                return f"broker {broker_id} lists brokers {sorted(client.brokers)}, not {sorted(running)}"
            if client.controller_id not in running:
                return f"broker {broker_id} names controller {client.controller_id}"
            missing = [topic for topic in topics if not found.get(topic)]
            if missing:
                return f"broker {broker_id} does not know {missing}"
            for key in ((topic, p) for topic in topics for p in found[topic]):
                leader = client.leaders.get(key, -1)
                if leader not in running or leaders.setdefault(key, leader) != leader:
                    return f"broker {broker_id} sees leader {leader} for {key[0]}-{key[1]}"
        return None

    def stop(self) -> None:
        for broker in self.brokers.values():
            if broker.running:
                broker.kill()


@contextmanager
def running_cluster(size: int, config: dict[str, str] | None = None,
                    zookeeper: ZooKeeperServer | None = None) -> Iterator[Cluster]:
    """`size` brokers (ids 1..size) in a fresh chroot of `zookeeper` (or a ZooKeeper of their own),
    yielded once every broker's Metadata lists every broker (`Cluster.wait_ready`)."""
    with contextlib.ExitStack() as stack:
        if zookeeper is None:
            zookeeper = stack.enter_context(running_zookeeper())
        workdir = tempfile.mkdtemp(prefix="logbus-cluster-")
        stack.callback(shutil.rmtree, workdir, True)
        settings = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "3000",
                    "offsets.topic.replication.factor": str(max(1, min(size, 3))), **(config or {})}
        cluster = Cluster(zookeeper, workdir, settings, f"/logbus-{os.path.basename(workdir)}")
        stack.callback(cluster.stop)
        cluster.add_brokers(range(1, size + 1))
        cluster.wait_ready()
        yield cluster
