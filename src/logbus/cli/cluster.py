"""`logbus cluster up` (a local ZooKeeper and N brokers) and `logbus cluster describe`.

`up` is how a user tries replication in a minute: Debian's ZooKeeper on a free loopback port and
N `logbus serve` processes (ids 1..N, ports base-port.., data in DATA_DIR/broker-N, Prometheus
metrics on metrics-base-port..), the bootstrap string printed once all are serving, a broker that
dies reported and started again (`Supervisor`) while the others keep serving, everything stopped
on Ctrl-C or SIGTERM (the brokers with a controlled shutdown, ZooKeeper last). Data and the
ZooKeeper state stay in DATA_DIR, so a second `up` continues the same cluster.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from .common import CliError, add_connection_options, client_config, import_confluent_kafka

READY_TIMEOUT_S = 30.0
POLL_S = 0.5  # how often `up` looks at its brokers
DEFAULT_METRICS_PORT = 9404  # the Prometheus JMX exporter's usual port
CHROOT = "/logbus"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cluster", help="a local cluster, or describe one")
    commands = parser.add_subparsers(dest="cluster_command", required=True)
    up = commands.add_parser("up", help="start ZooKeeper and N brokers here; Ctrl-C stops them")
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    up.add_argument("--data-dir", default="./cluster", help="where data and ZooKeeper state go (default ./cluster)")
    up.add_argument("--base-port", type=int, default=9092, help="port of broker 1; broker N gets base + N - 1")
    up.add_argument("--metrics-base-port", type=int, default=DEFAULT_METRICS_PORT,
                    help=f"metrics.port of broker 1 (default {DEFAULT_METRICS_PORT}); broker N gets base + N - 1; "
                    "0: no metrics")
    up.add_argument("--zookeeper-port", type=int, default=0, help="ZooKeeper's port (default: a free one)")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config key for every broker")
    up.set_defaults(run=run_up)
    describe = commands.add_parser("describe", help="brokers, controller, under-replicated and offline partitions")
    add_connection_options(describe)
    describe.set_defaults(run=run_describe)


# ---------------------------------------------------------------------------- up


def run_up(args: argparse.Namespace) -> int:
    from ..cluster.zookeeper_server import ZooKeeperNotInstalledError, ZooKeeperServer

    if args.brokers < 1:
        raise CliError("--brokers must be at least 1")
    session_timeout_s = _session_timeout_s(args.set)
    data_dir = os.path.abspath(args.data_dir)
    ports = [args.base_port + i for i in range(args.brokers)]
    metrics_ports = [args.metrics_base_port + i for i in range(args.brokers)] if args.metrics_base_port else []
    taken = [port for port in ports if not port_free(port)]
    if taken:
        raise CliError(f"port {taken[0]} is in use: give another --base-port")
    taken = [port for port in metrics_ports if not port_free(port)]
    if taken:
        raise CliError(f"port {taken[0]} is in use: give another --metrics-base-port (0: no metrics)")
    zookeeper = ZooKeeperServer(os.path.join(data_dir, "zookeeper"), port=args.zookeeper_port)
    try:
        zookeeper.start()
    except ZooKeeperNotInstalledError as exc:
        raise CliError(str(exc)) from None
    brokers: list[SupervisedBroker] = []
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    supervisor = Supervisor(brokers, data_dir, zookeeper.connect_string, session_timeout_s)
    try:
        for broker_id, port in enumerate(ports, start=1):
            metrics = [f"metrics.port={metrics_ports[broker_id - 1]}"] if metrics_ports else []
            broker = SupervisedBroker(broker_id, port, metrics + args.set)
            supervisor.start(broker)
            brokers.append(broker)
        _wait_serving([b.process for b in brokers if b.process is not None], ports, stop)
        if not stop.is_set():
            _print_started(brokers, zookeeper.connect_string, metrics_ports)
        while not stop.wait(POLL_S):
            supervisor.check()
    finally:
        supervisor.close()
        _stop_all([b.process for b in brokers if b.process is not None])
        zookeeper.stop()
    print("cluster stopped", flush=True)
    return 0


def _session_timeout_s(settings: list[str]) -> float:
    """The brokers' zookeeper.session.timeout.ms, in seconds, as `--set` leaves it."""
    from ..config import BrokerConfig, ConfigError
    from .serve import parse_settings

    try:
        return BrokerConfig(parse_settings(settings))["zookeeper.session.timeout.ms"] / 1000
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def _print_started(brokers: list[SupervisedBroker], zookeeper: str, metrics_ports: list[int]) -> None:
    print(f"logbus cluster of {len(brokers)} brokers; ZooKeeper at {zookeeper}{CHROOT}", flush=True)
    for broker in brokers:
        assert broker.process is not None
        print(f"broker {broker.broker_id}: 127.0.0.1:{broker.port} pid {broker.process.pid}", flush=True)
    print(f"bootstrap servers: {','.join(f'127.0.0.1:{b.port}' for b in brokers)}", flush=True)
    if metrics_ports:
        print(f"metrics: {' '.join(f'http://127.0.0.1:{port}/metrics' for port in metrics_ports)}", flush=True)
    print("A broker that exits is started again once ZooKeeper has expired its session. "
          "Ctrl-C stops the cluster.", flush=True)


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def listening(port: int) -> bool:
    """Whether something accepts connections on the loopback port (a probe that, unlike
    `port_free`, never holds the port a starting broker is about to bind)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class SupervisedBroker:
    """One broker of `cluster up`, as its supervisor sees it."""

    broker_id: int
    port: int
    settings: list[str]
    process: subprocess.Popen | None = None  # None once given up on
    serving: bool = True  # its port has answered since it was last started (`up` waits for all at first)
    restart_by: float | None = None  # set while its old session expires: when to restart it anyway


class Supervisor:
    """Keeps the brokers of `cluster up` running when one of them dies.

    A broker that exits is reported (its exit code or signal) and started again once ZooKeeper
    has expired its old session: its ephemeral /brokers/ids/N registration is gone (at once
    after a clean SIGTERM shutdown, after zookeeper.session.timeout.ms after kill -9), or at
    the latest after three session timeouts. Restarting earlier would meet its own stale
    registration. A restarted broker that exits again before it serves (a broker that cannot
    start) is left down, with a message, rather than restarted in a loop; the others keep
    running either way.
    """

    def __init__(self, brokers: list[SupervisedBroker], data_dir: str, zookeeper: str,
                 session_timeout_s: float) -> None:
        self.brokers = brokers
        self.data_dir = data_dir
        self.zookeeper = zookeeper
        self.session_timeout_s = session_timeout_s
        self._client: Any = None  # a kazoo client, connected at the first exit

    def start(self, broker: SupervisedBroker) -> None:
        broker.process = _start_broker(broker.broker_id, broker.port, self.data_dir, self.zookeeper,
                                       broker.settings)

    def check(self) -> None:
        for broker in self.brokers:
            if broker.process is None:
                continue
            if broker.restart_by is not None:
                self._restart_when_expired(broker)
            elif broker.process.poll() is not None:
                self._exited(broker, broker.process)
            elif not broker.serving and listening(broker.port):
                broker.serving = True
                _say(f"broker {broker.broker_id} is serving again on 127.0.0.1:{broker.port}")

    def close(self) -> None:
        if self._client is not None:
            self._client.stop()
            self._client.close()
            self._client = None

    def _exited(self, broker: SupervisedBroker, process: subprocess.Popen) -> None:
        log = os.path.join(self.data_dir, f"broker-{broker.broker_id}", "broker.log")
        _say(f"broker {broker.broker_id} (pid {process.pid}) {exit_reason(process.returncode)}; see {log}",
             error=True)
        if not broker.serving:
            broker.process = None
            _say(f"broker {broker.broker_id} exited before serving: not restarting it (the others keep running)",
                 error=True)
            return
        wait = 3 * self.session_timeout_s
        broker.restart_by = time.monotonic() + wait
        _say(f"restarting broker {broker.broker_id} once ZooKeeper has expired its session (at most {wait:g} s)")

    def _restart_when_expired(self, broker: SupervisedBroker) -> None:
        assert broker.restart_by is not None
        if not self._registration_gone(broker.broker_id) and time.monotonic() < broker.restart_by:
            return
        broker.restart_by = None
        broker.serving = False
        self.start(broker)
        assert broker.process is not None
        _say(f"broker {broker.broker_id} restarted (pid {broker.process.pid})")

    def _registration_gone(self, broker_id: int) -> bool:
        """Whether ZooKeeper no longer holds the broker's registration (False when it cannot tell)."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import KazooException
        from kazoo.handlers.threading import KazooTimeoutError

        try:
            if self._client is None:
                self._client = KazooClient(hosts=self.zookeeper, timeout=5)
                self._client.start(timeout=5)
            return self._client.exists(f"{CHROOT}/brokers/ids/{broker_id}") is None
        except (KazooException, KazooTimeoutError):
            self.close()
            return False


def exit_reason(returncode: int) -> str:
    """How a process ended, from its Popen return code (negative: the signal that killed it)."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


def _say(message: str, error: bool = False) -> None:
    print(f"logbus: {message}", file=sys.stderr if error else sys.stdout, flush=True)


def _start_broker(broker_id: int, port: int, data_dir: str, zookeeper: str, settings: list[str]) -> subprocess.Popen:
    directory = os.path.join(data_dir, f"broker-{broker_id}")
    os.makedirs(directory, exist_ok=True)
    command = [sys.executable, "-m", "logbus", "serve", "--data-dir", os.path.join(directory, "data"),
               "--host", "127.0.0.1", "--port", str(port), "--broker-id", str(broker_id),
               "--set", f"zookeeper.connect={zookeeper}{CHROOT}"]
    for setting in settings:
        command += ["--set", setting]
    log = open(os.path.join(directory, "broker.log"), "ab")  # noqa: SIM115 - the child keeps it
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    log.close()
    return process


def _wait_serving(brokers: list[subprocess.Popen], ports: list[int], stop: threading.Event) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = set(ports)
    while waiting and not stop.is_set():
        if time.monotonic() > deadline or any(broker.poll() is not None for broker in brokers):
            raise CliError("the brokers did not start; see broker.log in each broker's directory")
        waiting = {port for port in waiting if not listening(port)}
        stop.wait(0.1)


def _stop_all(brokers: list[subprocess.Popen]) -> None:
    """SIGTERM to every broker at once (controlled shutdowns run in parallel), then wait."""
    for broker in brokers:
        if broker.poll() is None:
            broker.send_signal(signal.SIGTERM)
    for broker in brokers:
        try:
            broker.wait(60)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()


# ---------------------------------------------------------------------------- describe


def run_describe(args: argparse.Namespace) -> int:
    kafka = import_confluent_kafka()
    admin = kafka.admin.AdminClient(client_config(args))
    try:
        cluster = admin.describe_cluster(request_timeout=args.timeout).result(args.timeout)
        metadata = admin.list_topics(timeout=args.timeout)
    except kafka.KafkaException as exc:
        raise CliError(f"cannot describe the cluster at {args.bootstrap_server}: {exc.args[0].str()}") from None
    print(format_cluster(cluster, metadata))
    return 0


def format_cluster(cluster: Any, metadata: Any) -> str:
    controller = cluster.controller.id if cluster.controller is not None else "none"
    lines = [f"Cluster: {cluster.cluster_id}\tController: {controller}\tBrokers: {len(cluster.nodes)}"]
    for node in sorted(cluster.nodes, key=lambda n: n.id):
        lines.append(f"\tBroker: {node.id}\tHost: {node.host}:{node.port}\tRack: {node.rack or '-'}")
    under, offline = [], []
    for name, topic in sorted(metadata.topics.items()):
        for partition in sorted(topic.partitions.values(), key=lambda p: p.id):
            where = f"{name}-{partition.id}"
            if partition.leader < 0:
                offline.append(where)
            elif len(partition.isrs) < len(partition.replicas):
                under.append(f"{where} (isr {','.join(map(str, partition.isrs))} of "
                             f"{','.join(map(str, partition.replicas))})")
    lines.append(f"UnderReplicatedPartitions: {len(under)}")
    lines += [f"\t{entry}" for entry in under]
    lines.append(f"OfflinePartitions: {len(offline)}")
    lines += [f"\t{entry}" for entry in offline]
    return "\n".join(lines)
